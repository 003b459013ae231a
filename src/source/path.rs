//! Resolving `spec.path` inside an extracted artifact without ever leaving it.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::SourceError;

/// How many symbolic links one resolution may follow (Go's SecureJoin limit, which Flux uses).
const MAX_SYMLINK_HOPS: usize = 255;

/// Joins `spec_path` to `root` as Flux's SecureJoin does: the root is the filesystem root of
/// the walk, so a `..` at the root stays there and an absolute symbolic link starts again from
/// it; no path and no link can lead outside `root`. Links are followed one component at a
/// time. The result exists; it is `root` itself when `spec_path` is empty or missing.
pub fn resolve_path(root: &Path, spec_path: Option<&str>) -> Result<PathBuf, SourceError> {
    let spec = spec_path.unwrap_or("");

    // Components still to walk, last one on top.
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, Path::new(spec));
    let mut resolved: Vec<OsString> = Vec::new();
    let mut hops = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            // Clamped: above the root is the root.
            resolved.pop();
            continue;
        }
        let shown = join(Path::new(""), &resolved).join(&part);
        let candidate = root.join(&shown);
        match fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(SourceError::PathSymlinkLoop {
                        spec_path: spec.into(),
                    });
                }
                let target = fs::read_link(&candidate).map_err(|e| not_found(&shown, e))?;
                if target.has_root() {
                    resolved.clear();
                }
                push_components(&mut pending, &target);
            }
            Ok(_) => resolved.push(part),
            // As SecureJoin: a missing component is taken as a name, and the walk goes on (a
            // later `..` may leave it); whether the result exists is checked at the end.
            Err(e) if is_not_exist(&e) => resolved.push(part),
            Err(e) => return Err(not_found(&shown, e)),
        }
    }
    let path = join(root, &resolved);
    // Flux's stat of the result, reported relative to the root: where the artifact lies on
    // disk is no tenant's business (it let one aim writes at another's tree).
    match fs::metadata(&path) {
        Ok(_) => Ok(path),
        Err(e) => Err(not_found(&join(Path::new(""), &resolved), e)),
    }
}

/// Go's `IsNotExist` as SecureJoin reads it: ENOENT or ENOTDIR.
fn is_not_exist(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// Pushes the components of `path` so that the first one is popped first. `..` is kept for
/// the walk; a root or prefix is dropped (the path is relative to the artifact root).
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}

fn join(root: &Path, parts: &[OsString]) -> PathBuf {
    let mut path = root.to_path_buf();
    path.extend(parts);
    path
}

fn not_found(path: &Path, error: io::Error) -> SourceError {
    SourceError::PathNotFound {
        path: path.to_path_buf(),
        cause: error.kind(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StepError;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("apps/prod")).unwrap();
        fs::write(root.join("apps/prod/kustomization.yaml"), "resources: []\n").unwrap();
        fs::create_dir_all(dir.path().join("secret")).unwrap();
        symlink("apps/prod", root.join("prod")).unwrap();
        symlink("../secret", root.join("escape")).unwrap();
        symlink("/etc", root.join("etc")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        dir
    }

    #[test]
    fn empty_and_dot_paths_are_the_root() {
        let dir = tree();
        let root = dir.path().join("root");
        for spec in [None, Some(""), Some("."), Some("./"), Some("/")] {
            assert_eq!(resolve_path(&root, spec).unwrap(), root, "{spec:?}");
        }
    }

    #[test]
    fn plain_and_symlinked_paths_resolve_inside() {
        let dir = tree();
        let root = dir.path().join("root");
        assert_eq!(
            resolve_path(&root, Some("./apps/prod")).unwrap(),
            root.join("apps/prod")
        );
        assert_eq!(resolve_path(&root, Some("prod")).unwrap(), root.join("apps/prod"));
        assert_eq!(
            resolve_path(&root, Some("apps/prod/../prod/")).unwrap(),
            root.join("apps/prod")
        );
    }

    // Before, an escaping path was an error ("leads outside the source root") where Flux
    // builds the root: Flux's SecureJoin clamps `..` and absolute links to the artifact root.
    #[test]
    fn dot_dot_escapes_are_clamped_to_the_root() {
        let dir = tree();
        let root = dir.path().join("root");
        for spec in ["..", "../..", "/../../", "apps/../../.."] {
            assert_eq!(resolve_path(&root, Some(spec)).unwrap(), root, "{spec}");
        }
        assert_eq!(
            resolve_path(&root, Some("../../apps/prod")).unwrap(),
            root.join("apps/prod")
        );
        // A missing component is a name a later `..` may leave, as in SecureJoin.
        assert_eq!(
            resolve_path(&root, Some("nothing/../apps/prod")).unwrap(),
            root.join("apps/prod")
        );
        let err = resolve_path(&root, Some("apps/../../secret")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kustomization path not found: stat secret: no such file or directory"
        );
        assert_eq!(err.reason(), "ArtifactFailed");
    }

    #[test]
    fn symlinks_leading_outside_are_clamped_to_the_root() {
        let dir = tree();
        let root = dir.path().join("root");
        // `escape` -> ../secret: the parent of the root is the root, which has no `secret`.
        let err = resolve_path(&root, Some("escape")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kustomization path not found: stat secret: no such file or directory"
        );
        // `etc` -> /etc: an absolute link starts from the artifact root, where `etc` is that
        // link again (SecureJoin gives up the same way).
        let err = resolve_path(&root, Some("./etc/passwd")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kustomization path './etc/passwd': too many levels of symbolic links"
        );
        symlink("/secret", root.join("hidden")).unwrap();
        let err = resolve_path(&root, Some("hidden")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kustomization path not found: stat secret: no such file or directory"
        );
        symlink("/apps/prod", root.join("absolute")).unwrap();
        assert_eq!(
            resolve_path(&root, Some("absolute")).unwrap(),
            root.join("apps/prod")
        );
    }

    #[test]
    fn a_missing_path_is_named_inside_the_source_root() {
        let dir = tree();
        let root = dir.path().join("root");
        // Before, the message held the tree's place on disk ("stat /tmp/artifacts-.../tree-3/
        // apps/staging"), which told a tenant where to aim at another tenant's tree.
        let err = resolve_path(&root, Some("./apps/staging")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kustomization path not found: stat apps/staging: no such file or directory"
        );
        assert_eq!(err.reason(), "ArtifactFailed");
        // Through a symlink, the reported path is the resolved one.
        let err = resolve_path(&root, Some("prod/missing/deeper")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kustomization path not found: stat apps/prod/missing/deeper: no such file or directory"
        );
        assert!(!err.to_string().contains(dir.path().to_str().unwrap()), "{err}");
    }

    #[test]
    fn symlink_loops_end() {
        let dir = tree();
        let root = dir.path().join("root");
        let err = resolve_path(&root, Some("loop")).unwrap_err();
        assert!(err.to_string().contains("'loop'"), "{err}");
    }
}
