//! Git packfiles (version 2): every object inflated, deltas (OFS_DELTA and REF_DELTA)
//! resolved against their bases, and indexed by object id. A bound on the inflated bytes
//! keeps a hostile pack from exhausting memory.

use std::collections::HashMap;

use flate2::{Decompress, FlushDecompress, Status};
use sha1::{Digest, Sha1};

/// A Git object id.
pub(crate) type Oid = [u8; 20];

/// The object kinds a checkout needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Commit,
    Tree,
    Blob,
    Tag,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Commit => "commit",
            Kind::Tree => "tree",
            Kind::Blob => "blob",
            Kind::Tag => "tag",
        }
    }
}

/// The objects of a pack by id.
#[derive(Debug, Default)]
pub(crate) struct Objects {
    by_id: HashMap<Oid, (Kind, Vec<u8>)>,
}

impl Objects {
    pub(crate) fn get(&self, id: &Oid) -> Option<(Kind, &[u8])> {
        self.by_id.get(id).map(|(k, d)| (*k, d.as_slice()))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Adds an object as if a pack held it; returns its id.
    #[cfg(test)]
    pub(crate) fn insert(&mut self, kind: Kind, data: Vec<u8>) -> Oid {
        let id = object_id(kind, &data);
        self.by_id.insert(id, (kind, data));
        id
    }
}

/// The id Git gives an object of `kind` with `data`.
pub(crate) fn object_id(kind: Kind, data: &[u8]) -> Oid {
    let mut h = Sha1::new();
    h.update(format!("{} {}\0", kind.name(), data.len()).as_bytes());
    h.update(data);
    h.finalize().into()
}

/// One entry as stored: a whole object or a delta against a base.
enum Entry {
    Whole(Kind, Vec<u8>),
    OfsDelta(usize, Vec<u8>),
    RefDelta(Oid, Vec<u8>),
}

/// Parses a pack, resolving deltas; `max_bytes` bounds the inflated size of all objects.
pub(crate) fn parse(pack: &[u8], max_bytes: u64) -> Result<Objects, String> {
    if pack.len() < 32 || &pack[..4] != b"PACK" {
        return Err("not a Git packfile".into());
    }
    let version = u32::from_be_bytes(pack[4..8].try_into().expect("4 bytes"));
    if version != 2 && version != 3 {
        return Err(format!("unsupported pack version {version}"));
    }
    let count = u32::from_be_bytes(pack[8..12].try_into().expect("4 bytes")) as usize;
    let body_end = pack.len() - 20;
    let checksum: [u8; 20] = Sha1::digest(&pack[..body_end]).into();
    if checksum[..] != pack[body_end..] {
        return Err("pack checksum mismatch".into());
    }
    let mut budget = max_bytes;
    let mut entries: Vec<(usize, Entry)> = Vec::with_capacity(count.min(1 << 20));
    let mut pos = 12;
    for _ in 0..count {
        let start = pos;
        let (type_code, size) = read_header(pack, &mut pos)?;
        if size > budget {
            return Err(format!(
                "the repository is larger than the limit of {max_bytes} bytes"
            ));
        }
        let entry = match type_code {
            1..=4 => {
                let kind = [Kind::Commit, Kind::Tree, Kind::Blob, Kind::Tag][type_code as usize - 1];
                Entry::Whole(kind, inflate(pack, &mut pos, size, body_end)?)
            }
            6 => {
                let back = read_offset(pack, &mut pos)?;
                let base = start
                    .checked_sub(back)
                    .ok_or("delta base offset before the pack start")?;
                Entry::OfsDelta(base, inflate(pack, &mut pos, size, body_end)?)
            }
            7 => {
                let id: Oid = pack
                    .get(pos..pos + 20)
                    .ok_or("truncated delta base id")?
                    .try_into()
                    .expect("20 bytes");
                pos += 20;
                Entry::RefDelta(id, inflate(pack, &mut pos, size, body_end)?)
            }
            other => return Err(format!("unknown pack object type {other}")),
        };
        budget -= size;
        entries.push((start, entry));
    }
    resolve(entries, budget, max_bytes)
}

/// Resolves every delta, bases first, with repeated passes (a REF_DELTA's base may come later).
fn resolve(entries: Vec<(usize, Entry)>, mut budget: u64, max_bytes: u64) -> Result<Objects, String> {
    let mut by_offset: HashMap<usize, Oid> = HashMap::new();
    let mut objects = Objects::default();
    let mut pending = Vec::new();
    for (offset, entry) in entries {
        match entry {
            Entry::Whole(kind, data) => {
                let id = object_id(kind, &data);
                by_offset.insert(offset, id);
                objects.by_id.insert(id, (kind, data));
            }
            delta => pending.push((offset, delta)),
        }
    }
    while !pending.is_empty() {
        let before = pending.len();
        let mut still = Vec::new();
        for (offset, entry) in pending {
            let base_id = match &entry {
                Entry::OfsDelta(base, _) => by_offset.get(base).copied(),
                Entry::RefDelta(id, _) => Some(*id).filter(|id| objects.by_id.contains_key(id)),
                Entry::Whole(..) => unreachable!("whole objects are resolved first"),
            };
            let Some((kind, base)) = base_id.and_then(|id| objects.by_id.get(&id)) else {
                still.push((offset, entry));
                continue;
            };
            let (Entry::OfsDelta(_, delta) | Entry::RefDelta(_, delta)) = &entry else {
                unreachable!("only deltas are pending");
            };
            let kind = *kind;
            let data = apply_delta(base, delta)?;
            budget = budget
                .checked_sub(data.len() as u64)
                .ok_or_else(|| format!("the repository is larger than the limit of {max_bytes} bytes"))?;
            let id = object_id(kind, &data);
            by_offset.insert(offset, id);
            objects.by_id.insert(id, (kind, data));
        }
        if still.len() == before {
            return Err("pack has deltas whose base is missing (a thin pack?)".into());
        }
        pending = still;
    }
    Ok(objects)
}

/// Type and inflated size from an object header.
fn read_header(pack: &[u8], pos: &mut usize) -> Result<(u8, u64), String> {
    let mut byte = *pack.get(*pos).ok_or("truncated object header")?;
    *pos += 1;
    let type_code = (byte >> 4) & 7;
    let mut size = u64::from(byte & 0x0f);
    let mut shift = 4;
    while byte & 0x80 != 0 {
        byte = *pack.get(*pos).ok_or("truncated object header")?;
        *pos += 1;
        if shift > 57 {
            return Err("object size overflows".into());
        }
        size |= u64::from(byte & 0x7f) << shift;
        shift += 7;
    }
    Ok((type_code, size))
}

/// The backwards distance of an OFS_DELTA's base.
fn read_offset(pack: &[u8], pos: &mut usize) -> Result<usize, String> {
    let mut byte = *pack.get(*pos).ok_or("truncated delta offset")?;
    *pos += 1;
    let mut offset = usize::from(byte & 0x7f);
    while byte & 0x80 != 0 {
        byte = *pack.get(*pos).ok_or("truncated delta offset")?;
        *pos += 1;
        offset = offset
            .checked_add(1)
            .and_then(|o| o.checked_mul(128))
            .ok_or("delta offset overflows")?
            | usize::from(byte & 0x7f);
    }
    Ok(offset)
}

/// Inflates one zlib stream starting at `pos`, which must yield exactly `size` bytes; `pos`
/// moves past the compressed bytes.
fn inflate(pack: &[u8], pos: &mut usize, size: u64, end: usize) -> Result<Vec<u8>, String> {
    let size = usize::try_from(size).map_err(|_| "object too large")?;
    let mut out = Vec::with_capacity(size);
    let mut z = Decompress::new(true);
    loop {
        let input = &pack[*pos + z.total_in() as usize..end];
        // One spare byte of room so that a stream longer than announced is noticed.
        out.reserve(size + 1 - out.len().min(size));
        let status = z
            .decompress_vec(input, &mut out, FlushDecompress::None)
            .map_err(|e| format!("corrupt object data: {e}"))?;
        if out.len() > size {
            return Err("object is larger than its header says".into());
        }
        match status {
            Status::StreamEnd => break,
            Status::Ok | Status::BufError if input.is_empty() => {
                return Err("truncated object data".into());
            }
            Status::Ok | Status::BufError => {}
        }
    }
    if out.len() != size {
        return Err("object is smaller than its header says".into());
    }
    *pos += z.total_in() as usize;
    Ok(out)
}

/// A delta's size fields: little-endian base-128.
fn read_varint(delta: &[u8], pos: &mut usize) -> Result<usize, String> {
    let mut value = 0usize;
    let mut shift = 0;
    loop {
        let byte = *delta.get(*pos).ok_or("truncated delta")?;
        *pos += 1;
        if shift > 56 {
            return Err("delta size overflows".into());
        }
        value |= usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// Rebuilds an object from its base and a delta of copy and insert instructions.
pub(crate) fn apply_delta(base: &[u8], delta: &[u8]) -> Result<Vec<u8>, String> {
    let mut pos = 0;
    if read_varint(delta, &mut pos)? != base.len() {
        return Err("delta base size mismatch".into());
    }
    let target_len = read_varint(delta, &mut pos)?;
    let mut out = Vec::with_capacity(target_len);
    while pos < delta.len() {
        let op = delta[pos];
        pos += 1;
        if op & 0x80 != 0 {
            let mut field = |bits: u8, shifts: std::ops::Range<u32>| -> Result<usize, String> {
                let mut value = 0usize;
                for (i, shift) in shifts.enumerate() {
                    if bits & (1 << i) != 0 {
                        value |= usize::from(*delta.get(pos).ok_or("truncated delta")?) << (8 * shift);
                        pos += 1;
                    }
                }
                Ok(value)
            };
            let offset = field(op & 0x0f, 0..4)?;
            let size = match field((op >> 4) & 0x07, 0..3)? {
                0 => 0x10000,
                n => n,
            };
            let piece = offset
                .checked_add(size)
                .and_then(|end| base.get(offset..end))
                .ok_or("delta copies beyond its base")?;
            out.extend_from_slice(piece);
        } else if op != 0 {
            let piece = delta.get(pos..pos + usize::from(op)).ok_or("truncated delta")?;
            out.extend_from_slice(piece);
            pos += usize::from(op);
        } else {
            return Err("delta has the reserved instruction 0".into());
        }
        if out.len() > target_len {
            return Err("delta result larger than announced".into());
        }
    }
    if out.len() != target_len {
        return Err("delta result size mismatch".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn delta_copies_and_inserts() {
        let base = b"hello, world";
        let delta = [12, 13, 0x90, 5, 3, b'!', b'!', b'!', 0x91, 7, 5];
        assert_eq!(apply_delta(base, &delta).unwrap(), b"hello!!!world");
    }

    #[test]
    fn delta_errors_are_reported() {
        let base = b"hello";
        assert_eq!(
            apply_delta(base, &[4, 1, 1, b'x']).unwrap_err(),
            "delta base size mismatch"
        );
        assert_eq!(
            apply_delta(base, &[5, 3, 0x90, 9]).unwrap_err(),
            "delta copies beyond its base"
        );
        assert_eq!(
            apply_delta(base, &[5, 1, 0]).unwrap_err(),
            "delta has the reserved instruction 0"
        );
        assert_eq!(
            apply_delta(base, &[5, 9, 1, b'x']).unwrap_err(),
            "delta result size mismatch"
        );
    }

    fn git(dir: &std::path::Path, args: &[&str], input: Option<&[u8]>) -> Vec<u8> {
        use std::io::Write;
        let mut child = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@e")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@e")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("git runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.unwrap_or_default())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        out.stdout
    }

    /// A repository whose second commit changes a large file a little, so the pack has deltas.
    fn repository() -> (tempfile::TempDir, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "--quiet"], None);
        let big: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(d.join("big.txt"), &big).unwrap();
        git(d, &["add", "."], None);
        git(d, &["commit", "--quiet", "-m", "one"], None);
        std::fs::write(d.join("big.txt"), format!("{big}one more\n")).unwrap();
        git(d, &["commit", "--quiet", "-am", "two"], None);
        let listed = git(d, &["rev-list", "--objects", "--all"], None);
        let ids = String::from_utf8(listed)
            .unwrap()
            .lines()
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect();
        (dir, ids)
    }

    fn pack_with(flags: &[&str]) -> (Vec<u8>, Vec<String>) {
        let (dir, ids) = repository();
        let mut args = vec!["pack-objects", "--stdout", "-q"];
        args.extend_from_slice(flags);
        let input = ids.join("\n") + "\n";
        (git(dir.path(), &args, Some(input.as_bytes())), ids)
    }

    fn assert_all_objects(pack: &[u8], ids: &[String]) {
        let objects = parse(pack, 1 << 20).unwrap();
        assert_eq!(objects.len(), ids.len());
        for id in ids {
            let oid: Oid = hex::decode(id).unwrap().try_into().unwrap();
            assert!(objects.get(&oid).is_some(), "object {id} missing");
        }
    }

    #[test]
    fn parses_a_pack_with_offset_deltas_made_by_git() {
        let (pack, ids) = pack_with(&["--delta-base-offset"]);
        assert_all_objects(&pack, &ids);
    }

    #[test]
    fn parses_a_pack_with_ref_deltas_made_by_git() {
        let (pack, ids) = pack_with(&[]);
        assert_all_objects(&pack, &ids);
    }

    #[test]
    fn a_pack_above_the_limit_is_refused() {
        let (pack, _) = pack_with(&["--delta-base-offset"]);
        let err = parse(&pack, 1000).unwrap_err();
        assert_eq!(err, "the repository is larger than the limit of 1000 bytes");
    }

    #[test]
    fn a_corrupt_pack_is_refused() {
        let (mut pack, _) = pack_with(&[]);
        let n = pack.len();
        pack[n / 2] ^= 0xff;
        assert_eq!(parse(&pack, 1 << 20).unwrap_err(), "pack checksum mismatch");
        assert_eq!(parse(b"nope", 1 << 20).unwrap_err(), "not a Git packfile");
    }
}
