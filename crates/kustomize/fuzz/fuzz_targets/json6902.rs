//! Fuzzes JSON6902 patches: a target object and a list of operations, each YAML, separated by a
//! line `---patch---`. Invariants: no panic; an operation list that applies gives a value that
//! prints and parses back when it is an object; applying the same list twice from the same
//! target gives the same result (no hidden state).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[path = "patch_input.rs"]
mod patch_input;

fuzz_target!(|data: &[u8]| {
    let Some((target, doc)) = patch_input::target_and_patch(data) else { return };
    if !doc.is_json6902() {
        return;
    }
    let first = doc.apply(&target);
    assert_eq!(first, doc.apply(&target), "the same patch gave two results");
    if let Ok(patched @ Value::Object(_)) = first {
        let printed = kustomize::to_yaml(std::slice::from_ref(&patched));
        kustomize::yaml::parse_documents(&printed, "printed.yaml")
            .unwrap_or_else(|e| panic!("printed result does not parse: {e}\n{printed}"));
    }
});
