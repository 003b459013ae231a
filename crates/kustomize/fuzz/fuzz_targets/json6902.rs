//! Fuzzes JSON6902 patches: a target object and a list of operations, each YAML, separated by a
//! line `---patch---`. Invariants: no panic; an operation list that applies gives a value that
//! prints and parses back when it is an object; applying the same list twice from the same
//! target gives the same result (no hidden state).
//! Size oracle (a `copy` once doubled the object per operation): applied again with a small
//! growth bound that inputs reach, a result is the production one, and its JSON is no longer
//! than the target's plus a fixed multiple of the bound and of the patch's own text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[path = "patch_input.rs"]
mod patch_input;

/// The growth bound of the oracle: a few `copy` operations of a small object pass it.
const LIMIT: usize = 64 << 10;
/// JSON bytes per byte of memory a value adds, from above: a string's byte may print as a
/// six-byte escape (`\u0001`); a number, `null` or a boolean (at most 24 characters and a
/// comma) takes a 32-byte slot.
const JSON_PER_BYTE: usize = 6;

fuzz_target!(|data: &[u8]| {
    let Some((target, doc)) = patch_input::target_and_patch(data) else { return };
    if !doc.is_json6902() {
        return;
    }
    let first = doc.apply(&target);
    assert_eq!(first, doc.apply(&target), "the same patch gave two results");
    if let Ok(patched @ Value::Object(_)) = &first {
        let printed = kustomize::to_yaml(std::slice::from_ref(patched));
        kustomize::yaml::parse_documents(&printed, "printed.yaml")
            .unwrap_or_else(|e| panic!("printed result does not parse: {e}\n{printed}"));
    }
    let bounded = doc.apply_json6902_within(&target, LIMIT).expect("a JSON6902 patch");
    if let Ok(patched) = bounded {
        assert_eq!(first.as_ref().ok(), Some(&patched), "a smaller bound changed the result");
        // Keys of new members come from the patch's paths, so its text is part of the bound.
        let json_len = |v: &Value| serde_json::to_string(v).unwrap().len();
        let bound = json_len(&target) + JSON_PER_BYTE * (LIMIT + data.len());
        let got = json_len(&patched);
        assert!(got <= bound, "the result is {got} bytes of JSON, more than {bound}");
    }
});
