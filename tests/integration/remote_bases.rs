//! Remote entries of `resources` built by `kustomize-controller build`: Git bases from a real
//! Git smart-HTTP server (`git http-backend`, from e2e/flux/build.sh) by tag, branch and
//! commit, with `//subdir`; HTTP files from a server the test runs; refusals (SSH,
//! `--no-remote-bases=true`), size limits and a stalled server; and the real kustomize's
//! build of the same remote base for comparison.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use serde_json::json;

use crate::support::controller::{Scenario, condition};
use crate::support::flux::{GitRepo, GitServer};

fn build(root: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kustomize-controller"))
        .arg("build")
        .arg(root.join("app"))
        .arg("--root")
        .arg(root)
        .args(extra)
        .output()
        .expect("the binary runs")
}

/// A root whose `app/kustomization.yaml` lists `resources`.
fn app_with(resources: &[&str]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("app")).unwrap();
    let list: String = resources.iter().map(|r| format!("  - {r}\n")).collect();
    std::fs::write(
        tmp.path().join("app/kustomization.yaml"),
        format!("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n{list}"),
    )
    .unwrap();
    tmp
}

fn documents(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "build failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout.clone()).unwrap();
    text.split("\n---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_yaml::from_str(d).unwrap())
        .collect()
}

fn failure(output: &Output) -> String {
    assert!(
        !output.status.success(),
        "build succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(output.stdout.is_empty(), "a failed build printed objects");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Name and `data.value` of each built ConfigMap.
fn config_maps(output: &Output) -> Vec<(String, String)> {
    documents(output)
        .iter()
        .map(|d| {
            (
                d["metadata"]["name"].as_str().unwrap().to_string(),
                d["data"]["value"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn base_files(v: &str) -> Vec<(String, String)> {
    vec![
        (
            "base/kustomization.yaml".into(),
            "resources:\n  - cm.yaml\n".into(),
        ),
        (
            "base/cm.yaml".into(),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: remote-cm\ndata:\n  value: {v}\n"),
        ),
        // An overlay reaching a sibling directory of the repository, as kustomize allows.
        (
            "overlays/prod/kustomization.yaml".into(),
            "namePrefix: prod-\nresources:\n  - ../../base\n".into(),
        ),
    ]
}

fn commit(repo: &GitRepo, files: &[(String, String)]) -> String {
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    repo.commit(&files)
}

/// A repository with v1.0.0 (annotated tag) and branch `stable` at the first commit ("one"),
/// and main at a second commit ("two"). Returns the first commit.
fn two_commits(repo: &GitRepo) -> String {
    let first = commit(repo, &base_files("one"));
    repo.git(&["tag", "-a", "v1.0.0", "-m", "release"]);
    repo.git(&["push", "--quiet", "origin", "v1.0.0", "HEAD:refs/heads/stable"]);
    commit(repo, &base_files("two"));
    first
}

#[tokio::test]
async fn git_bases_by_tag_branch_commit_and_subdirectory() {
    let server = GitServer::start().await;
    let repo = server.repository("bases");
    let first = two_commits(&repo);
    let url = &repo.url;
    let cases = [
        (format!("{url}//base?ref=v1.0.0"), "remote-cm", "one"),
        (format!("{url}//base?ref=stable"), "remote-cm", "one"),
        (format!("{url}//base?ref=main"), "remote-cm", "two"),
        (format!("{url}//base?version={first}"), "remote-cm", "one"),
        (format!("{url}//base"), "remote-cm", "two"),
        (
            format!("git::{url}/overlays/prod?ref=v1.0.0"),
            "prod-remote-cm",
            "one",
        ),
    ];
    for (entry, name, v) in cases {
        let root = app_with(&[&entry]);
        assert_eq!(
            config_maps(&build(root.path(), &[])),
            [(name.to_string(), v.to_string())],
            "{entry}"
        );
    }
}

#[tokio::test]
async fn a_missing_ref_or_directory_names_the_entry() {
    let server = GitServer::start().await;
    let repo = server.repository("bases");
    two_commits(&repo);
    let entry = format!("{}//base?ref=v9", repo.url);
    let err = failure(&build(app_with(&[&entry]).path(), &[]));
    assert!(
        err.contains(&format!("app/kustomization.yaml: remote resource '{entry}'")),
        "{err}"
    );
    assert!(err.contains("ref 'v9' not found in the repository"), "{err}");
    let entry = format!("{}//nowhere?ref=main", repo.url);
    let err = failure(&build(app_with(&[&entry]).path(), &[]));
    assert!(
        err.contains("'nowhere' is not a directory in the repository"),
        "{err}"
    );
}

#[tokio::test]
async fn our_build_of_a_remote_base_matches_the_real_kustomize() {
    let server = GitServer::start().await;
    let repo = server.repository("bases");
    two_commits(&repo);
    let entry = format!("{}//overlays/prod?ref=v1.0.0", repo.url);
    let root = app_with(&[&entry]);
    let ours = documents(&build(root.path(), &[]));
    let bin = std::env::var("E2E_BIN")
        .expect("E2E_BIN is not set: `make test` sets it from e2e/controlplane/build.sh");
    let theirs = Command::new(Path::new(&bin).join("kustomize"))
        .arg("build")
        .arg(root.path().join("app"))
        .output()
        .expect("kustomize runs");
    assert_eq!(ours, documents(&theirs));
    assert_eq!(ours[0]["metadata"]["name"], "prod-remote-cm");
}

#[tokio::test]
async fn a_repository_above_the_size_limit_is_refused() {
    let server = GitServer::start().await;
    let repo = server.repository("big");
    let mut files = base_files("one");
    // Incompressible, so the download and the tree are both larger than the limit.
    let noise: String = (0..60_000u64)
        .map(|i| format!("{:016x}\n", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect();
    files.push(("base/noise.txt".into(), noise));
    commit(&repo, &files);
    let entry = format!("{}//base", repo.url);
    let err = failure(&build(app_with(&[&entry]).path(), &["--remote-max-bytes=100000"]));
    assert!(err.contains(&format!("remote resource '{entry}'")), "{err}");
    assert!(err.contains("larger than the limit of 100000 bytes"), "{err}");
}

#[test]
fn ssh_git_urls_are_refused_naming_the_file_and_entry() {
    for entry in [
        "git@github.com:org/repo//base?ref=v1",
        "ssh://git@example.com/org/repo.git//base",
    ] {
        let err = failure(&build(app_with(&[entry]).path(), &[]));
        assert!(
            err.contains(&format!("app/kustomization.yaml: remote resource '{entry}'")),
            "{err}"
        );
        assert!(
            err.contains("Git over SSH") && err.contains("no SSH credentials"),
            "{err}"
        );
    }
}

#[test]
fn no_remote_bases_refuses_git_bases_with_fluxs_message() {
    // Nothing is contacted: the host does not exist.
    let entry = "https://git.example.invalid/org/repo.git//base?ref=v1";
    let err = failure(&build(app_with(&[entry]).path(), &["--no-remote-bases=true"]));
    assert!(
        err.contains(&format!("app/kustomization.yaml: remote resource '{entry}'")),
        "{err}"
    );
    assert!(err.contains("fs-security-constraint abs"), "{err}");
    assert!(err.contains("is not in or below"), "{err}");
}

/// Every regular file below `dir` whose content is `text`.
fn files_holding(dir: &Path, text: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            found.extend(files_holding(&path, text));
        } else if meta.is_file() && std::fs::read(&path).unwrap() == text.as_bytes() {
            found.push(path);
        }
    }
    found
}

#[test]
fn a_remote_base_cannot_write_outside_its_checkout() {
    // Reproduction (before): a Git base whose folder `s` lists `a -> ..`, `b -> a/..` and
    // `c -> b/../../pwned`, each inside the tree by its name alone, then a blob also named
    // `c`. The checkout wrote the blob through the link chain, to `pwned` two levels above
    // the checkout cache, here beside the build's own directories. A chain alone was kept.
    use crate::support::crafted_git::{Repository, serve};
    const WRITTEN: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted\n";
    let mut repo = Repository::default();
    let (up, climb) = (repo.blob(".."), repo.blob("a/.."));
    let (aim, planted) = (repo.blob("b/../../pwned"), repo.blob(WRITTEN));
    let kustomization = repo.blob("resources: []\n");
    let writes_through = repo.tree(&[
        ("120000", "a", up),
        ("120000", "b", climb),
        ("120000", "c", aim),
        ("100644", "c", planted),
    ]);
    let chain_only = repo.tree(&[("120000", "a", up), ("120000", "b", climb)]);
    let mut commit = |s| {
        let root = repo.tree(&[("100644", "kustomization.yaml", kustomization), ("40000", "s", s)]);
        repo.commit(root)
    };
    let (duplicate, chain) = (commit(writes_through), commit(chain_only));
    let url = serve(&repo);
    for (commit, offence) in [
        (duplicate, "tree entry 's/c' appears twice"),
        (chain, "'s/b': link target 'a/..' leads outside the tree"),
    ] {
        let root = app_with(&[&format!("{url}?ref={commit}")]);
        let tmp = root.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_kustomize-controller"))
            .args(["build", "app", "--root", "."])
            .current_dir(root.path())
            .env("TMPDIR", &tmp)
            .output()
            .expect("the binary runs");
        assert_eq!(
            files_holding(root.path(), WRITTEN),
            Vec::<std::path::PathBuf>::new()
        );
        let mut names: Vec<_> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["app", "tmp"],
            "nothing beside the build's own directories"
        );
        let err = failure(&output);
        assert!(
            err.contains(&format!("checking out {url} at {commit}: {offence}")),
            "{err}"
        );
        assert!(
            !err.contains(root.path().to_str().unwrap()),
            "a local path leaks: {err}"
        );
    }
}

/// A tiny HTTP server: `/cm.yaml` a ConfigMap, `/big.yaml` 200 kB, `/stall` never answers,
/// `/to-127.0.0.2` redirects to `/cm.yaml` at 127.0.0.2 (same port), anything else 404.
fn http_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let n = stream.read(&mut buf).unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = request.split(' ').nth(1).unwrap_or("/").to_string();
                if path == "/to-127.0.0.2" {
                    let location = format!("http://127.0.0.2:{}/cm.yaml", addr.port());
                    let _ = write!(
                        stream,
                        "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    return;
                }
                let (status, body) = match path.as_str() {
                    "/cm.yaml" => ("200 OK", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-http\ndata:\n  value: http\n".to_string()),
                    "/big.yaml" => ("200 OK", "# padding\n".repeat(20_000)),
                    p if p.starts_with("/stall") => {
                        std::thread::sleep(Duration::from_secs(60));
                        return;
                    }
                    _ => ("404 Not Found", String::new()),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    format!("http://{addr}")
}

#[test]
fn http_file_resources_are_fetched() {
    let base = http_server();
    let root = app_with(&[&format!("{base}/cm.yaml")]);
    assert_eq!(
        config_maps(&build(root.path(), &[])),
        [("from-http".to_string(), "http".to_string())]
    );
    // Flux fetches HTTP files even with remote bases disabled.
    assert_eq!(
        config_maps(&build(root.path(), &["--no-remote-bases=true"])),
        [("from-http".to_string(), "http".to_string())]
    );
}

/// Finding 10 of issue 28: HTTP resources and Git bases reach any address (the cloud metadata
/// service, the controller's own ports) and follow redirects anywhere. Flux does too, so that
/// stays the default; `--no-remote-local-addresses` and `--remote-denied-cidrs` refuse such
/// addresses, after DNS resolution and for redirect targets.
#[test]
fn denied_networks_refuse_files_git_bases_and_redirects() {
    let base = http_server();
    let port = base.rsplit(':').next().unwrap();
    let file = format!("{base}/cm.yaml");
    let from_http = [("from-http".to_string(), "http".to_string())];
    assert_eq!(
        config_maps(&build(app_with(&[&file]).path(), &[])),
        from_http,
        "Flux's default"
    );
    let local = ["--no-remote-local-addresses=true"];
    let by_name = format!("http://localhost:{port}/cm.yaml");
    let git = format!("{base}/repo.git//base?timeout=5s");
    for entry in [&file, &by_name, &git] {
        let err = failure(&build(app_with(&[entry]).path(), &local));
        assert!(
            err.contains(&format!("remote resource '{entry}'"))
                && (err.contains("in the denied network 127.0.0.0/8")
                    || err.contains("in the denied network ::1/128")),
            "{err}"
        );
    }
    // Operator networks: 127.0.0.2 alone is denied, so 127.0.0.1 is reached, but not a
    // redirect from there to 127.0.0.2.
    let cidr = ["--remote-denied-cidrs=127.0.0.2/32"];
    assert_eq!(config_maps(&build(app_with(&[&file]).path(), &cidr)), from_http);
    let redirect = format!("{base}/to-127.0.0.2");
    let err = failure(&build(app_with(&[&redirect]).path(), &cidr));
    assert!(
        err.contains("host '127.0.0.2' is at 127.0.0.2, in the denied network 127.0.0.2/32"),
        "{err}"
    );
}

/// Finding 10 of issue 28: `--no-remote-bases=true` refused Git bases only; with
/// `--no-remote-bases-include-http=true` it refuses HTTP files too (alone, that flag changes
/// nothing).
#[test]
fn no_remote_bases_can_refuse_http_files_too() {
    let base = http_server();
    let file = format!("{base}/cm.yaml");
    let root = app_with(&[&file]);
    let strict = ["--no-remote-bases=true", "--no-remote-bases-include-http=true"];
    let err = failure(&build(root.path(), &strict));
    assert!(
        err.contains(&format!(
            "HTTP resource '{file}' is refused: remote resources are disabled"
        )),
        "{err}"
    );
    assert_eq!(
        config_maps(&build(root.path(), &["--no-remote-bases-include-http=true"])),
        [("from-http".to_string(), "http".to_string())]
    );
}

#[test]
fn http_file_errors_are_clear() {
    let base = http_server();
    let missing = format!("{base}/missing.yaml");
    let err = failure(&build(app_with(&[&missing]).path(), &[]));
    assert!(
        err.contains(&format!(
            "remote resource '{missing}': HTTP Error: status code 404 (Not Found)"
        )),
        "{err}"
    );
    let big = format!("{base}/big.yaml");
    let err = failure(&build(app_with(&[&big]).path(), &["--remote-max-bytes=100000"]));
    assert!(
        err.contains(&format!("remote resource '{big}'"))
            && err.contains("larger than the limit of 100000 bytes"),
        "{err}"
    );
}

#[test]
fn a_stalled_server_times_out() {
    let base = http_server();
    let file = format!("{base}/stall");
    let started = std::time::Instant::now();
    let err = failure(&build(app_with(&[&file]).path(), &["--remote-timeout=2s"]));
    assert!(
        err.contains(&format!("remote resource '{file}'")) && err.contains("timed out after 2s"),
        "{err}"
    );
    let git = format!("{base}/stall/repo.git//base?timeout=2s");
    let err = failure(&build(app_with(&[&git]).path(), &[]));
    assert!(
        err.contains(&format!("remote resource '{git}'")) && err.contains("timed out after 2s"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the timeouts were not honoured"
    );
}

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";

#[tokio::test]
async fn the_controller_builds_a_remote_base_and_no_remote_bases_changes_nothing() {
    let server = GitServer::start().await;
    let repo = server.repository("bases");
    two_commits(&repo);
    let s = Scenario::new("remote-bases").await;
    let kustomization = format!("resources:\n  - {}//base?ref=v1.0.0\n  - local.yaml\n", repo.url);
    let local =
        |v: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\ndata:\n  value: {v}\n");
    let mut controller = s.start_controller(&[]);
    let local1 = local("x");
    s.publish(
        "repo",
        REV1,
        &[("kustomization.yaml", &kustomization), ("local.yaml", &local1)],
    )
    .await;
    s.apply("app", json!({})).await;
    let applied = s.wait_applied(&controller, "app", REV1).await;
    assert_eq!(s.config_map_value("remote-cm").await.as_deref(), Some("one"));
    assert_eq!(s.config_map_value("local").await.as_deref(), Some("x"));
    controller.terminate();

    let controller = s.start_controller(&["--no-remote-bases=true"]);
    let local2 = local("y");
    s.publish(
        "repo",
        REV2,
        &[("kustomization.yaml", &kustomization), ("local.yaml", &local2)],
    )
    .await;
    let ks = s
        .wait_ready(&controller, "app", "False", "fs-security-constraint")
        .await;
    let ready = condition(&ks, "Ready").unwrap();
    assert_eq!(ready.reason, "BuildFailed", "{ready:?}");
    assert!(
        ready
            .message
            .starts_with("kustomize build failed: kustomization.yaml: remote resource '")
            && ready.message.contains("is not in or below"),
        "{}",
        ready.message
    );
    // Nothing applied, nothing pruned, the inventory kept.
    assert_eq!(s.config_map_value("local").await.as_deref(), Some("x"));
    assert_eq!(s.config_map_value("remote-cm").await.as_deref(), Some("one"));
    let status = ks.status.clone().unwrap();
    assert_eq!(status.last_applied_revision.as_deref(), Some(REV1));
    assert_eq!(status.inventory, applied.status.unwrap().inventory);
    s.delete().await;
}

#[tokio::test]
async fn checkouts_are_cached_by_repository_and_commit() {
    use kustomize::remote::parse_repo_spec;
    use kustomize_controller::deadline::Deadline;
    use kustomize_controller::remote::{RemoteConfig, RemoteFetcher};
    let server = GitServer::start().await;
    let repo = server.repository("bases");
    let first = two_commits(&repo);
    let deadline = Deadline::after(std::time::Duration::from_secs(300));
    let fetcher =
        std::sync::Arc::new(RemoteFetcher::new(RemoteConfig::default()).unwrap()).until(deadline.clone());
    let checkout = |entry: String| {
        let spec = parse_repo_spec(&entry).unwrap();
        fetcher
            .repository(&spec)
            .unwrap_or_else(|e| panic!("{entry}: {e}"))
    };
    let by_tag = checkout(format!("{}//base?ref=v1.0.0", repo.url));
    assert_eq!(
        std::fs::read_to_string(by_tag.join("base/cm.yaml")).unwrap(),
        base_files("one")[1].1
    );
    // The same commit by another name is the same checkout, not a second download.
    assert_eq!(checkout(format!("{}//base?ref=stable", repo.url)), by_tag);
    assert_eq!(
        checkout(format!("{}//overlays/prod?ref=v1.0.0", repo.url)),
        by_tag
    );
    let by_main = checkout(format!("{}?ref=main", repo.url));
    assert_ne!(by_main, by_tag);
    // Nobody can aim at a checkout (issue 28, finding 2: tenant A planted a file in tenant B's
    // tree, named by a counter): another fetcher's checkout of the same commit has another
    // name, not one made from the commit or a count.
    let other =
        std::sync::Arc::new(RemoteFetcher::new(RemoteConfig::default()).unwrap()).until(deadline.clone());
    let again = other
        .repository(&parse_repo_spec(&format!("{}//base?ref=v1.0.0", repo.url)).unwrap())
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(again.join("base/cm.yaml")).unwrap(),
        base_files("one")[1].1
    );
    let name = |path: &Path| path.file_name().unwrap().to_string_lossy().into_owned();
    assert_ne!(name(&again), name(&by_tag));
    assert_ne!(again.parent(), by_tag.parent());
    // The cache is bounded: with room for one checkout, the older one is removed.
    let small = std::sync::Arc::new(
        RemoteFetcher::new(RemoteConfig {
            max_cached_trees: 1,
            ..RemoteConfig::default()
        })
        .unwrap(),
    )
    .until(deadline);
    let old = small
        .repository(&parse_repo_spec(&format!("{}?ref=v1.0.0", repo.url)).unwrap())
        .unwrap();
    let new = small
        .repository(&parse_repo_spec(&format!("{}?ref=main", repo.url)).unwrap())
        .unwrap();
    assert!(
        !old.exists() && new.join("base/cm.yaml").is_file(),
        "{old:?} {new:?}"
    );
    // A full commit id already checked out needs no server at all.
    drop(server);
    assert_eq!(checkout(format!("{}//base?ref={first}", repo.url)), by_tag);
}
