//! Fuzzes JSON6902 patches: a target object and a list of operations, each YAML, separated by a
//! line `---patch---`. Invariants: no panic; an operation list that applies gives a value that
//! prints and parses back when it is an object; applying the same list twice from the same
//! target gives the same result (no hidden state).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[allow(dead_code, unused_imports)]
#[path = "../../src/kustomize/mod.rs"]
mod kustomize;

#[path = "patch_input.rs"]
mod patch_input;

use kustomize::patch::{self, PatchKind};

fuzz_target!(|data: &[u8]| {
    let Some((target, doc)) = patch_input::target_and_patch(data) else { return };
    if !matches!(doc.kind, PatchKind::Json6902(_)) {
        return;
    }
    let first = patch::apply(&target, &doc, None);
    assert_eq!(first, patch::apply(&target, &doc, None), "the same patch gave two results");
    if let Ok(patched @ Value::Object(_)) = first {
        let printed = kustomize::to_yaml(std::slice::from_ref(&patched));
        kustomize::yaml::parse_documents(&printed, "printed.yaml")
            .unwrap_or_else(|e| panic!("printed result does not parse: {e}\n{printed}"));
    }
});
