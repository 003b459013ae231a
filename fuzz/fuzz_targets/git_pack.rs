//! Fuzzes the Git pack reader and the tree checkout of remote bases with hostile packs.
//! First byte 0: the rest is two bytes of object count and a pack body, which the target seals
//! with the pack header and checksum (the fuzzer cannot make SHA-1s). Else: the rest describes
//! objects (see `Records`), which the target packs itself, as deltas too, so the fuzzer
//! explores delta resolution and trees without fighting zlib and SHA-1.
//! Invariants besides no panic: every object of a parsed pack has the id of its content; a
//! pack the target made parses to exactly its objects; a checkout creates nothing outside its
//! destination, writes only blobs of the pack, stays within its limits, and the links it
//! leaves resolve inside it.
#![no_main]

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::Path;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sha1::Digest;

#[path = "../../src/remote/pack.rs"]
mod pack;
#[path = "../../src/remote/tree.rs"]
mod tree;
// `tree` places its links with the artifact extractor's rule, as `crate::source::symlinks`.
#[path = "../../src/source"]
mod source {
    #[allow(dead_code)]
    pub mod symlinks;
}
// Both check the build's deadline, `crate::deadline`, which names spec.timeout as
// `crate::api::duration` formats it.
#[allow(dead_code)]
#[path = "../../src/deadline.rs"]
mod deadline;
#[path = "../../crates/runtime/src"]
mod api {
    #[allow(dead_code)]
    pub mod duration;
}

use deadline::Deadline;
use pack::{Kind, Objects, Oid, PackLimits, object_id, parse};
use tree::{TreeLimits, checkout, commit_tree};

/// Far beyond libFuzzer's `-timeout`: a slow input is reported by libFuzzer, not cut short.
const DEADLINE: Duration = Duration::from_secs(3600);

fn pack_limits() -> PackLimits {
    PackLimits { max_bytes: 4 << 20, max_objects: 4096, deadline: Deadline::after(DEADLINE) }
}

fn tree_limits() -> TreeLimits {
    TreeLimits { max_bytes: 4 << 20, max_entries: 512, deadline: Deadline::after(DEADLINE) }
}
/// Objects of a made pack: enough for chains, trees of trees and copies.
const MAX_RECORDS: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode == 0 {
        let Some((count, body)) = rest.split_first_chunk::<2>() else { return };
        let Ok(objects) = parse(&sealed(u16::from_be_bytes(*count).into(), body), pack_limits()) else {
            return;
        };
        for (id, kind, content) in objects.iter() {
            assert_eq!(*id, object_id(kind, content), "an object's id is not its content's");
        }
        // The first commit or tag and the first tree by id, as a fetch would name them.
        let mut ids: Vec<(Oid, Kind)> = objects.iter().map(|(id, kind, _)| (*id, kind)).collect();
        ids.sort_unstable_by_key(|(id, _)| *id);
        for wanted in [[Kind::Commit, Kind::Tag].as_slice(), &[Kind::Tree]] {
            if let Some((id, _)) = ids.iter().find(|(_, kind)| wanted.contains(kind)) {
                check_out(&objects, id);
            }
        }
    } else {
        let records = Records::read(rest);
        let made = parse(&records.pack(), pack_limits())
            .unwrap_or_else(|e| panic!("a well-formed pack is refused: {e}"));
        let expected: HashMap<Oid, (Kind, &[u8])> =
            records.objects.iter().map(|o| (o.id, (o.kind, o.content.as_slice()))).collect();
        assert_eq!(made.iter().count(), expected.len(), "objects gained or lost");
        for (id, (kind, content)) in &expected {
            assert_eq!(made.get(id), Some((*kind, *content)), "object {} differs", hex::encode(id));
        }
        if let Some(last) = records.objects.last() {
            check_out(&made, &last.id);
        }
    }
});

/// Checks out the tree `id` names (a tree, or a commit or tag leading to one) and checks what
/// landed on disk.
fn check_out(objects: &Objects, id: &Oid) {
    let tree = match objects.get(id) {
        Some((Kind::Tree, _)) => *id,
        _ => match commit_tree(objects, id) {
            Ok(tree) => tree,
            Err(_) => return,
        },
    };
    let parent = tempfile::tempdir().expect("temp dir");
    let dest = parent.path().join("tree");
    fs::create_dir(&dest).unwrap();
    let limits = tree_limits();
    let result = checkout(objects, &tree, &dest, limits);
    let names: Vec<_> = fs::read_dir(parent.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.iter().all(|n| n == "tree"), "created outside the destination: {names:?} ({result:?})");
    if let Ok(bytes) = result {
        let root = fs::canonicalize(&dest).unwrap();
        let mut seen = Seen::default();
        seen.walk(objects, &root, &root);
        assert!(seen.entries <= limits.max_entries, "{} entries", seen.entries);
        assert!(
            seen.file_bytes <= bytes && bytes <= limits.max_bytes,
            "files of {} bytes, {bytes} bytes reported",
            seen.file_bytes
        );
    }
}

/// What a checkout left on disk.
#[derive(Default)]
struct Seen {
    entries: u64,
    file_bytes: u64,
}

impl Seen {
    fn walk(&mut self, objects: &Objects, root: &Path, dir: &Path) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            self.entries += 1;
            assert_ne!(path.file_name().unwrap(), ".git", "{} written", path.display());
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                let resolved = fs::canonicalize(&path).expect("kept links resolve");
                assert!(resolved.starts_with(root), "{} resolves to {}", path.display(), resolved.display());
            } else if meta.is_dir() {
                self.walk(objects, root, &path);
            } else {
                let content = fs::read(&path).unwrap();
                self.file_bytes += content.len() as u64;
                let blob = objects.get(&object_id(Kind::Blob, &content));
                assert!(blob.is_some_and(|(kind, _)| kind == Kind::Blob), "{} is no blob", path.display());
            }
        }
    }
}

/// The objects of a pack to make, from the fuzzer's bytes: after a flags byte (bit 0: list the
/// objects in reverse, each delta before its base), records of a tag byte, a base byte and a
/// length byte, then that many bytes of payload. The tag's bits 0-1 are the kind (commit, tree,
/// blob, tag), bits 2-3 the storage (whole, OFS_DELTA, REF_DELTA, whole) against the earlier
/// object the base byte picks, bit 4 sorts a tree's entries in Git's order. A blob is its
/// payload; a tree is its payload with the byte after each NUL replaced by the id of the
/// earlier object it picks; a commit (tag) is `tree` (`object`), the id of the earlier object
/// its payload's first byte picks, then the rest of the payload.
struct Records {
    reverse: bool,
    objects: Vec<Record>,
}

struct Record {
    kind: Kind,
    content: Vec<u8>,
    id: Oid,
    /// A delta against this earlier record, by offset (else by id).
    delta: Option<(usize, bool)>,
}

impl Records {
    fn read(data: &[u8]) -> Records {
        let (flags, mut rest) = data.split_first().map_or((0, data), |(f, r)| (*f, r));
        let mut objects: Vec<Record> = Vec::new();
        while let Some((&[tag, base, len], after)) = rest.split_first_chunk::<3>() {
            if objects.len() == MAX_RECORDS {
                break;
            }
            let (payload, after) = after.split_at(after.len().min(len.into()));
            rest = after;
            let kind = [Kind::Commit, Kind::Tree, Kind::Blob, Kind::Tag][usize::from(tag & 3)];
            let pick = |byte: u8| objects.get(usize::from(byte) % objects.len().max(1)).map(|o| o.id);
            let content = match kind {
                Kind::Blob => payload.to_vec(),
                Kind::Tree => tree_content(payload, tag & 0x10 != 0, pick),
                Kind::Commit | Kind::Tag => {
                    let (first, text) = payload.split_first().map_or((0, payload), |(f, t)| (*f, t));
                    let header = if kind == Kind::Commit { "tree" } else { "object" };
                    let target = hex::encode(pick(first).unwrap_or_default());
                    [format!("{header} {target}\n").as_bytes(), text].concat()
                }
            };
            // A delta's object has its base's kind: other bases are not used.
            let delta = match (tag >> 2) & 3 {
                storage @ (1 | 2) if !objects.is_empty() => {
                    let on = usize::from(base) % objects.len();
                    (objects[on].kind == kind).then_some((on, storage == 1))
                }
                _ => None,
            };
            let id = object_id(kind, &content);
            objects.push(Record { kind, content, id, delta });
        }
        Records { reverse: flags & 1 != 0, objects }
    }

    /// The pack: every record in order (or reversed), deltas as asked. An OFS_DELTA's base
    /// must come first, so in a reversed pack they are REF_DELTAs.
    fn pack(&self) -> Vec<u8> {
        let mut order: Vec<usize> = (0..self.objects.len()).collect();
        if self.reverse {
            order.reverse();
        }
        let mut offsets = vec![0; self.objects.len()];
        let mut body = Vec::new();
        for i in order {
            let record = &self.objects[i];
            offsets[i] = 12 + body.len();
            let entry = match record.delta {
                None => entry(type_code(record.kind), &[], &record.content),
                Some((on, by_offset)) => {
                    let base = &self.objects[on];
                    let delta = delta(&base.content, &record.content);
                    if by_offset && !self.reverse {
                        entry(6, &ofs_distance(offsets[i] - offsets[on]), &delta)
                    } else {
                        entry(7, &base.id, &delta)
                    }
                }
            };
            body.extend(entry);
        }
        sealed(self.objects.len() as u32, &body)
    }
}

/// A tree's bytes: `payload` with the byte after each NUL replaced by the id it picks; sorted,
/// its entries come in Git's order (a directory's name as if it ended in '/'), each name once.
fn tree_content(payload: &[u8], sorted: bool, pick: impl Fn(u8) -> Option<Oid>) -> Vec<u8> {
    // (mode and name, the name as Git orders it, id)
    let mut entries: Vec<(&[u8], Vec<u8>, Oid)> = Vec::new();
    let mut rest = payload;
    while let Some(nul) = rest.iter().position(|&b| b == 0) {
        let head = &rest[..nul];
        let (mode, name) = head.split_at(head.iter().position(|&b| b == b' ').unwrap_or(0));
        let name = name.strip_prefix(b" ").unwrap_or(name);
        let dir = mode == b"40000" || mode == b"040000";
        let key = [name, if dir { b"/" } else { b"" }].concat();
        let byte = rest.get(nul + 1).copied().unwrap_or(0);
        entries.push((head, key, pick(byte).unwrap_or_default()));
        rest = rest.get(nul + 2..).unwrap_or_default();
    }
    if sorted {
        entries.sort_by(|a, b| a.1.cmp(&b.1));
        let mut names = HashSet::new();
        entries.retain(|(_, key, _)| names.insert(key.strip_suffix(b"/").unwrap_or(key).to_vec()));
    }
    let mut out = Vec::new();
    for (head, _, id) in entries {
        out.extend_from_slice(head);
        out.push(0);
        out.extend_from_slice(&id);
    }
    if !sorted {
        out.extend_from_slice(rest);
    }
    out
}

fn type_code(kind: Kind) -> u8 {
    match kind {
        Kind::Commit => 1,
        Kind::Tree => 2,
        Kind::Blob => 3,
        Kind::Tag => 4,
    }
}

/// A delta from `base` to `target`: their common prefix and suffix copied, the rest inserted.
fn delta(base: &[u8], target: &[u8]) -> Vec<u8> {
    let prefix = base.iter().zip(target).take_while(|(a, b)| a == b).count();
    let suffix = base[prefix..].iter().rev().zip(target[prefix..].iter().rev()).take_while(|(a, b)| a == b).count();
    let mut out = [varint(base.len()), varint(target.len())].concat();
    copy(&mut out, 0, prefix);
    for chunk in target[prefix..target.len() - suffix].chunks(0x7f) {
        out.push(chunk.len() as u8);
        out.extend_from_slice(chunk);
    }
    copy(&mut out, base.len() - suffix, suffix);
    out
}

/// A copy instruction: the offset's and size's non-zero bytes, each flagged in the opcode.
fn copy(out: &mut Vec<u8>, offset: usize, size: usize) {
    if size == 0 {
        return;
    }
    assert!(size < 0x10000, "objects here are small");
    let mut op = 0x80u8;
    let mut fields = Vec::new();
    for (i, byte) in (offset as u32).to_le_bytes().into_iter().enumerate() {
        if byte != 0 {
            op |= 1 << i;
            fields.push(byte);
        }
    }
    for (i, byte) in (size as u32).to_le_bytes().into_iter().take(3).enumerate() {
        if byte != 0 {
            op |= 0x10 << i;
            fields.push(byte);
        }
    }
    out.push(op);
    out.extend(fields);
}

fn varint(mut value: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// An OFS_DELTA's distance back to its base, in Git's encoding.
fn ofs_distance(mut distance: usize) -> Vec<u8> {
    let mut out = vec![(distance & 0x7f) as u8];
    distance >>= 7;
    while distance > 0 {
        distance -= 1;
        out.push(0x80 | (distance & 0x7f) as u8);
        distance >>= 7;
    }
    out.reverse();
    out
}

/// One pack entry: its type-and-size header, `between` (a delta's base), `payload` in a zlib
/// stream of stored blocks (a compressor's state costs more than the rest of an execution).
fn entry(type_code: u8, between: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut size = payload.len();
    let mut out = vec![(type_code << 4) | (size & 0x0f) as u8];
    size >>= 4;
    while size > 0 {
        *out.last_mut().unwrap() |= 0x80;
        out.push((size & 0x7f) as u8);
        size >>= 7;
    }
    out.extend_from_slice(between);
    out.extend_from_slice(&[0x78, 0x01]);
    let mut blocks = payload.chunks(0xffff).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        let len = block.len() as u16;
        out.push(u8::from(blocks.peek().is_none()));
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(payload).to_be_bytes());
    out
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

/// A pack of `count` objects made of `body`: header and checksum around it.
fn sealed(count: u32, body: &[u8]) -> Vec<u8> {
    let mut pack = [&b"PACK"[..], &2u32.to_be_bytes(), &count.to_be_bytes(), body].concat();
    let checksum = sha1::Sha1::digest(&pack);
    pack.extend_from_slice(&checksum);
    pack
}
