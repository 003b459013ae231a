//! The tag store: one file per ImageRepository under `--storage-path`, laid out as Flux's
//! `FluxStorage` gate does (`imagerepository/<namespace>/<name>/…/tags.txt`, one tag a line,
//! `tags.txt.gz` from `--storage-compression-threshold` on) but keyed by the object's uid as
//! well, so a recreated object never reads its predecessor's tags and no object ever reads
//! another's (Flux's default store shares them by image name). Files are written atomically
//! and nothing is held in memory between calls. The functions block: call them from
//! `spawn_blocking`.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};
use thiserror::Error;

const KIND_DIR: &str = "imagerepository";
const PLAIN: &str = "tags.txt";
const GZIP: &str = "tags.txt.gz";
/// A stored file larger than this once decompressed is refused (the registry client caps a
/// listing far below it), so a damaged file cannot exhaust memory.
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("storage compression threshold must be greater than 0")]
    InvalidThreshold,
    #[error("invalid {field} '{value}' for the tag store")]
    InvalidKey { field: &'static str, value: String },
    #[error("tag {tag:?} cannot be stored: it is empty or holds a line break")]
    InvalidTag { tag: String },
    #[error("failed to {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("tag file {} is damaged: {cause}", path.display())]
    Corrupt { path: PathBuf, cause: String },
}

impl StoreError {
    /// Whether retrying cannot help (a bad key or tag); disk errors are worth a retry.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::InvalidThreshold | Self::InvalidKey { .. } | Self::InvalidTag { .. }
        )
    }
}

/// Which ImageRepository the tags belong to.
#[derive(Debug, Clone, Copy)]
pub struct RepoKey<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// Tags as stored: in descending byte order (the order `latestTags` shows), and the
/// revision, `sha256:<hex>` of the file's text as FluxStorage computes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTags {
    pub tags: Vec<String>,
    pub revision: String,
}

/// Sorts tags as Flux stores and shows them: descending byte order, not semver.
pub fn sort_tags(tags: &mut [String]) {
    tags.sort_unstable_by(|a, b| b.as_bytes().cmp(a.as_bytes()));
}

pub struct TagStore {
    root: PathBuf,
    compression_threshold: usize,
}

impl TagStore {
    /// `compression_threshold_kib` is `--storage-compression-threshold`: a tag file of at
    /// least that many KiB is written gzip-compressed.
    pub fn new(root: impl Into<PathBuf>, compression_threshold_kib: usize) -> Result<Self, StoreError> {
        if compression_threshold_kib == 0 {
            return Err(StoreError::InvalidThreshold);
        }
        Ok(Self {
            root: root.into(),
            compression_threshold: compression_threshold_kib.saturating_mul(1024),
        })
    }

    /// Replaces the object's tags; returns them sorted with their revision.
    pub fn write(&self, key: RepoKey<'_>, mut tags: Vec<String>) -> Result<StoredTags, StoreError> {
        let dir = self.dir(key)?;
        if let Some(bad) = tags.iter().find(|t| t.is_empty() || t.contains(['\n', '\r'])) {
            return Err(StoreError::InvalidTag { tag: bad.clone() });
        }
        sort_tags(&mut tags);
        let text = serialize(&tags);
        let revision = revision(&text);
        let compressed = text.len() >= self.compression_threshold;
        let (file, stale) = if compressed { (GZIP, PLAIN) } else { (PLAIN, GZIP) };
        let payload = if compressed { gzip(&text) } else { text };
        fs::create_dir_all(&dir).map_err(io_error("create", &dir))?;
        write_atomic(&dir, file, &payload)?;
        remove_if_present(&dir.join(stale))?;
        self.remove_predecessors(key)?;
        Ok(StoredTags { tags, revision })
    }

    /// The object's tags, `None` when none were stored (a first scan, or another uid's).
    pub fn read(&self, key: RepoKey<'_>) -> Result<Option<StoredTags>, StoreError> {
        let dir = self.dir(key)?;
        let plain = modified(&dir.join(PLAIN))?;
        let gzip = modified(&dir.join(GZIP))?;
        // Both exist only after a crash between writing one and removing the other: the
        // newer one is what was written last.
        let compressed = match (plain, gzip) {
            (None, None) => return Ok(None),
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(plain), Some(gzip)) => gzip > plain,
        };
        let path = dir.join(if compressed { GZIP } else { PLAIN });
        let file = File::open(&path).map_err(io_error("open", &path))?;
        let mut text = Vec::new();
        let read = if compressed {
            GzDecoder::new(file)
                .take(MAX_FILE_BYTES + 1)
                .read_to_end(&mut text)
        } else {
            file.take(MAX_FILE_BYTES + 1).read_to_end(&mut text)
        };
        read.map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            cause: e.to_string(),
        })?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(StoreError::Corrupt {
                path,
                cause: format!("larger than {MAX_FILE_BYTES} bytes"),
            });
        }
        let revision = revision(&text);
        let text = String::from_utf8(text).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            cause: e.to_string(),
        })?;
        let tags = text.lines().map(str::to_string).collect();
        Ok(Some(StoredTags { tags, revision }))
    }

    /// Deletes the object's tags (its finalizer's cleanup); nothing stored is no error.
    pub fn delete(&self, key: RepoKey<'_>) -> Result<(), StoreError> {
        let dir = self.dir(key)?;
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("remove", &dir)(e)),
        }
        // The name's directory goes too once no uid is left in it.
        if let Some(parent) = dir.parent() {
            let _ = fs::remove_dir(parent);
        }
        Ok(())
    }

    fn name_dir(&self, key: RepoKey<'_>) -> Result<PathBuf, StoreError> {
        check_segment("namespace", key.namespace)?;
        check_segment("name", key.name)?;
        Ok(self.root.join(KIND_DIR).join(key.namespace).join(key.name))
    }

    fn dir(&self, key: RepoKey<'_>) -> Result<PathBuf, StoreError> {
        check_segment("uid", key.uid)?;
        Ok(self.name_dir(key)?.join(key.uid))
    }

    /// Removes the tags of earlier objects of the same name (deleted while the controller
    /// was not running): at most one object holds a name at a time.
    fn remove_predecessors(&self, key: RepoKey<'_>) -> Result<(), StoreError> {
        let name_dir = self.name_dir(key)?;
        let entries = fs::read_dir(&name_dir).map_err(io_error("list", &name_dir))?;
        for entry in entries {
            let entry = entry.map_err(io_error("list", &name_dir))?;
            if entry.file_name() != key.uid {
                let path = entry.path();
                fs::remove_dir_all(&path).map_err(io_error("remove", &path))?;
            }
        }
        Ok(())
    }
}

fn check_segment(field: &'static str, value: &str) -> Result<(), StoreError> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value != "."
        && value != ".."
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidKey {
            field,
            value: value.into(),
        })
    }
}

fn serialize(tags: &[String]) -> Vec<u8> {
    let mut text = Vec::with_capacity(tags.iter().map(|t| t.len() + 1).sum());
    for tag in tags {
        text.extend_from_slice(tag.as_bytes());
        text.push(b'\n');
    }
    text
}

fn revision(text: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text)))
}

fn gzip(text: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    // Writing into a Vec cannot fail.
    encoder.write_all(text).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

/// Temp file in the same directory, synced, renamed over the target, directory synced: a
/// crash leaves the old file or the new one, never a part.
fn write_atomic(dir: &Path, file: &str, payload: &[u8]) -> Result<(), StoreError> {
    let target = dir.join(file);
    let mut temp = tempfile::Builder::new()
        .prefix(".tags-")
        .tempfile_in(dir)
        .map_err(io_error("create a temporary file in", dir))?;
    temp.write_all(payload).map_err(io_error("write", temp.path()))?;
    temp.as_file().sync_all().map_err(io_error("sync", temp.path()))?;
    temp.persist(&target)
        .map_err(|e| io_error("rename into", &target)(e.error))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error("sync", dir))
}

fn modified(path: &Path) -> Result<Option<SystemTime>, StoreError> {
    match fs::metadata(path) {
        Ok(meta) => meta.modified().map(Some).map_err(io_error("stat", path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("stat", path)(e)),
    }
}

fn remove_if_present(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_error("remove", path)(e)),
        _ => Ok(()),
    }
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io { action, path, source }
}

#[cfg(test)]
mod tests;
