//! Fuzzes strategic merge patches: a target object and a patch, each YAML, separated by a line
//! `---patch---`. The patch goes through the same parser the `patches` field uses. Invariants:
//! no panic; a merge gives an object (or null when the patch deletes it) that keeps the
//! target's apiVersion and namespace, and prints to YAML that parses back.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "patch_input.rs"]
mod patch_input;

fuzz_target!(|data: &[u8]| {
    let Some((target, doc)) = patch_input::target_and_patch(data) else { return };
    if !target.is_object() {
        return;
    }
    if !doc.is_strategic_merge() {
        return;
    }
    let Ok(merged) = doc.apply(&target) else { return };
    if merged.is_null() {
        return;
    }
    assert!(merged.is_object(), "a merge gave a non-object: {merged}");
    assert_eq!(merged["apiVersion"], target["apiVersion"]);
    assert_eq!(merged["metadata"]["namespace"], target["metadata"]["namespace"]);
    let printed = kustomize::to_yaml(std::slice::from_ref(&merged));
    kustomize::yaml::parse_documents(&printed, "printed.yaml")
        .unwrap_or_else(|e| panic!("printed merge does not parse: {e}\n{printed}"));
});
