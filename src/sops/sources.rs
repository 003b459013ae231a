//! The files a kustomization's `secretGenerator` reads (`files`, `envs`) and its patch files,
//! decrypted before the build when they are SOPS documents, through every local
//! kustomization the build reaches. Artifact trees are cached and shared, so plaintext is
//! never written into them: the decrypted files go into a private copy of the tree, in this
//! process's work directory (see `workdir`).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use kustomize::file::FILE_NAMES;
use serde_json::Value;

use super::{Decrypted, Format, Keys, SopsError, decrypt_file, workdir};

/// The largest generator source read while decryption is on, encrypted or not, as Flux
/// (5 MiB): a source is read whole and its plaintext held in memory.
pub(crate) const MAX_SOURCE_BYTES: u64 = 5 << 20;

/// Why the generator sources could not be decrypted.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Names the file inside the artifact.
    #[error("{file}: {source}")]
    Decrypt {
        file: String,
        #[source]
        source: SopsError,
    },
    /// Flux's message, after the file's name inside the artifact.
    #[error("{file}: cannot decrypt file with size ({size} bytes) exceeding limit ({MAX_SOURCE_BYTES})")]
    TooLarge { file: String, size: u64 },
    #[error("cannot copy the artifact for its decrypted files: {0}")]
    Copy(#[from] std::io::Error),
}

impl SourceError {
    pub(crate) fn is_unsupported(&self) -> bool {
        matches!(self, SourceError::Decrypt { source, .. } if source.is_unsupported())
    }
}

/// The tree a build reads: the artifact itself, or a private copy holding the decrypted
/// generator sources (dropped with the workspace).
pub(crate) struct Workspace {
    _copy: Option<tempfile::TempDir>,
    pub(crate) root: PathBuf,
    pub(crate) dir: PathBuf,
    /// The plaintext the decrypted sources revealed.
    pub(crate) secrets: Vec<String>,
}

impl Workspace {
    /// The workspace for building `dir` inside `root`; with `keys`, SOPS-encrypted generator
    /// sources are decrypted into a copy.
    pub(crate) fn new(root: &Path, dir: &Path, keys: Option<&Keys>) -> Result<Workspace, SourceError> {
        let plain = |secrets| Workspace {
            _copy: None,
            root: root.to_path_buf(),
            dir: dir.to_path_buf(),
            secrets,
        };
        let Some(keys) = keys else {
            return Ok(plain(Vec::new()));
        };
        let absolute = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            root.join(dir)
        };
        let sources = decrypt_sources(root, &absolute, keys)?;
        if sources.value.is_empty() {
            return Ok(plain(Vec::new()));
        }
        let copy = materialize(root, &sources.value)?;
        let inner = absolute.canonicalize()?;
        let relative = inner.strip_prefix(root.canonicalize()?).unwrap_or(Path::new(""));
        Ok(Workspace {
            root: copy.path().to_path_buf(),
            dir: copy.path().join(relative),
            _copy: Some(copy),
            secrets: sources.secrets,
        })
    }
}

/// Decrypted files: each path (inside the artifact root) with its plaintext content.
pub(crate) type PlainFiles = Vec<(PathBuf, Vec<u8>)>;

/// The decrypted files under `dir`, by path (inside `root`), and their plaintext values.
fn decrypt_sources(root: &Path, dir: &Path, keys: &Keys) -> Result<Decrypted<PlainFiles>, SourceError> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut found = Vec::new();
    let mut visited = Vec::new();
    visit(&root, dir, &mut visited, &mut found);
    let mut files = Vec::new();
    let mut secrets = Vec::new();
    for (path, format) in found {
        let shown = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
        let Some(bytes) = read_source(&path, &shown)? else {
            continue;
        };
        if !String::from_utf8_lossy(&bytes).contains(format.marker()) {
            continue;
        }
        let plain = decrypt_file(&bytes, format, keys)
            .map_err(|source| SourceError::Decrypt { file: shown, source })?;
        secrets.extend(plain.secrets);
        if let Ok(text) = std::str::from_utf8(&plain.value) {
            secrets.push(text.to_string());
        }
        files.push((path, plain.value));
    }
    Ok(Decrypted {
        value: files,
        secrets,
    })
}

/// The content of a generator source, refused above [`MAX_SOURCE_BYTES`] before it is read
/// (and never read past it); `None` when it cannot be read, which the build reports.
fn read_source(path: &Path, shown: &str) -> Result<Option<Vec<u8>>, SourceError> {
    let Ok(file) = fs::File::open(path) else {
        return Ok(None);
    };
    let too_large = |size| SourceError::TooLarge {
        file: shown.to_string(),
        size,
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > MAX_SOURCE_BYTES {
        return Err(too_large(size));
    }
    let mut bytes = Vec::new();
    if file.take(MAX_SOURCE_BYTES + 1).read_to_end(&mut bytes).is_err() {
        return Ok(None);
    }
    if bytes.len() as u64 > MAX_SOURCE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(Some(bytes))
}

/// A private copy of `root` with `files` (absolute paths inside `root`) replaced.
fn materialize(root: &Path, files: &[(PathBuf, Vec<u8>)]) -> std::io::Result<tempfile::TempDir> {
    let root = root.canonicalize()?;
    let copy = workdir::build_dir()?;
    copy_tree(&root, copy.path())?;
    for (path, bytes) in files {
        if let Ok(relative) = path.strip_prefix(&root) {
            fs::write(copy.path().join(relative), bytes)?;
        }
    }
    Ok(copy)
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, target)?;
        } else {
            fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Collects the generator sources of the kustomization in `dir` and of the local
/// kustomizations it refers to; a directory without one is searched below.
fn visit(root: &Path, dir: &Path, visited: &mut Vec<PathBuf>, found: &mut Vec<(PathBuf, Format)>) {
    let Some(dir) = inside(root, dir) else { return };
    if visited.contains(&dir) {
        return;
    }
    visited.push(dir.clone());
    let Some(file) = FILE_NAMES.iter().map(|n| dir.join(n)).find(|p| p.is_file()) else {
        if let Ok(entries) = fs::read_dir(&dir) {
            for entry in entries.flatten().filter(|e| e.path().is_dir()) {
                visit(root, &entry.path(), visited, found);
            }
        }
        return;
    };
    let Some(kustomization) = fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_yaml::from_str::<Value>(&t).ok())
    else {
        return;
    };
    let mut add = |path: &str, format: Format| {
        if let Some(path) = inside(root, &dir.join(path))
            && path.is_file()
            && !found.iter().any(|(p, _)| *p == path)
        {
            found.push((path, format));
        }
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default()
    };
    for generator in kustomization["secretGenerator"].as_array().into_iter().flatten() {
        for source in strings(&generator["files"]) {
            let (key, path) = source.split_once('=').unwrap_or((&source, &source));
            add(path, Format::for_path(key));
        }
        let mut envs = strings(&generator["envs"]);
        envs.extend(generator["env"].as_str().map(str::to_string));
        for env in envs {
            let format = match Format::for_path(&env) {
                Format::Binary => Format::Dotenv,
                other => other,
            };
            add(&env, format);
        }
    }
    for patch in kustomization["patches"].as_array().into_iter().flatten() {
        if let Some(path) = patch["path"].as_str().filter(|p| !p.contains("://")) {
            add(path, Format::for_path(path));
        }
    }
    for field in ["resources", "components", "bases"] {
        for resource in strings(&kustomization[field]) {
            if !resource.contains("://") {
                let path = dir.join(&resource);
                if path.is_dir() {
                    visit(root, &path, visited, found);
                }
            }
        }
    }
}

/// `path` resolved, when it stays inside `root`.
fn inside(root: &Path, path: &Path) -> Option<PathBuf> {
    let resolved = path.canonicalize().ok()?;
    resolved.starts_with(root).then_some(resolved)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use age::secrecy::ExposeSecret;

    use super::*;

    fn keys() -> Keys {
        let identity = age::x25519::Identity::generate();
        let secret = BTreeMap::from([(
            "id.agekey".to_string(),
            identity.to_string().expose_secret().as_bytes().to_vec(),
        )]);
        Keys::from_secret("ns/keys", &secret, None).unwrap()
    }

    fn tree(size: usize) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir(root.path().join("secrets")).unwrap();
        fs::write(
            root.path().join("kustomization.yaml"),
            "secretGenerator:\n- name: db\n  envs: [secrets/db.env]\n",
        )
        .unwrap();
        fs::write(root.path().join("secrets/db.env"), vec![b'#'; size]).unwrap();
        root
    }

    // Before, a source of any size was read whole into memory (and, encrypted, decrypted).
    #[test]
    fn a_source_over_five_mebibytes_is_refused_naming_the_file() {
        let root = tree(5 * 1024 * 1024 + 1);
        let error = Workspace::new(root.path(), Path::new(""), Some(&keys()))
            .err()
            .unwrap();
        assert_eq!(
            error.to_string(),
            "secrets/db.env: cannot decrypt file with size (5242881 bytes) exceeding limit (5242880)"
        );
    }

    #[test]
    fn a_source_of_five_mebibytes_is_read() {
        let root = tree(5 * 1024 * 1024);
        let workspace = Workspace::new(root.path(), Path::new(""), Some(&keys())).unwrap();
        assert!(workspace.secrets.is_empty(), "nothing to decrypt in a plain file");
    }
}
