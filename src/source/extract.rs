//! Safe extraction of a gzip-compressed tarball into a fresh directory.
//!
//! The archive comes from another controller over the network, so every entry is treated as
//! hostile: nothing may be written, linked or made reachable outside the destination.
//!
//! Two phases keep that simple. First regular files, directories and hard links are written
//! while the tree holds no symbolic link at all, so no write can be redirected. Then symbolic
//! links are made and checked on disk by the rule in [`super::symlinks`], which Git checkouts
//! of remote bases share.

use std::cell::Cell;
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use flate2::read::MultiGzDecoder;
use tar::EntryType;

use super::symlinks::{self, Symlink, SymlinkError};

/// Bounds on what one archive may expand to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractLimits {
    /// Maximum size of the uncompressed tar stream (headers and contents).
    pub max_bytes: u64,
    /// Maximum number of tar entries.
    pub max_entries: u64,
}

impl Default for ExtractLimits {
    fn default() -> Self {
        Self {
            max_bytes: 256 << 20,
            max_entries: 100_000,
        }
    }
}

/// What an extraction produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtractStats {
    /// Tar entries read (including skipped ones).
    pub entries: u64,
    /// Regular files and hard links written.
    pub files: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Symbolic links kept (they resolve inside the root).
    pub symlinks: u64,
    /// Dangling symbolic links dropped.
    pub dropped_symlinks: u64,
}

/// Why an archive was refused. Every entry-specific error names the entry.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("tar entry '{entry}': absolute paths are not allowed")]
    AbsolutePath { entry: String },
    #[error("tar entry '{entry}': '..' path components are not allowed")]
    ParentComponent { entry: String },
    #[error("tar entry '{entry}': empty path")]
    EmptyPath { entry: String },
    #[error("tar entry '{entry}': link target '{target}' leads outside the extraction root")]
    LinkEscape { entry: String, target: String },
    #[error("tar entry '{entry}': hard link target '{target}' is not a regular file extracted before it")]
    HardLinkTarget { entry: String, target: String },
    #[error("tar entry '{entry}': parent '{parent}' is a symbolic link")]
    ThroughSymlink { entry: String, parent: String },
    #[error("tar entry '{entry}': {kind} entries are not allowed")]
    Unsupported { entry: String, kind: String },
    #[error("archive expands beyond the limit of {limit} bytes (at tar entry '{entry}')")]
    TooManyBytes { entry: String, limit: u64 },
    #[error("archive has more than {limit} entries (at tar entry '{entry}')")]
    TooManyEntries { entry: String, limit: u64 },
    #[error("corrupt archive{}: {source}", at_entry(.entry))]
    Corrupt {
        entry: Option<String>,
        source: io::Error,
    },
    #[error("tar entry '{entry}': {source}")]
    Write { entry: String, source: io::Error },
    #[error("extraction directory {}: {source}", .dest.display())]
    Destination { dest: PathBuf, source: io::Error },
}

impl From<SymlinkError> for ExtractError {
    fn from(e: SymlinkError) -> Self {
        match e {
            SymlinkError::Escape { entry, target } => ExtractError::LinkEscape { entry, target },
            SymlinkError::BelowLink { entry, parent } => ExtractError::ThroughSymlink { entry, parent },
            SymlinkError::Write { entry, source } => ExtractError::Write { entry, source },
        }
    }
}

fn at_entry(entry: &Option<String>) -> String {
    entry
        .as_ref()
        .map(|e| format!(" at tar entry '{e}'"))
        .unwrap_or_default()
}

/// Extracts the gzip-compressed tarball `reader` into `dest`, which must be missing (it is
/// created) or empty. On error `dest` may hold a partial tree: the caller removes it.
pub fn extract(reader: impl Read, dest: &Path, limits: &ExtractLimits) -> Result<ExtractStats, ExtractError> {
    prepare_destination(dest)?;
    let root = fs::canonicalize(dest).map_err(|source| ExtractError::Destination {
        dest: dest.into(),
        source,
    })?;

    let exceeded = Rc::new(Cell::new(false));
    let stream = LimitedReader {
        inner: MultiGzDecoder::new(reader),
        left: limits.max_bytes,
        exceeded: exceeded.clone(),
    };
    let mut archive = tar::Archive::new(stream);
    let mut stats = ExtractStats::default();
    let mut links = Vec::new();
    let mut current: Option<String> = None;

    // Maps a stream error to a size-limit error when the limit tripped, else to corruption.
    let stream_error = |entry: &Option<String>, source: io::Error| {
        if exceeded.get() {
            ExtractError::TooManyBytes {
                entry: entry.clone().unwrap_or_default(),
                limit: limits.max_bytes,
            }
        } else {
            ExtractError::Corrupt {
                entry: entry.clone(),
                source,
            }
        }
    };

    let entries = archive.entries().map_err(|e| stream_error(&None, e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| stream_error(&current, e))?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        current = Some(name.clone());
        stats.entries += 1;
        if stats.entries > limits.max_entries {
            return Err(ExtractError::TooManyEntries {
                entry: name,
                limit: limits.max_entries,
            });
        }
        let kind = entry.header().entry_type();
        if matches!(kind, EntryType::XGlobalHeader | EntryType::XHeader) {
            continue;
        }
        let path = entry.path().map_err(|e| stream_error(&current, e))?;
        let rel = archive_path(&name, &path)?;
        match kind {
            EntryType::Directory => {
                if let Some(rel) = rel {
                    fs::create_dir_all(root.join(rel))
                        .map_err(|source| ExtractError::Write { entry: name, source })?;
                }
            }
            EntryType::Regular | EntryType::Continuous => {
                let rel = rel.ok_or_else(|| ExtractError::EmptyPath { entry: name.clone() })?;
                let target = root.join(&rel);
                make_parent(&target, &name)?;
                clear_file_slot(&target, &name)?;
                let mut file = fs::File::create_new(&target).map_err(|source| ExtractError::Write {
                    entry: name.clone(),
                    source,
                })?;
                let written = io::copy(&mut entry, &mut file).map_err(|e| {
                    if exceeded.get() {
                        ExtractError::TooManyBytes {
                            entry: name.clone(),
                            limit: limits.max_bytes,
                        }
                    } else if e.kind() == io::ErrorKind::UnexpectedEof
                        || e.kind() == io::ErrorKind::InvalidInput
                    {
                        ExtractError::Corrupt {
                            entry: Some(name.clone()),
                            source: e,
                        }
                    } else {
                        ExtractError::Write {
                            entry: name.clone(),
                            source: e,
                        }
                    }
                })?;
                stats.files += 1;
                stats.bytes += written;
            }
            EntryType::Link => {
                let rel = rel.ok_or_else(|| ExtractError::EmptyPath { entry: name.clone() })?;
                let target_name = link_name(&entry, &name)?;
                let target_rel = hard_link_target(&name, &target_name)?;
                let source = root.join(target_rel);
                let is_file = fs::symlink_metadata(&source)
                    .map(|m| m.is_file())
                    .unwrap_or(false);
                if !is_file {
                    return Err(ExtractError::HardLinkTarget {
                        entry: name,
                        target: target_name,
                    });
                }
                let link = root.join(&rel);
                make_parent(&link, &name)?;
                clear_file_slot(&link, &name)?;
                fs::hard_link(&source, &link)
                    .map_err(|source| ExtractError::Write { entry: name, source })?;
                stats.files += 1;
            }
            EntryType::Symlink => {
                let rel = rel.ok_or_else(|| ExtractError::EmptyPath { entry: name.clone() })?;
                let target = link_name(&entry, &name)?;
                if !symlinks::lexically_inside(&rel, &target) {
                    return Err(ExtractError::LinkEscape { entry: name, target });
                }
                links.push(Symlink {
                    entry: name,
                    rel,
                    target,
                });
            }
            other => {
                return Err(ExtractError::Unsupported {
                    entry: name,
                    kind: entry_kind(other),
                });
            }
        }
    }

    // The tar end marker can come before the gzip trailer: read to the end so truncation and
    // checksum errors are not missed.
    let mut rest = archive.into_inner();
    io::copy(&mut rest, &mut io::sink()).map_err(|e| stream_error(&None, e))?;

    let placed = symlinks::place(&root, links)?;
    stats.symlinks = placed.kept;
    stats.dropped_symlinks = placed.dropped;
    Ok(stats)
}

fn prepare_destination(dest: &Path) -> Result<(), ExtractError> {
    let err = |source| ExtractError::Destination {
        dest: dest.into(),
        source,
    };
    match fs::read_dir(dest) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "directory is not empty",
            ))),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir(dest).map_err(err),
        Err(e) => Err(err(e)),
    }
}

/// The entry path as plain components below the root; `None` for the root itself.
fn archive_path(name: &str, path: &Path) -> Result<Option<PathBuf>, ExtractError> {
    let mut rel = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(ExtractError::ParentComponent { entry: name.into() }),
            Component::RootDir | Component::Prefix(_) => {
                return Err(ExtractError::AbsolutePath { entry: name.into() });
            }
        }
    }
    Ok((!rel.as_os_str().is_empty()).then_some(rel))
}

fn link_name<R: Read>(entry: &tar::Entry<'_, R>, name: &str) -> Result<String, ExtractError> {
    match entry.link_name_bytes() {
        Some(bytes) if !bytes.is_empty() => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        _ => Err(ExtractError::Corrupt {
            entry: Some(name.into()),
            source: io::Error::new(io::ErrorKind::InvalidData, "link entry without a target"),
        }),
    }
}

/// Hard link targets name another archive member, relative to the archive root.
fn hard_link_target(name: &str, target: &str) -> Result<PathBuf, ExtractError> {
    let escape = || ExtractError::LinkEscape {
        entry: name.into(),
        target: target.into(),
    };
    let mut rel = PathBuf::new();
    for component in Path::new(target).components() {
        match component {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            _ => return Err(escape()),
        }
    }
    if rel.as_os_str().is_empty() {
        return Err(escape());
    }
    Ok(rel)
}

fn make_parent(path: &Path, name: &str) -> Result<(), ExtractError> {
    symlinks::make_parent(path).map_err(|source| ExtractError::Write {
        entry: name.into(),
        source,
    })
}

/// Later entries replace earlier files of the same name (as tar does), but never directories.
fn clear_file_slot(path: &Path, name: &str) -> Result<(), ExtractError> {
    symlinks::clear_file_slot(path).map_err(|source| ExtractError::Write {
        entry: name.into(),
        source,
    })
}

fn entry_kind(kind: EntryType) -> String {
    match kind {
        EntryType::Char => "character device".into(),
        EntryType::Block => "block device".into(),
        EntryType::Fifo => "fifo".into(),
        EntryType::GNUSparse => "sparse file".into(),
        other => format!("type '{}'", other.as_byte() as char),
    }
}

/// Fails the stream once more than `left` bytes were asked for, and says so in `exceeded`
/// (the tar reader may wrap the error in its own).
struct LimitedReader<R> {
    inner: R,
    left: u64,
    exceeded: Rc<Cell<bool>>,
}

impl<R: Read> Read for LimitedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // Only an error if there is more to read.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.exceeded.set(true);
                    Err(io::Error::other("size limit exceeded"))
                }
            };
        }
        let max = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::test_archive::{Member, file, gzip, tar_gz};

    /// Extracts into `<fresh parent>/tree`; the parent lets tests check nothing leaked out.
    fn run(
        archive: &[u8],
        limits: &ExtractLimits,
    ) -> (tempfile::TempDir, PathBuf, Result<ExtractStats, ExtractError>) {
        let parent = tempfile::tempdir().unwrap();
        let dest = parent.path().join("tree");
        let result = extract(archive, &dest, limits);
        (parent, dest, result)
    }

    fn assert_nothing_outside(parent: &tempfile::TempDir) {
        let names: Vec<_> = fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["tree"],
            "only the extraction directory may exist in the parent"
        );
    }

    fn refused(members: &[Member]) -> String {
        let (parent, _dest, result) = run(&tar_gz(members), &ExtractLimits::default());
        assert_nothing_outside(&parent);
        result.expect_err("archive must be refused").to_string()
    }

    #[test]
    fn a_plain_tree_is_extracted() {
        let archive = tar_gz(&[
            Member::Dir("apps/"),
            file("apps/kustomization.yaml", "resources: [cm.yaml]\n"),
            file("./apps/cm.yaml", "kind: ConfigMap\n"),
            file("top.yaml", "x: 1\n"),
        ]);
        let (parent, dest, result) = run(&archive, &ExtractLimits::default());
        let stats = result.unwrap();
        assert_eq!(
            fs::read_to_string(dest.join("apps/cm.yaml")).unwrap(),
            "kind: ConfigMap\n"
        );
        assert_eq!(fs::read_to_string(dest.join("top.yaml")).unwrap(), "x: 1\n");
        assert_eq!((stats.entries, stats.files, stats.bytes), (4, 3, 42));
        assert_nothing_outside(&parent);
    }

    #[test]
    fn parent_components_are_refused_by_name() {
        assert_eq!(
            refused(&[file("../x", "pwned")]),
            "tar entry '../x': '..' path components are not allowed"
        );
        assert_eq!(
            refused(&[file("a/../../x", "pwned")]),
            "tar entry 'a/../../x': '..' path components are not allowed"
        );
    }

    #[test]
    fn absolute_paths_are_refused_by_name() {
        assert_eq!(
            refused(&[file("/etc/x", "pwned")]),
            "tar entry '/etc/x': absolute paths are not allowed"
        );
    }

    #[test]
    fn a_symlink_to_etc_passwd_is_refused() {
        let message = refused(&[Member::Symlink("passwd", "/etc/passwd")]);
        assert_eq!(
            message,
            "tar entry 'passwd': link target '/etc/passwd' leads outside the extraction root"
        );
        let message = refused(&[Member::Dir("a/"), Member::Symlink("a/up", "../../outside")]);
        assert_eq!(
            message,
            "tar entry 'a/up': link target '../../outside' leads outside the extraction root"
        );
    }

    #[test]
    fn a_symlink_escaping_through_another_symlink_is_refused() {
        // `here -> .` and `evil -> here/../secret`: lexically `secret` inside the root,
        // physically the parent's `secret`.
        let parent = tempfile::tempdir().unwrap();
        fs::write(parent.path().join("secret"), "s3cr3t").unwrap();
        let archive = tar_gz(&[
            Member::Symlink("here", "."),
            Member::Symlink("evil", "here/../secret"),
        ]);
        let err = extract(
            &archive[..],
            &parent.path().join("tree"),
            &ExtractLimits::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tar entry 'evil': link target 'here/../secret' leads outside the extraction root"
        );
        // Where nothing exists outside, such a link dangles and is dropped.
        let archive = tar_gz(&[Member::Symlink("here", "."), Member::Symlink("evil", "here/../x")]);
        let (parent, dest, result) = run(&archive, &ExtractLimits::default());
        assert_eq!(result.unwrap().dropped_symlinks, 1);
        assert!(fs::symlink_metadata(dest.join("evil")).is_err());
        assert_nothing_outside(&parent);
        // A link is never created below another link.
        let message = refused(&[
            Member::Symlink("d", "sub"),
            Member::Dir("sub/"),
            Member::Symlink("d/l", "x"),
        ]);
        assert_eq!(message, "tar entry 'd/l': parent 'd' is a symbolic link");
    }

    #[test]
    fn files_are_never_written_through_a_symlink() {
        // Classic: symlink to a directory outside, then a file below it.
        let message = refused(&[Member::Symlink("out", "/tmp"), file("out/pwned", "x")]);
        assert!(message.contains("'out'"), "{message}");
    }

    #[test]
    fn symlinks_inside_the_root_are_kept_and_dangling_ones_dropped() {
        let archive = tar_gz(&[
            Member::Dir("base/"),
            file("base/a.yaml", "a: 1\n"),
            Member::Symlink("alias", "base"),
            Member::Symlink("base/self.yaml", "a.yaml"),
            Member::Symlink("dangling", "missing/file"),
        ]);
        let (parent, dest, result) = run(&archive, &ExtractLimits::default());
        let stats = result.unwrap();
        assert_eq!(
            fs::read_to_string(dest.join("alias/self.yaml")).unwrap(),
            "a: 1\n"
        );
        assert!(fs::symlink_metadata(dest.join("dangling")).is_err());
        assert_eq!((stats.symlinks, stats.dropped_symlinks), (2, 1));
        assert_nothing_outside(&parent);
    }

    #[test]
    fn hard_link_escapes_are_refused() {
        let message = refused(&[Member::HardLink("passwd", "/etc/passwd")]);
        assert_eq!(
            message,
            "tar entry 'passwd': link target '/etc/passwd' leads outside the extraction root"
        );
        let message = refused(&[Member::HardLink("passwd", "../../../../etc/passwd")]);
        assert!(
            message.starts_with("tar entry 'passwd': link target '../../../../etc/passwd'"),
            "{message}"
        );
        // A hard link to a member that is not a file extracted before it.
        let message = refused(&[Member::Symlink("s", "a"), Member::HardLink("h", "s")]);
        assert_eq!(
            message,
            "tar entry 'h': hard link target 's' is not a regular file extracted before it"
        );
    }

    #[test]
    fn hard_links_inside_the_root_work() {
        let archive = tar_gz(&[file("a.yaml", "a: 1\n"), Member::HardLink("b.yaml", "a.yaml")]);
        let (_parent, dest, result) = run(&archive, &ExtractLimits::default());
        result.unwrap();
        assert_eq!(fs::read_to_string(dest.join("b.yaml")).unwrap(), "a: 1\n");
    }

    #[test]
    fn device_and_fifo_entries_are_refused() {
        assert_eq!(
            refused(&[Member::CharDevice("null")]),
            "tar entry 'null': character device entries are not allowed"
        );
        assert_eq!(
            refused(&[Member::Fifo("pipe")]),
            "tar entry 'pipe': fifo entries are not allowed"
        );
    }

    #[test]
    fn the_byte_limit_names_the_entry() {
        let archive = tar_gz(&[
            file("small.yaml", "x"),
            Member::File("big.bin", vec![0; 64 * 1024]),
        ]);
        let limits = ExtractLimits {
            max_bytes: 16 * 1024,
            ..ExtractLimits::default()
        };
        let (parent, _dest, result) = run(&archive, &limits);
        let message = result.unwrap_err().to_string();
        assert_eq!(
            message,
            "archive expands beyond the limit of 16384 bytes (at tar entry 'big.bin')"
        );
        assert_nothing_outside(&parent);
    }

    #[test]
    fn the_entry_limit_names_the_entry() {
        let archive = tar_gz(&[file("1", "a"), file("2", "b"), file("3", "c")]);
        let limits = ExtractLimits {
            max_entries: 2,
            ..ExtractLimits::default()
        };
        let (_parent, _dest, result) = run(&archive, &limits);
        assert_eq!(
            result.unwrap_err().to_string(),
            "archive has more than 2 entries (at tar entry '3')"
        );
    }

    #[test]
    fn truncated_gzip_is_corrupt() {
        let archive = tar_gz(&[Member::File(
            "data.bin",
            (0..20_000u32).map(|i| (i * 7919 % 251) as u8).collect(),
        )]);
        for cut in [archive.len() - 4, archive.len() / 2, 10] {
            let (parent, _dest, result) = run(&archive[..cut], &ExtractLimits::default());
            let err = result.unwrap_err();
            assert!(matches!(err, ExtractError::Corrupt { .. }), "cut at {cut}: {err}");
            assert!(err.to_string().starts_with("corrupt archive"), "{err}");
            assert_nothing_outside(&parent);
        }
    }

    #[test]
    fn corrupt_gzip_is_refused() {
        let mut archive = tar_gz(&[file("a.yaml", "a: 1\n")]);
        let middle = archive.len() / 2;
        archive[middle] ^= 0xff;
        let (_parent, _dest, result) = run(&archive, &ExtractLimits::default());
        assert!(matches!(result.unwrap_err(), ExtractError::Corrupt { .. }));
        let (_parent, _dest, result) = run(b"this is not gzip at all", &ExtractLimits::default());
        assert!(matches!(result.unwrap_err(), ExtractError::Corrupt { .. }));
        // Valid gzip around something that is not a tar stream.
        let (_parent, _dest, result) = run(&gzip(&[7u8; 1024]), &ExtractLimits::default());
        assert!(matches!(result.unwrap_err(), ExtractError::Corrupt { .. }));
    }

    #[test]
    fn the_destination_must_be_fresh() {
        let parent = tempfile::tempdir().unwrap();
        fs::write(parent.path().join("existing"), "x").unwrap();
        let err = extract(
            &tar_gz(&[file("a", "b")])[..],
            parent.path(),
            &ExtractLimits::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("directory is not empty"), "{err}");
    }
}
