//! Git packfiles (version 2): every object inflated, deltas (OFS_DELTA and REF_DELTA)
//! resolved against their bases, and indexed by object id. Bounds on the objects, their
//! inflated bytes and their delta chains keep a hostile pack from exhausting memory or time.

use std::collections::{HashMap, hash_map};

use flate2::{Decompress, FlushDecompress, Status};
use sha1::{Digest, Sha1};

use crate::deadline::Deadline;

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
    /// Every object with its id, for tests and the fuzz target's checks.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Oid, Kind, &[u8])> {
        self.by_id.iter().map(|(id, (k, d))| (id, *k, d.as_slice()))
    }

    /// Adds an object unless one of its id is there; says whether it was new.
    fn add(&mut self, id: Oid, kind: Kind, data: Vec<u8>) -> bool {
        match self.by_id.entry(id) {
            hash_map::Entry::Vacant(slot) => {
                slot.insert((kind, data));
                true
            }
            hash_map::Entry::Occupied(_) => false,
        }
    }

    pub(crate) fn get(&self, id: &Oid) -> Option<(Kind, &[u8])> {
        self.by_id.get(id).map(|(k, d)| (*k, d.as_slice()))
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
    Delta(Base, Vec<u8>),
}

/// Where a delta's base is: the entry at an offset (OFS_DELTA) or the object of an id
/// (REF_DELTA, which may come anywhere in the pack).
#[derive(Clone, Copy)]
enum Base {
    Offset(usize),
    Id(Oid),
}

/// An entry with where it sits: its number in the pack (from 1, for messages) and its offset.
struct Stored {
    number: u32,
    offset: usize,
    entry: Entry,
}

/// What one object costs beyond its bytes, rounded up: its 64-byte [`Stored`] entry while the
/// pack is read, then a 56-byte slot in the index by id (reserved up front, at most 7/8 full),
/// a 64-byte place among the deltas or a 40-byte one among the objects ready to be bases, a
/// 16- or 32-byte place in a list of deltas waiting for their base, and an allocation header;
/// charged so that hundreds of thousands of empty objects are refused.
const OBJECT_OVERHEAD: u64 = 320;

/// The longest chain of deltas resolved. Git makes none longer: `pack-objects` clamps its
/// `--depth` to 4095.
const MAX_DELTA_DEPTH: u32 = 4095;

/// Bounds of one pack.
#[derive(Clone, Debug)]
pub(crate) struct PackLimits {
    /// Memory its objects may take: their inflated bytes and [`OBJECT_OVERHEAD`] each.
    pub max_bytes: u64,
    /// Objects it may announce in its header.
    pub max_objects: u32,
    /// The build's: checked with every charge, so an abandoned build stops parsing.
    pub deadline: Deadline,
}

/// The memory a pack may still take. Every allocation the pack's bytes ask for is charged
/// here before it is made: a size field of 2^63 must be an error, not an allocation failure,
/// which aborts the whole process.
struct Budget {
    left: u64,
    limit: u64,
    deadline: Deadline,
}

impl Budget {
    fn charge(&mut self, what: &str, bytes: u64) -> Result<(), String> {
        self.deadline.check().map_err(|e| e.to_string())?;
        self.left = self.left.checked_sub(bytes).ok_or_else(|| {
            format!(
                "{what} of {bytes} bytes exceeds the remaining budget of {} bytes \
                 (the repository is larger than the limit of {} bytes)",
                self.left, self.limit
            )
        })?;
        Ok(())
    }
}

/// Parses a pack, resolving deltas, within `limits`.
pub(crate) fn parse(pack: &[u8], limits: PackLimits) -> Result<Objects, String> {
    if pack.len() < 32 || &pack[..4] != b"PACK" {
        return Err("not a Git packfile".into());
    }
    let version = u32::from_be_bytes(pack[4..8].try_into().expect("4 bytes"));
    if version != 2 && version != 3 {
        return Err(format!("unsupported pack version {version}"));
    }
    let count = u32::from_be_bytes(pack[8..12].try_into().expect("4 bytes"));
    if count > limits.max_objects {
        return Err(format!(
            "the pack holds {count} objects, more than the limit of {}",
            limits.max_objects
        ));
    }
    let (body, checksum) = pack.split_at(pack.len() - 20);
    if Sha1::digest(body)[..] != checksum[..] {
        return Err("pack checksum mismatch".into());
    }
    let mut budget = Budget {
        left: limits.max_bytes,
        limit: limits.max_bytes,
        deadline: limits.deadline,
    };
    // No more entries than the budget can pay for: the count is the server's word.
    let affordable = usize::try_from(limits.max_bytes / OBJECT_OVERHEAD).unwrap_or(usize::MAX);
    let mut entries = Vec::with_capacity(affordable.min(count as usize));
    // Readers below see only the body: a field running into the checksum is truncated.
    let mut pos = 12;
    // One inflater for all entries: a new one is 40 KiB zeroed, per object.
    let mut z = Decompress::new(true);
    for number in 1..=count {
        let offset = pos;
        let entry = read_entry(body, &mut pos, &mut budget, &mut z)
            .map_err(|e| format!("pack object {number}: {e}"))?;
        entries.push(Stored {
            number,
            offset,
            entry,
        });
    }
    resolve(entries, budget)
}

/// Reads the entry at `pos`, charging its inflated size and overhead before inflating it.
fn read_entry(
    body: &[u8],
    pos: &mut usize,
    budget: &mut Budget,
    z: &mut Decompress,
) -> Result<Entry, String> {
    let start = *pos;
    let (type_code, size) = read_header(body, pos)?;
    budget.charge("object entry", OBJECT_OVERHEAD)?;
    let entry = match type_code {
        1..=4 => {
            let kind = [Kind::Commit, Kind::Tree, Kind::Blob, Kind::Tag][type_code as usize - 1];
            budget.charge("inflated object", size)?;
            Entry::Whole(kind, inflate(body, pos, size, z)?)
        }
        6 => {
            let back = read_offset(body, pos)?;
            let base = start
                .checked_sub(back)
                .ok_or("delta base offset before the pack start")?;
            budget.charge("inflated delta", size)?;
            Entry::Delta(Base::Offset(base), inflate(body, pos, size, z)?)
        }
        7 => {
            let rest = body.get(*pos..).unwrap_or_default();
            let id: Oid = rest
                .get(..20)
                .and_then(|id| id.try_into().ok())
                .ok_or_else(|| format!("truncated REF_DELTA base id ({} of 20 bytes)", rest.len()))?;
            *pos += 20;
            budget.charge("inflated delta", size)?;
            Entry::Delta(Base::Id(id), inflate(body, pos, size, z)?)
        }
        other => return Err(format!("unknown pack object type {other}")),
    };
    Ok(entry)
}

/// A delta waiting for its base.
struct Delta {
    number: u32,
    offset: usize,
    base: Base,
    data: Vec<u8>,
}

/// An object stored and not yet used as a base: the deltas waiting for it come next.
struct Ready {
    offset: usize,
    id: Oid,
    /// Deltas between it and a whole object.
    depth: u32,
    /// Whether it was the first object of its id: only then do the deltas naming that id wait
    /// for it (a later copy must not release them again).
    first: bool,
}

/// Resolves every delta once, from its base: the deltas are indexed by the base they wait
/// for, and each stored object releases those waiting for it, so the work is linear in the
/// pack, whatever the order of its entries.
fn resolve(entries: Vec<Stored>, mut budget: Budget) -> Result<Objects, String> {
    let mut objects = Objects {
        by_id: HashMap::with_capacity(entries.len()),
    };
    let mut ready = Vec::new();
    let mut deltas = Vec::new();
    // The deltas by base, to be sorted: those waiting for one base are then one range.
    let mut at_offset = Vec::new();
    let mut for_id = Vec::new();
    for Stored {
        number,
        offset,
        entry,
    } in entries
    {
        match entry {
            Entry::Whole(kind, data) => {
                let id = object_id(kind, &data);
                let first = objects.add(id, kind, data);
                ready.push(Ready {
                    offset,
                    id,
                    depth: 0,
                    first,
                });
            }
            Entry::Delta(base, data) => {
                match base {
                    Base::Offset(at) => at_offset.push((at, deltas.len())),
                    Base::Id(id) => for_id.push((id, deltas.len())),
                }
                deltas.push(Some(Delta {
                    number,
                    offset,
                    base,
                    data,
                }));
            }
        }
    }
    at_offset.sort_unstable();
    for_id.sort_unstable();
    while let Some(base) = ready.pop() {
        let by_id = if base.first {
            waiting(&for_id, &base.id)
        } else {
            &[]
        };
        let waiters = waiting(&at_offset, &base.offset).iter().map(|w| w.1);
        for index in waiters.chain(by_id.iter().map(|w| w.1)) {
            // An offset is one entry's, and an id releases its deltas once.
            let delta = deltas[index].take().expect("a delta is released once");
            let fail = |e: String| format!("pack object {}: {e}", delta.number);
            let depth = base.depth + 1;
            if depth > MAX_DELTA_DEPTH {
                return Err(fail(format!(
                    "delta chain longer than {MAX_DELTA_DEPTH} (Git makes none longer)"
                )));
            }
            let (kind, source) = objects.get(&base.id).expect("a ready object is stored");
            let data = apply_delta(source, &delta.data, &mut budget).map_err(fail)?;
            let id = object_id(kind, &data);
            let first = objects.add(id, kind, data);
            ready.push(Ready {
                offset: delta.offset,
                id,
                depth,
                first,
            });
        }
    }
    match deltas.into_iter().flatten().next() {
        None => Ok(objects),
        Some(Delta { number, base, .. }) => Err(format!(
            "pack object {number}: its delta base, {}, is not among the pack's objects (a thin pack?)",
            match base {
                Base::Offset(offset) => format!("the entry at offset {offset}"),
                Base::Id(id) => format!("object {}", hex::encode(id)),
            }
        )),
    }
}

/// The entries of a sorted list whose key is `key`.
fn waiting<'a, K: Ord>(list: &'a [(K, usize)], key: &K) -> &'a [(K, usize)] {
    let start = list.partition_point(|(k, _)| k < key);
    let len = list[start..].partition_point(|(k, _)| k == key);
    &list[start..start + len]
}

/// Type and inflated size from an object header.
fn read_header(body: &[u8], pos: &mut usize) -> Result<(u8, u64), String> {
    let mut byte = *body.get(*pos).ok_or("truncated object header")?;
    *pos += 1;
    let type_code = (byte >> 4) & 7;
    let mut size = u64::from(byte & 0x0f);
    let mut shift = 4;
    while byte & 0x80 != 0 {
        byte = *body.get(*pos).ok_or("truncated object header")?;
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
fn read_offset(body: &[u8], pos: &mut usize) -> Result<usize, String> {
    let mut byte = *body.get(*pos).ok_or("truncated delta offset")?;
    *pos += 1;
    let mut offset = usize::from(byte & 0x7f);
    while byte & 0x80 != 0 {
        byte = *body.get(*pos).ok_or("truncated delta offset")?;
        *pos += 1;
        offset = offset
            .checked_add(1)
            .and_then(|o| o.checked_mul(128))
            .ok_or("delta offset overflows")?
            | usize::from(byte & 0x7f);
    }
    Ok(offset)
}

/// Inflates one zlib stream starting at `pos` with `z`, which must yield exactly `size` bytes
/// (already charged); `pos` moves past the compressed bytes.
fn inflate(body: &[u8], pos: &mut usize, size: u64, z: &mut Decompress) -> Result<Vec<u8>, String> {
    let size = usize::try_from(size).map_err(|_| format!("object of {size} bytes too large"))?;
    // One spare byte of room so that a stream longer than announced is noticed.
    let mut out = Vec::with_capacity(size.saturating_add(1));
    z.reset(true);
    loop {
        let input = body.get(*pos + z.total_in() as usize..).unwrap_or_default();
        let progress = (z.total_in(), z.total_out());
        let status = z
            .decompress_vec(input, &mut out, FlushDecompress::None)
            .map_err(|e| format!("corrupt object data: {e}"))?;
        if out.len() > size {
            return Err(format!("object is larger than its header's {size} bytes"));
        }
        match status {
            Status::StreamEnd => break,
            _ if input.is_empty() => return Err("truncated object data".into()),
            // Room and input left, yet nothing moved: the stream cannot go on.
            _ if (z.total_in(), z.total_out()) == progress => {
                return Err("corrupt object data: no progress".into());
            }
            Status::Ok | Status::BufError => {}
        }
    }
    if out.len() != size {
        return Err(format!(
            "object of {} bytes is smaller than its header's {size} bytes",
            out.len()
        ));
    }
    *pos += z.total_in() as usize;
    Ok(out)
}

/// A delta's size fields: little-endian base-128.
fn read_varint(delta: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = *delta.get(*pos).ok_or("truncated delta")?;
        *pos += 1;
        if shift > 56 {
            return Err("delta size overflows".into());
        }
        value |= u64::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// A copy instruction's offset (up to 4 bytes) and size (up to 3; 0 means 64 KiB), each byte
/// present when its bit of `op` is set.
fn copy_fields(op: u8, delta: &[u8], pos: &mut usize) -> Result<(usize, usize), String> {
    let mut field = |bits: u8, bytes: u32| -> Result<usize, String> {
        let mut value = 0usize;
        for i in 0..bytes {
            if bits & (1 << i) != 0 {
                let byte = *delta.get(*pos).ok_or("truncated delta copy instruction")?;
                value |= usize::from(byte) << (8 * i);
                *pos += 1;
            }
        }
        Ok(value)
    };
    let offset = field(op & 0x0f, 4)?;
    let size = match field((op >> 4) & 0x07, 3)? {
        0 => 0x10000,
        n => n,
    };
    Ok((offset, size))
}

/// Rebuilds an object from its base and a delta of copy and insert instructions. The announced
/// target size is charged before the result is allocated, and no instruction may take the
/// result past it, so the result never grows beyond what was charged.
fn apply_delta(base: &[u8], delta: &[u8], budget: &mut Budget) -> Result<Vec<u8>, String> {
    let mut pos = 0;
    let base_len = read_varint(delta, &mut pos)?;
    if base_len != base.len() as u64 {
        return Err(format!(
            "delta base size {base_len} does not match the base's {} bytes",
            base.len()
        ));
    }
    let target_len = read_varint(delta, &mut pos)?;
    budget.charge("delta target", target_len)?;
    let target_len =
        usize::try_from(target_len).map_err(|_| format!("delta target of {target_len} bytes too large"))?;
    let mut out = Vec::with_capacity(target_len);
    while let Some(&op) = delta.get(pos) {
        pos += 1;
        let (what, piece) = if op & 0x80 != 0 {
            let (offset, size) = copy_fields(op, delta, &mut pos)?;
            let piece = offset
                .checked_add(size)
                .and_then(|end| base.get(offset..end))
                .ok_or_else(|| {
                    format!(
                        "delta copy of {size} bytes at offset {offset} reaches beyond the base of {} bytes",
                        base.len()
                    )
                })?;
            ("copy", piece)
        } else if op != 0 {
            let piece = delta
                .get(pos..pos + usize::from(op))
                .ok_or("truncated delta insert instruction")?;
            pos += piece.len();
            ("insert", piece)
        } else {
            return Err("delta has the reserved instruction 0".into());
        };
        if piece.len() > target_len - out.len() {
            return Err(format!(
                "delta {what} of {} bytes makes the result longer than the announced {target_len} bytes",
                piece.len()
            ));
        }
        out.extend_from_slice(piece);
    }
    if out.len() != target_len {
        return Err(format!(
            "delta result of {} bytes is shorter than the announced {target_len} bytes",
            out.len()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    /// A budget no test delta comes near.
    fn roomy() -> Budget {
        Budget {
            left: 1 << 20,
            limit: 1 << 20,
            deadline: Deadline::after(Duration::from_secs(3600)),
        }
    }

    /// Limits of `max_bytes` and far more objects than any test pack holds.
    fn within(max_bytes: u64) -> PackLimits {
        PackLimits {
            max_bytes,
            max_objects: 1 << 20,
            deadline: Deadline::after(Duration::from_secs(3600)),
        }
    }

    /// Before, a build abandoned at spec.timeout parsed its pack to the end on the blocking
    /// thread; now every object's charge checks the build's deadline.
    #[test]
    fn a_pack_is_not_parsed_past_the_deadline() {
        let blob = entry(3, &[], b"x");
        let pack = sealed(3, &blob.repeat(3));
        assert!(parse(&pack, within(1 << 20)).is_ok());
        let passed = Deadline::from(Instant::now() - Duration::from_secs(31), Duration::from_secs(30));
        let limits = PackLimits {
            deadline: passed,
            ..within(1 << 20)
        };
        assert_eq!(
            parse(&pack, limits).unwrap_err(),
            "pack object 1: the build ran out of time (spec.timeout 30s)"
        );
    }

    #[test]
    fn delta_copies_and_inserts() {
        let base = b"hello, world";
        let delta = [12, 13, 0x90, 5, 3, b'!', b'!', b'!', 0x91, 7, 5];
        assert_eq!(apply_delta(base, &delta, &mut roomy()).unwrap(), b"hello!!!world");
    }

    #[test]
    fn delta_errors_are_reported() {
        let base = b"hello";
        let cases: [(&[u8], &str); 5] = [
            (
                &[5, 3, 0x90, 9],
                "delta copy of 9 bytes at offset 0 reaches beyond the base of 5 bytes",
            ),
            (&[5, 1, 0], "delta has the reserved instruction 0"),
            (
                &[5, 9, 1, b'x'],
                "delta result of 1 bytes is shorter than the announced 9 bytes",
            ),
            (
                &[5, 1, 2, b'x', b'y'],
                "delta insert of 2 bytes makes the result longer than the announced 1 bytes",
            ),
            (&[5, 3, 0x91], "truncated delta copy instruction"),
        ];
        for (delta, message) in cases {
            assert_eq!(apply_delta(base, delta, &mut roomy()).unwrap_err(), message);
        }
    }

    /// One pack entry: the type-and-size header for `type_code` and `payload`'s length, then
    /// `between` (a delta's base offset or id), then `payload` zlib-compressed.
    fn entry(type_code: u8, between: &[u8], payload: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut size = payload.len();
        let mut out = vec![(type_code << 4) | (size & 0x0f) as u8];
        size >>= 4;
        while size > 0 {
            *out.last_mut().unwrap() |= 0x80;
            out.push((size & 0x7f) as u8);
            size >>= 7;
        }
        out.extend_from_slice(between);
        let mut z = flate2::write::ZlibEncoder::new(out, flate2::Compression::best());
        z.write_all(payload).unwrap();
        z.finish().unwrap()
    }

    /// A pack of `count` objects made of `body`, with its header and checksum.
    fn sealed(count: u32, body: &[u8]) -> Vec<u8> {
        let mut pack = b"PACK\0\0\0\x02".to_vec();
        pack.extend_from_slice(&count.to_be_bytes());
        pack.extend_from_slice(body);
        let checksum = Sha1::digest(&pack);
        pack.extend_from_slice(&checksum);
        pack
    }

    /// A delta's size field: little-endian base-128.
    fn varint(mut value: u64) -> Vec<u8> {
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

    /// A pack of the blob `base` and one delta against it, by offset or by id.
    fn base_and_delta(base: &[u8], delta: &[u8], by_id: bool) -> Vec<u8> {
        let mut body = entry(3, &[], base);
        let delta = if by_id {
            entry(7, &object_id(Kind::Blob, base), delta)
        } else {
            // The base starts right after the pack header: this entry's distance back to it.
            assert!(body.len() < 0x80, "one byte of offset");
            entry(6, &[body.len() as u8], delta)
        };
        body.extend_from_slice(&delta);
        sealed(2, &body)
    }

    #[test]
    fn a_delta_announcing_an_exabyte_target_is_refused_before_allocating_it() {
        // Before: an empty blob and a delta announcing a 2^63 - 1 byte target, 55 bytes with
        // an OFS_DELTA (the was 58), 74 with a REF_DELTA; parsing allocated the target
        // first, the allocation failed and aborted the whole process.
        let delta = [&[0][..], &varint(i64::MAX as u64)].concat();
        for by_id in [false, true] {
            let pack = base_and_delta(b"", &delta, by_id);
            assert!(pack.len() < 80, "a tiny pack: {} bytes", pack.len());
            let err = parse(&pack, within(64 << 20)).unwrap_err();
            assert!(
                err.starts_with(
                    "pack object 2: delta target of 9223372036854775807 bytes exceeds the remaining budget of "
                ),
                "{err}"
            );
            assert!(
                err.ends_with("(the repository is larger than the limit of 67108864 bytes)"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_delta_base_size_other_than_the_base_is_refused() {
        // Before: only "delta base size mismatch", naming neither object nor sizes.
        let delta = [&varint(1 << 40)[..], &[1, 1, b'x']].concat();
        let err = parse(&base_and_delta(b"0123456789", &delta, false), within(1 << 20)).unwrap_err();
        assert_eq!(
            err,
            "pack object 2: delta base size 1099511627776 does not match the base's 10 bytes"
        );
    }

    #[test]
    fn a_copy_beyond_the_base_or_the_announced_target_is_refused() {
        // Four bytes of copy instruction ask for 16 MiB (size 0xffffff from offset 0).
        let copy_16_mib = [0xf0, 0xff, 0xff, 0xff];
        let from_tiny_base = [&[10, 10][..], &copy_16_mib].concat();
        let err = parse(
            &base_and_delta(b"0123456789", &from_tiny_base, false),
            within(64 << 20),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "pack object 2: delta copy of 16777215 bytes at offset 0 reaches beyond the base of 10 bytes"
        );
        // Before: a copy within the base but past the announced size was made, then refused.
        let past_target = [&[10, 4][..], &[0x90, 10]].concat();
        let err = parse(
            &base_and_delta(b"0123456789", &past_target, true),
            within(1 << 20),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "pack object 2: delta copy of 10 bytes makes the result longer than the announced 4 bytes"
        );
        let short = [&[10, 9][..], &[0x90, 4]].concat();
        let err = parse(&base_and_delta(b"0123456789", &short, true), within(1 << 20)).unwrap_err();
        assert_eq!(
            err,
            "pack object 2: delta result of 4 bytes is shorter than the announced 9 bytes"
        );
    }

    #[test]
    fn a_truncated_ref_delta_base_id_is_refused() {
        // Before: 10 of the 20 id bytes, then the checksum; the id was read from the checksum
        // and slicing the object data past the end panicked.
        let pack = sealed(1, &[0x7a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(
            parse(&pack, within(1 << 20)).unwrap_err(),
            "pack object 1: truncated REF_DELTA base id (10 of 20 bytes)"
        );
        // The same for a header whose size bytes run into the checksum.
        let pack = sealed(1, &[0xb0, 0x80]);
        assert_eq!(
            parse(&pack, within(1 << 20)).unwrap_err(),
            "pack object 1: truncated object header"
        );
    }

    #[test]
    fn many_empty_objects_are_charged_for_their_entries() {
        // Before: 10 000 empty blobs (90 KB of pack) fitted a 1 MB budget, as their bytes
        // were all that was charged; 7 million fit the download limit and took 1.1 GB.
        let blob = entry(3, &[], b"");
        let pack = sealed(10_000, &blob.repeat(10_000));
        let err = parse(&pack, within(1 << 20)).unwrap_err();
        assert!(
            err.contains(": object entry of ") && err.contains("exceeds the remaining budget of"),
            "{err}"
        );
        let number: u32 = err["pack object ".len()..]
            .split(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1_000..5_000).contains(&number), "refused at object {number}");
    }

    #[test]
    fn a_pack_announcing_more_objects_than_the_limit_is_refused_before_reading_them() {
        // Before: only the budget stopped a pack of millions of empty blobs, after reading
        // hundreds of thousands, with a message about an "object entry of 320 bytes".
        let blob = entry(3, &[], b"");
        let pack = sealed(1001, &blob.repeat(1001));
        let limits = PackLimits {
            max_objects: 1000,
            ..within(64 << 20)
        };
        assert_eq!(
            parse(&pack, limits.clone()).unwrap_err(),
            "the pack holds 1001 objects, more than the limit of 1000"
        );
        let limits = PackLimits {
            max_objects: 1001,
            ..limits
        };
        assert_eq!(parse(&pack, limits).unwrap().iter().count(), 1, "one id");
    }

    /// A delta from `base` to `target` inserting all of `target` (at most 127 bytes).
    fn insert_delta(base: &[u8], target: &[u8]) -> Vec<u8> {
        let insert = u8::try_from(target.len()).unwrap();
        assert!(insert < 0x80, "one insert instruction");
        [
            &varint(base.len() as u64)[..],
            &varint(target.len() as u64),
            &[insert],
            target,
        ]
        .concat()
    }

    /// The blobs of chain `chain`, step 0 (the whole one) to `len`.
    fn chain_blobs(chain: usize, len: usize) -> Vec<Vec<u8>> {
        (0..=len)
            .map(|step| format!("chain {chain} step {step}\n").into_bytes())
            .collect()
    }

    /// `chains` chains of `len` REF_DELTAs each, every delta listed before its base (the
    /// order that took the repeated passes quadratic time), their whole bases last.
    fn reversed_chains(chains: usize, len: usize) -> Vec<u8> {
        let mut body = Vec::new();
        for chain in 0..chains {
            let blobs = chain_blobs(chain, len);
            for step in (1..=len).rev() {
                let (base, target) = (&blobs[step - 1], &blobs[step]);
                body.extend(entry(
                    7,
                    &object_id(Kind::Blob, base),
                    &insert_delta(base, target),
                ));
            }
        }
        for chain in 0..chains {
            body.extend(entry(3, &[], &chain_blobs(chain, 0)[0]));
        }
        sealed((chains * (len + 1)) as u32, &body)
    }

    #[test]
    fn ref_deltas_listed_before_their_bases_resolve_to_every_object() {
        // Four chains as long as Git makes them, 16 380 deltas in all, each listed before its
        // base; before, each pass over the pending deltas resolved one step of each chain.
        let len = MAX_DELTA_DEPTH as usize;
        let objects = parse(&reversed_chains(4, len), within(64 << 20)).unwrap();
        assert_eq!(objects.iter().count(), 4 * (len + 1));
        for chain in 0..4 {
            for blob in chain_blobs(chain, len) {
                let id = object_id(Kind::Blob, &blob);
                assert_eq!(objects.get(&id), Some((Kind::Blob, &blob[..])));
            }
        }
    }

    #[test]
    fn a_delta_chain_longer_than_git_makes_is_refused_naming_the_object() {
        // Before: a chain of 5 000 REF_DELTAs in reverse was resolved in 5 000 passes over
        // the pending ones (20 000 took 12 s, 40 000 took 53 s, outside any timeout).
        let err = parse(&reversed_chains(1, 5000), within(64 << 20)).unwrap_err();
        // The 4 096th delta from the whole blob is listed 905th.
        assert_eq!(
            err,
            "pack object 905: delta chain longer than 4095 (Git makes none longer)"
        );
    }

    #[test]
    fn copies_of_a_base_release_the_deltas_naming_it_once() {
        // A thousand copies of one blob and a thousand REF_DELTAs naming it: each delta is
        // applied once, not once per copy.
        let base = b"base\n";
        let mut body = Vec::new();
        for i in 0..1000 {
            let target = format!("target {i}\n");
            let delta = insert_delta(base, target.as_bytes());
            body.extend(entry(7, &object_id(Kind::Blob, base), &delta));
            body.extend(entry(3, &[], base));
        }
        let objects = parse(&sealed(2000, &body), within(1 << 20)).unwrap();
        assert_eq!(objects.iter().count(), 1001);
    }

    #[test]
    fn a_delta_whose_base_is_not_in_the_pack_is_refused_naming_both() {
        let delta = insert_delta(b"gone", b"x");
        let pack = sealed(1, &entry(7, &[0xab; 20], &delta));
        assert_eq!(
            parse(&pack, within(1 << 20)).unwrap_err(),
            format!(
                "pack object 1: its delta base, object {}, is not among the pack's objects (a thin pack?)",
                "ab".repeat(20)
            )
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
        let objects = parse(pack, within(1 << 20)).unwrap();
        assert_eq!(objects.iter().count(), ids.len());
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
        let err = parse(&pack, within(1000)).unwrap_err();
        assert!(err.starts_with("pack object "), "{err}");
        assert!(
            err.ends_with("(the repository is larger than the limit of 1000 bytes)"),
            "{err}"
        );
    }

    #[test]
    fn a_corrupt_pack_is_refused() {
        let (mut pack, _) = pack_with(&[]);
        let n = pack.len();
        pack[n / 2] ^= 0xff;
        assert_eq!(
            parse(&pack, within(1 << 20)).unwrap_err(),
            "pack checksum mismatch"
        );
        assert_eq!(parse(b"nope", within(1 << 20)).unwrap_err(), "not a Git packfile");
    }
}
