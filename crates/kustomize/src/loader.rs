//! A file system view confined to the artifact root: every path is resolved (symlinks
//! included) and must stay inside the root, and every read is size-bounded. This mirrors
//! Flux's secure file system under `LoadRestrictionsNone`.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::error::BuildError;
use super::remote::RemoteResources;

/// Confined, size-bounded reads below one root directory.
#[derive(Debug, Clone)]
pub struct Loader {
    root: PathBuf,
    max_file_bytes: u64,
    /// Where remote entries come from; None refuses them.
    remote: Option<Arc<dyn RemoteResources>>,
}

impl Loader {
    /// A loader for `root`, which must exist.
    pub fn new(root: &Path, max_file_bytes: u64) -> Result<Self, BuildError> {
        let root = root.canonicalize().map_err(|e| BuildError::Io {
            path: root.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(Loader {
            root,
            max_file_bytes,
            remote: None,
        })
    }

    /// This loader with remote entries served by `remote`.
    pub(crate) fn with_remote(mut self, remote: Option<Arc<dyn RemoteResources>>) -> Self {
        self.remote = remote;
        self
    }

    /// The source of remote entries, if they are allowed.
    pub(crate) fn remote(&self) -> Option<&Arc<dyn RemoteResources>> {
        self.remote.as_ref()
    }

    /// A loader for a remote tree: its own root, the same bounds and remote source.
    pub(crate) fn for_tree(&self, root: &Path) -> Result<Self, BuildError> {
        Ok(Loader::new(root, self.max_file_bytes)?.with_remote(self.remote.clone()))
    }

    /// The canonical artifact root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `path` (absolute, built from [`Loader::root`]) to its canonical form and
    /// checks it is inside the root. `from` names the file that referenced it.
    pub fn resolve(&self, path: &Path, from: &Path) -> Result<PathBuf, BuildError> {
        let lexical = normalize(path);
        if !lexical.starts_with(&self.root) {
            return Err(BuildError::OutsideRoot {
                path: self.display(path),
            });
        }
        let real = match path.canonicalize() {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(BuildError::Missing {
                    path: self.display(path),
                    from: self.display(from),
                });
            }
            Err(e) => {
                return Err(BuildError::Io {
                    path: self.display(path),
                    message: e.to_string(),
                });
            }
        };
        if !real.starts_with(&self.root) {
            return Err(BuildError::OutsideRoot {
                path: self.display(path),
            });
        }
        Ok(real)
    }

    /// Whether `path` is a directory inside the root.
    pub fn is_dir(&self, path: &Path) -> bool {
        path.canonicalize()
            .map(|p| p.starts_with(&self.root) && p.is_dir())
            .unwrap_or(false)
    }

    /// Whether `path` is a regular file inside the root.
    pub fn is_file(&self, path: &Path) -> bool {
        path.canonicalize()
            .map(|p| p.starts_with(&self.root) && p.is_file())
            .unwrap_or(false)
    }

    /// Reads a whole file as bytes, refusing files above the size bound.
    pub(crate) fn read_bytes(&self, path: &Path, from: &Path) -> Result<Vec<u8>, BuildError> {
        let real = self.resolve(path, from)?;
        let io = |e: std::io::Error| BuildError::Io {
            path: self.display(path),
            message: e.to_string(),
        };
        let file = std::fs::File::open(&real).map_err(io)?;
        let mut buf = Vec::new();
        file.take(self.max_file_bytes + 1)
            .read_to_end(&mut buf)
            .map_err(io)?;
        if buf.len() as u64 > self.max_file_bytes {
            return Err(BuildError::TooLarge {
                path: self.display(path),
                limit: self.max_file_bytes,
            });
        }
        Ok(buf)
    }

    /// Reads a whole UTF-8 text file.
    pub fn read_text(&self, path: &Path, from: &Path) -> Result<String, BuildError> {
        let bytes = self.read_bytes(path, from)?;
        String::from_utf8(bytes).map_err(|_| BuildError::Io {
            path: self.display(path),
            message: "file is not valid UTF-8".into(),
        })
    }

    /// A path shown relative to the root, so messages do not leak temporary directories: one
    /// outside the root is shown with the `..` that lead to it, never as an absolute path
    /// (that told a tenant where the cached trees of others lie).
    pub fn display(&self, path: &Path) -> PathBuf {
        let lexical = normalize(path);
        if !lexical.has_root() {
            return lexical;
        }
        let shared = self
            .root
            .components()
            .zip(lexical.components())
            .take_while(|(a, b)| a == b)
            .count();
        let mut shown: PathBuf =
            std::iter::repeat_n(Component::ParentDir, self.root.components().count() - shared).collect();
        shown.extend(lexical.components().skip(shared));
        if shown.as_os_str().is_empty() {
            shown.push(".");
        }
        shown
    }

    /// `display` as a string, for error fields that are strings.
    pub fn show(&self, path: &Path) -> String {
        self.display(path).display().to_string()
    }
}

/// Removes `.` and resolves `..` lexically (without touching the file system).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, Loader) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("root/app")).unwrap();
        std::fs::write(dir.path().join("root/app/a.yaml"), "kind: A\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "TOPSECRET").unwrap();
        let loader = Loader::new(&dir.path().join("root"), 16).unwrap();
        (dir, loader)
    }

    #[test]
    fn reads_inside_the_root() {
        let (_d, l) = tree();
        let p = l.root().join("app/a.yaml");
        assert_eq!(l.read_text(&p, &p).unwrap(), "kind: A\n");
    }

    #[test]
    fn dot_dot_escape_is_refused() {
        let (_d, l) = tree();
        let p = l.root().join("app/../../secret.txt");
        let err = l
            .read_text(&p, &l.root().join("app/kustomization.yaml"))
            .unwrap_err();
        assert!(matches!(err, BuildError::OutsideRoot { .. }), "{err}");
        // Before, the path outside was shown absolute, naming the artifact's place on disk.
        assert_eq!(
            err.to_string(),
            "../secret.txt: path is outside the artifact root (security constraint)"
        );
        assert!(
            !err.to_string().contains("TOPSECRET"),
            "content must not leak: {err}"
        );
    }

    #[test]
    fn symlink_escape_is_refused() {
        let (d, l) = tree();
        std::os::unix::fs::symlink(d.path().join("secret.txt"), l.root().join("app/link.txt")).unwrap();
        let p = l.root().join("app/link.txt");
        let err = l.read_text(&p, &p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "app/link.txt: path is outside the artifact root (security constraint)"
        );
    }

    #[test]
    fn oversized_file_is_refused() {
        let (_d, l) = tree();
        let p = l.root().join("app/big.yaml");
        std::fs::write(&p, "x".repeat(17)).unwrap();
        let err = l.read_text(&p, &p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "app/big.yaml: file is larger than the limit of 16 bytes"
        );
    }

    #[test]
    fn missing_file_names_the_referrer() {
        let (_d, l) = tree();
        let err = l
            .read_text(
                &l.root().join("app/nope.yaml"),
                &l.root().join("app/kustomization.yaml"),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "app/nope.yaml: no such file or directory (referenced from app/kustomization.yaml)"
        );
    }
}
