//! The symbolic links of an unpacked tree (an artifact or a Git checkout), made last.
//!
//! The unpacker writes every file and directory while the tree holds no link at all, so no
//! write can be redirected. Then the links are made here, never below another link, and each
//! is resolved on disk once all of them exist: a link that is harmless by its own name can
//! point through others (`up -> ..`, `out -> up/..`), so only the full resolution tells where
//! it leads. A link resolving outside the root fails the unpacking; a dangling or looping one
//! is dropped, because it could start resolving somewhere else later (Flux skips every symlink).

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// A link to make: `rel` below the root pointing at `target`; `entry` names it in messages.
#[derive(Debug)]
pub(crate) struct Symlink {
    pub entry: String,
    pub rel: PathBuf,
    pub target: String,
}

/// Why a link was refused; the unpacker words it for its own input.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SymlinkError {
    #[error("'{entry}': link target '{target}' leads outside the tree")]
    Escape { entry: String, target: String },
    #[error("'{entry}': parent '{parent}' is a symbolic link")]
    BelowLink { entry: String, parent: String },
    #[error("'{entry}': {source}")]
    Write { entry: String, source: io::Error },
}

/// Links kept (they resolve inside the root) and dangling ones dropped.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Placed {
    pub kept: u64,
    pub dropped: u64,
}

/// Whether `target`, read from the directory of the link at `rel`, stays below the root by
/// its name alone. [`place`] makes the check that counts; this one refuses the obvious early.
pub(crate) fn lexically_inside(rel: &Path, target: &str) -> bool {
    let mut depth = rel.parent().map_or(0, |p| p.components().count());
    for component in Path::new(target).components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(up) => depth = up,
                None => return false,
            },
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// Makes `links` below `root` (canonical), then resolves each with all of them in place.
pub(crate) fn place(root: &Path, links: Vec<Symlink>) -> Result<Placed, SymlinkError> {
    let mut created = Vec::with_capacity(links.len());
    for Symlink { entry, rel, target } in links {
        let link = root.join(&rel);
        // Never place a link below another link: its location would no longer be what the
        // lexical check saw.
        let mut parent = PathBuf::new();
        for part in rel.parent().into_iter().flat_map(Path::iter) {
            parent.push(part);
            if fs::symlink_metadata(root.join(&parent)).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(SymlinkError::BelowLink {
                    entry,
                    parent: parent.display().to_string(),
                });
            }
        }
        let made = make_parent(&link)
            .and_then(|()| clear_file_slot(&link))
            .and_then(|()| std::os::unix::fs::symlink(&target, &link));
        if let Err(source) = made {
            return Err(SymlinkError::Write { entry, source });
        }
        created.push((entry, link, target));
    }
    let mut placed = Placed::default();
    for (entry, link, target) in created {
        match fs::canonicalize(&link) {
            Ok(resolved) if resolved.starts_with(root) => placed.kept += 1,
            Ok(_) => return Err(SymlinkError::Escape { entry, target }),
            // A link may already be gone if it was listed twice.
            Err(_) => match fs::remove_file(&link) {
                Ok(()) => placed.dropped += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(SymlinkError::Write { entry, source }),
            },
        }
    }
    Ok(placed)
}

/// Creates the directories above `path`.
pub(crate) fn make_parent(path: &Path) -> io::Result<()> {
    path.parent().map_or(Ok(()), fs::create_dir_all)
}

/// Frees `path` for a new file or link by unlinking what is there (never following it, and
/// never a directory). Unlinking rather than truncating keeps a hard link's other name intact.
pub(crate) fn clear_file_slot(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "a directory of that name exists",
        )),
        Ok(_) => fs::remove_file(path),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_read_from_the_links_directory() {
        assert!(lexically_inside(Path::new("a/b/link"), "../c"));
        assert!(lexically_inside(Path::new("a/link"), "../c"));
        assert!(!lexically_inside(Path::new("a/link"), "../../c"));
        assert!(!lexically_inside(Path::new("link"), "/etc/passwd"));
    }
}
