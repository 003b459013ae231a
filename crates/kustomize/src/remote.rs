//! Remote entries of `resources`/`components`: kustomize's Git URL grammar, and the hook
//! through which the engine asks for a remote tree or file without doing any I/O itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a clone may take when the URL does not say (`?timeout=`): kustomize's default.
pub(crate) const DEFAULT_GIT_TIMEOUT: Duration = Duration::from_secs(27);

/// Go's longest duration (2^63 - 1 ns, about 292 years): kustomize cannot read a longer
/// `?timeout=` and uses its default instead, and so do we.
const MAX_GIT_TIMEOUT: Duration = Duration::from_nanos(i64::MAX as u64);

/// A Git repository, a ref in it and the kustomization directory inside it, parsed from a
/// kustomize remote base such as `github.com/org/repo//path?ref=v1.2.3`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RepoSpec {
    /// Scheme, user and host as written (`https://github.com/`, `git@github.com:`).
    pub host: String,
    /// The repository path on the host (`org/repo`, `org/repo.git`, `org/project/_git/repo`).
    pub(crate) repo_path: String,
    /// The kustomization directory inside the repository ("" for its root).
    pub path: String,
    /// Branch, tag or commit (`?ref=`, else `?version=`); "" for the default branch.
    pub git_ref: String,
    /// `?timeout=` (seconds or a Go duration), else [`DEFAULT_GIT_TIMEOUT`].
    pub timeout: Duration,
}

impl RepoSpec {
    /// What `git clone` would be given: host and repository path.
    pub fn clone_url(&self) -> String {
        format!("{}{}", self.host, self.repo_path)
    }

    /// Whether the repository is reached over SSH (`ssh://` or the scp-like `user@host:`).
    pub fn is_ssh(&self) -> bool {
        self.host.starts_with("ssh://") || !self.host.contains("://")
    }
}

/// Parses a kustomize Git URL; an error means the entry is not one (kustomize then treats it
/// as a local path or a plain HTTP file).
pub fn parse_repo_spec(entry: &str) -> Result<RepoSpec, String> {
    if Path::new(entry).is_absolute() {
        return Err(format!("uri looks like abs path: {entry}"));
    }
    let (rest, query) = entry.split_once('?').unwrap_or((entry, ""));
    let (git_ref, timeout) = parse_query(query);
    let (host, rest) = split_host(rest)?;
    let segments = if host.starts_with("file://") {
        None
    } else {
        Some(2)
    };
    let (repo_path, path) = split_repo_path(rest, segments).ok_or("failed to parse repo path segment")?;
    if repo_path.is_empty() {
        return Err("failed to parse repo path segment".into());
    }
    let trimmed = path.trim_start_matches('/');
    if exits_repo(trimmed) {
        return Err(format!("url path exits repo: {rest}"));
    }
    Ok(RepoSpec {
        host,
        repo_path: repo_path.to_string(),
        path: trimmed.to_string(),
        git_ref,
        timeout,
    })
}

/// Whether a path inside the repository climbs above its root once cleaned.
fn exits_repo(path: &str) -> bool {
    let mut depth = 0i32;
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

/// `ref` (else `version`) and `timeout` from the query; bad values, and timeouts longer than
/// Go can hold, fall back to defaults.
fn parse_query(query: &str) -> (String, Duration) {
    let value = |key: &str| {
        query
            .split('&')
            .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| percent_decode(v))
            .filter(|v| !v.is_empty())
    };
    let git_ref = value("ref").or_else(|| value("version")).unwrap_or_default();
    let timeout = value("timeout")
        .and_then(|t| match t.parse::<u64>() {
            Ok(seconds) if seconds > 0 => Some(Duration::from_secs(seconds)),
            Ok(_) => None,
            Err(_) => go_duration(&t).filter(|d| !d.is_zero()),
        })
        .filter(|t| *t <= MAX_GIT_TIMEOUT)
        .unwrap_or(DEFAULT_GIT_TIMEOUT);
    (git_ref, timeout)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A Go duration such as `90s`, `1m30s`, `1.5m`.
fn go_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    // A sum of many digits may be infinite, which no Duration holds.
    Duration::try_from_secs_f64(total).ok()
}

/// Splits scheme, user and host from the rest, the way kustomize normalises them: a
/// `git::` prefix is dropped, `github.com/...` without a scheme means HTTPS, and an scp-like
/// `user@host:path` is accepted.
fn split_host(entry: &str) -> Result<(String, &str), String> {
    let entry = strip_prefix_ignore_case(entry, "git::").unwrap_or(entry);
    let (scheme, rest) = ["ssh://", "https://", "http://", "file://"]
        .iter()
        .find_map(|s| strip_prefix_ignore_case(entry, s).map(|rest| (*s, rest)))
        .unwrap_or(("", entry));
    let user_len = rest
        .char_indices()
        .take_while(|(i, c)| {
            if *i == 0 {
                c.is_ascii_alphabetic()
            } else {
                c.is_ascii_alphanumeric() || *c == '-'
            }
        })
        .count();
    let (user, rest) = match rest[user_len..].strip_prefix('@') {
        Some(after) if user_len > 0 => (&rest[..=user_len], after),
        _ => ("", rest),
    };
    let lower = rest.to_ascii_lowercase();
    let github = lower.starts_with("github.com/") || lower.starts_with("github.com:");
    let scp = scheme.is_empty() && (!user.is_empty() || github);
    if scheme.is_empty() && !scp {
        return Err("failed to parse scheme".into());
    }
    if scheme == "file://" {
        return Ok((scheme.to_string(), rest));
    }
    let slash = rest.find('/');
    let separator = match rest.find(':') {
        Some(colon) if scp && colon > 0 && slash.is_none_or(|s| colon < s) => Some(colon),
        _ => slash,
    };
    let (mut host, path) = match separator {
        Some(i) => (rest[..=i].to_string(), &rest[i + 1..]),
        None => (rest.to_string(), ""),
    };
    let (mut scheme, mut user) = (scheme.to_string(), user.to_string());
    if github {
        if scheme == "ssh://" || !user.is_empty() {
            scheme = String::new();
            host = "github.com:".into();
        } else {
            scheme = "https://".into();
            user = String::new();
            host = "github.com/".into();
        }
    }
    if host.is_empty() {
        return Err("failed to parse host segment".into());
    }
    Ok((format!("{scheme}{user}{host}"), path))
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    // `get`, not slicing: in a non-ASCII entry the prefix's length may end inside a character.
    text.get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
        .then(|| &text[prefix.len()..])
}

/// Repository path and the path inside it: at `_git/<repo>`, at `//`, after `.git`, else
/// after the first `segments` path elements (`None`: everything is the repository).
fn split_repo_path(rest: &str, segments: Option<usize>) -> Option<(&str, &str)> {
    if let Some(i) = rest.find("_git/") {
        let after = i + "_git/".len();
        let end = rest[after..].find('/').map_or(rest.len(), |j| after + j);
        return Some((&rest[..end], rest.get(end + 1..).unwrap_or("")));
    }
    if let Some(i) = rest.find("//") {
        return Some((&rest[..i], &rest[i + 2..]));
    }
    if let Some(i) = rest.find(".git") {
        let end = i + ".git".len();
        return Some((&rest[..end], &rest[end..]));
    }
    let Some(n) = segments else {
        return Some((rest, ""));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    if parts.len() < n {
        return None;
    }
    let repo_len = parts[..n].iter().map(|p| p.len()).sum::<usize>() + n - 1;
    Some((&rest[..repo_len], rest.get(repo_len + 1..).unwrap_or("")))
}

/// Whether an entry is a plain HTTP(S) file URL (kustomize fetches these as one file).
pub(crate) fn is_http_url(entry: &str) -> bool {
    strip_prefix_ignore_case(entry, "https://")
        .or_else(|| strip_prefix_ignore_case(entry, "http://"))
        .is_some()
}

/// Where the engine gets remote entries from. Implementations do the network I/O and
/// enforce their own time and size bounds; the engine only builds what they hand back.
pub trait RemoteResources: Send + Sync + std::fmt::Debug {
    /// The checked-out tree of `spec`'s repository at its ref: a directory whose contents
    /// are the repository root.
    fn repository(&self, spec: &RepoSpec) -> Result<PathBuf, String>;
    /// The body of an HTTP(S) URL.
    fn file(&self, url: &str) -> Result<Vec<u8>, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(entry: &str) -> (String, String, String, String) {
        let s = parse_repo_spec(entry).unwrap_or_else(|e| panic!("{entry}: {e}"));
        (s.host, s.repo_path, s.path, s.git_ref)
    }

    fn owned(parts: [&str; 4]) -> (String, String, String, String) {
        let [a, b, c, d] = parts.map(str::to_string);
        (a, b, c, d)
    }

    #[test]
    fn kustomize_url_forms() {
        let table = [
            (
                "github.com/org/repo//path?ref=v1.2.3",
                ["https://github.com/", "org/repo", "path", "v1.2.3"],
            ),
            ("github.com/org/repo", ["https://github.com/", "org/repo", "", ""]),
            (
                "github.com/org/repo/deploy/base?ref=main",
                ["https://github.com/", "org/repo", "deploy/base", "main"],
            ),
            (
                "https://host/org/repo.git//path?ref=main",
                ["https://host/", "org/repo.git", "path", "main"],
            ),
            (
                "git::https://host/org/repo.git/sub/dir?version=v1",
                ["https://host/", "org/repo.git", "sub/dir", "v1"],
            ),
            (
                "https://github.com/org/repo/sub?ref=x&timeout=90",
                ["https://github.com/", "org/repo", "sub", "x"],
            ),
            (
                "http://127.0.0.1:8080/app.git//base?ref=v1&version=v2",
                ["http://127.0.0.1:8080/", "app.git", "base", "v1"],
            ),
            (
                "https://dev.azure.com/org/project/_git/repo/path/to?ref=b",
                ["https://dev.azure.com/", "org/project/_git/repo", "path/to", "b"],
            ),
            (
                "https://user@dev.azure.com/o/p/_git/r",
                ["https://user@dev.azure.com/", "o/p/_git/r", "", ""],
            ),
            (
                "git@github.com:org/repo//x",
                ["git@github.com:", "org/repo", "x", ""],
            ),
            (
                "ssh://git@host.com/org/repo.git",
                ["ssh://git@host.com/", "org/repo.git", "", ""],
            ),
            (
                "git@gitlab.com:org/repo.git/base",
                ["git@gitlab.com:", "org/repo.git", "/base", ""],
            ),
        ];
        for (entry, want) in table {
            let mut want = owned(want);
            want.2 = want.2.trim_start_matches('/').to_string();
            assert_eq!(spec(entry), want, "{entry}");
        }
    }

    #[test]
    fn ssh_forms_are_recognised() {
        for entry in [
            "git@github.com:org/repo",
            "ssh://git@host.com/org/repo.git",
            "ssh://github.com/org/repo",
        ] {
            assert!(parse_repo_spec(entry).unwrap().is_ssh(), "{entry}");
        }
        // kustomize reads a bare `github.com:` as HTTPS.
        for entry in [
            "github.com/org/repo",
            "https://host/org/repo.git",
            "github.com:org/repo",
        ] {
            assert!(!parse_repo_spec(entry).unwrap().is_ssh(), "{entry}");
        }
    }

    #[test]
    fn timeout_query_as_kustomize_reads_it() {
        let timeout = |q: &str| parse_repo_spec(&format!("github.com/o/r?{q}")).unwrap().timeout;
        assert_eq!(timeout("timeout=61"), Duration::from_secs(61));
        assert_eq!(timeout("timeout=1m30s"), Duration::from_secs(90));
        assert_eq!(timeout("timeout=500ms"), Duration::from_millis(500));
        assert_eq!(timeout("timeout=bad"), DEFAULT_GIT_TIMEOUT);
        assert_eq!(timeout("timeout=0"), DEFAULT_GIT_TIMEOUT);
        // Longer than Go's longest duration: kustomize's parser fails and so its default
        // applies. Before, the first panicked in Duration::from_secs_f64 (issue 28, 12).
        for absurd in [
            "100000000000000000000s",
            &format!("{}h", "9".repeat(400)),
            "18446744073709551615",
            "9223372037",
            "2562048h",
        ] {
            assert_eq!(
                timeout(&format!("timeout={absurd}")),
                DEFAULT_GIT_TIMEOUT,
                "{absurd}"
            );
        }
        // The longest one Go holds still counts.
        assert_eq!(timeout("timeout=9223372036"), Duration::from_secs(9_223_372_036));
        assert_eq!(
            parse_repo_spec("github.com/o/r?ref=feature%2Fx").unwrap().git_ref,
            "feature/x"
        );
    }

    #[test]
    fn local_paths_and_plain_files_are_not_repositories() {
        for entry in [
            "base",
            "../base",
            "deploy/app.yaml",
            "gitlab.com/org/repo",
            "https://example.com/x.yaml",
            "/abs/path",
        ] {
            assert!(parse_repo_spec(entry).is_err(), "{entry}");
        }
        // The scheme prefixes end inside a character of these.
        for entry in ["données.yaml", "objsҎaml", "ħttps://x"] {
            assert!(parse_repo_spec(entry).is_err(), "{entry}");
            assert!(!is_http_url(entry), "{entry}");
        }
        assert_eq!(
            parse_repo_spec("https://host/org/repo//../x").unwrap_err(),
            "url path exits repo: org/repo//../x"
        );
    }

    #[test]
    fn http_urls_are_recognised_case_insensitively() {
        assert!(is_http_url("HTTPS://example.com/x.yaml"));
        assert!(is_http_url("http://example.com/x.yaml"));
        assert!(!is_http_url("github.com/org/repo"));
    }

    /// Remote trees and files from directories and strings of the test.
    #[derive(Debug)]
    struct Fake {
        repo: PathBuf,
        file: &'static str,
    }

    impl RemoteResources for Fake {
        fn repository(&self, spec: &RepoSpec) -> Result<PathBuf, String> {
            match spec.git_ref.as_str() {
                "v1" => Ok(self.repo.clone()),
                other => Err(format!("ref '{other}' not found")),
            }
        }
        fn file(&self, url: &str) -> Result<Vec<u8>, String> {
            match url {
                "https://files.example/cm.yaml" => Ok(self.file.as_bytes().to_vec()),
                _ => Err("HTTP Error: status code 404 (Not Found)".into()),
            }
        }
    }

    fn write(root: &Path, files: &[(&str, &str)]) {
        for (path, text) in files {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n";

    fn build_with_remote(
        app: &str,
        repo_files: &[(&str, &str)],
    ) -> Result<Vec<String>, super::super::BuildError> {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            &[("root/app/kustomization.yaml", app), ("secret.yaml", CM)],
        );
        write(&tmp.path().join("repo"), repo_files);
        let remote = Fake {
            repo: tmp.path().join("repo"),
            file: "apiVersion: v1\nkind: Secret\nmetadata:\n  name: from-http\n",
        };
        let options = super::super::BuildOptions::new().with_remote(std::sync::Arc::new(remote));
        let built = super::super::build(&tmp.path().join("root"), Path::new("app"), &options)?;
        Ok(built
            .objects
            .iter()
            .map(|o| {
                let v = o.to_value();
                format!(
                    "{}/{}",
                    v["kind"].as_str().unwrap(),
                    v["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect())
    }

    #[test]
    fn remote_bases_components_and_files_come_through_the_hook() {
        let app = "resources:\n  - https://git.example/org/repo//overlay?ref=v1\n  - https://files.example/cm.yaml\ncomponents:\n  - https://git.example/org/repo//component?ref=v1\n";
        let repo = [
            (
                "overlay/kustomization.yaml",
                "namePrefix: o-\nresources: [../base]\n",
            ),
            ("base/kustomization.yaml", "resources: [cm.yaml]\n"),
            ("base/cm.yaml", CM),
            (
                "component/kustomization.yaml",
                "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nnameSuffix: -c\n",
            ),
        ];
        assert_eq!(
            build_with_remote(app, &repo).unwrap(),
            ["ConfigMap/o-cm-c", "Secret/from-http-c"]
        );
    }

    #[test]
    fn an_openapi_path_may_be_a_url_fetched_through_the_hook() {
        // kustomize loads `openapi.path` as any file: a URL is fetched.
        let tmp = tempfile::tempdir().unwrap();
        let app = "openapi:\n  path: https://files.example/cm.yaml\nconfigMapGenerator:\n  - name: g\n    literals: [a=b]\n";
        write(tmp.path(), &[("root/app/kustomization.yaml", app)]);
        let build = |schema: &'static str| {
            let remote = Fake {
                repo: tmp.path().join("repo"),
                file: schema,
            };
            let options = super::super::BuildOptions::new().with_remote(std::sync::Arc::new(remote));
            super::super::build(&tmp.path().join("root"), Path::new("app"), &options)
        };
        let built = build("definitions: {}\n").unwrap();
        assert_eq!(built.objects.len(), 1);
        let err = build("kind: NotASchema\n").unwrap_err().to_string();
        assert!(
            err.contains("invalid schema file https://files.example/cm.yaml: no 'definitions' map"),
            "{err}"
        );
        let without_remote = super::super::BuildOptions::new();
        let err =
            super::super::build(&tmp.path().join("root"), Path::new("app"), &without_remote).unwrap_err();
        assert!(err.to_string().contains("https://files.example/cm.yaml"), "{err}");
    }

    #[test]
    fn a_remote_tree_may_not_reach_outside_itself() {
        // `../secret.yaml` from the repository root would be the test's own file.
        let app = "resources:\n  - https://git.example/org/repo?ref=v1\n";
        let repo = [("kustomization.yaml", "resources: [../secret.yaml]\n")];
        let err = build_with_remote(app, &repo).unwrap_err();
        assert!(
            matches!(err, super::super::BuildError::OutsideRoot { .. }),
            "{err}"
        );
    }

    #[test]
    fn fetch_failures_name_the_file_and_the_entry() {
        let app = "resources:\n  - https://git.example/org/repo//x?ref=v2\n";
        assert_eq!(
            build_with_remote(app, &[]).unwrap_err().to_string(),
            "app/kustomization.yaml: remote resource 'https://git.example/org/repo//x?ref=v2': \
             ref 'v2' not found (fetched as a file: HTTP Error: status code 404 (Not Found))"
        );
        let app = "resources:\n  - https://files.example/missing.yaml\n";
        assert_eq!(
            build_with_remote(app, &[]).unwrap_err().to_string(),
            "app/kustomization.yaml: remote resource 'https://files.example/missing.yaml': \
             HTTP Error: status code 404 (Not Found)"
        );
    }
}
