//! Tarball builders for tests, including entries no well-behaved tool would write.
//!
//! Shared by the unit tests (as `crate::source::test_archive`) and the integration harness
//! (included by path), so there is one builder of hostile archives.

use std::io::Write;

/// One tar member, written exactly as given (no path cleaning).
#[derive(Clone, Debug)]
pub enum Member {
    File(&'static str, Vec<u8>),
    Dir(&'static str),
    Symlink(&'static str, &'static str),
    HardLink(&'static str, &'static str),
    CharDevice(&'static str),
    Fifo(&'static str),
}

/// A regular file member.
pub fn file(path: &'static str, content: &str) -> Member {
    Member::File(path, content.as_bytes().to_vec())
}

/// An uncompressed tar stream of `members`.
pub fn tar(members: &[Member]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for member in members {
        let mut header = tar::Header::new_gnu();
        let (path, kind, link, data): (&str, tar::EntryType, Option<&str>, &[u8]) = match member {
            Member::File(p, data) => (p, tar::EntryType::Regular, None, data),
            Member::Dir(p) => (p, tar::EntryType::Directory, None, &[]),
            Member::Symlink(p, t) => (p, tar::EntryType::Symlink, Some(t), &[]),
            Member::HardLink(p, t) => (p, tar::EntryType::Link, Some(t), &[]),
            Member::CharDevice(p) => (p, tar::EntryType::Char, None, &[]),
            Member::Fifo(p) => (p, tar::EntryType::Fifo, None, &[]),
        };
        let gnu = header.as_gnu_mut().expect("gnu header");
        assert!(path.len() <= gnu.name.len(), "test paths are short");
        gnu.name[..path.len()].copy_from_slice(path.as_bytes());
        if let Some(link) = link {
            gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        header.set_entry_type(kind);
        header.set_mode(if kind == tar::EntryType::Directory {
            0o755
        } else {
            0o644
        });
        header.set_size(data.len() as u64);
        header.set_cksum();
        builder.append(&header, data).expect("append to in-memory tar");
    }
    builder.into_inner().expect("finish in-memory tar")
}

/// Gzip-compresses `bytes`.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip in memory");
    encoder.finish().expect("gzip in memory")
}

/// A `.tar.gz` of `members`.
pub fn tar_gz(members: &[Member]) -> Vec<u8> {
    gzip(&tar(members))
}
