//! Fuzzes the artifact extractor with hostile archives. Invariants, whatever the input:
//! no panic, nothing created outside the destination, and on success every symlink left in
//! the tree resolves inside it.
#![no_main]

use std::fs;
use std::path::Path;

use libfuzzer_sys::fuzz_target;

#[path = "../../src/source/extract.rs"]
mod extract;
// The extractor places its links as `super::symlinks`.
#[path = "../../src/source/symlinks.rs"]
mod symlinks;

use extract::{ExtractLimits, extract};

fuzz_target!(|data: &[u8]| {
    // First byte: 0 = the input is the .tar.gz itself; else the input is a tar stream that is
    // gzipped here, so the fuzzer explores tar structure instead of fighting deflate.
    let Some((&mode, body)) = data.split_first() else { return };
    let archive = if mode == 0 { body.to_vec() } else { gzip(body) };
    let limits = ExtractLimits { max_bytes: 4 << 20, max_entries: 512 };

    let parent = tempfile::tempdir().expect("temp dir");
    let dest = parent.path().join("tree");
    let result = extract(&archive[..], &dest, &limits);

    let names: Vec<_> = fs::read_dir(parent.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.iter().all(|n| n == "tree"), "created outside the destination: {names:?} ({result:?})");
    if result.is_ok() {
        let root = fs::canonicalize(&dest).unwrap();
        check_links(&root, &root);
    }
});

fn check_links(root: &Path, dir: &Path) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            let resolved = fs::canonicalize(&path).expect("kept symlinks resolve");
            assert!(resolved.starts_with(root), "{} resolves to {}", path.display(), resolved.display());
        } else if meta.is_dir() {
            check_links(root, &path);
        }
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}
