//! Fuzzes the engine's YAML reader (anchors, aliases, merge keys, kyaml scalar resolution) and
//! its printer. Invariants, whatever the input: no panic, no runaway alias expansion (the node
//! budget and the flow-depth guard refuse it in time), and every object that parses prints to
//! YAML that parses back to the same objects, as Flux's substitution relies on. Strings holding
//! U+2028 or U+2029 are the exception: goyaml, and so kustomize, writes them in block scalars
//! as line breaks, which read back as other text (`yaml-print-line-and-paragraph-separators`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(documents) = kustomize::yaml::parse_documents(text, "fuzz.yaml") else { return };
    let objects: Vec<Value> = documents.into_iter().filter(Value::is_object).collect();
    if objects.is_empty() {
        return;
    }
    let printed = kustomize::to_yaml(&objects);
    let reread = kustomize::yaml::parse_documents(&printed, "printed.yaml")
        .unwrap_or_else(|e| panic!("printed YAML does not parse: {e}\n{printed}"));
    if !printed.contains(['\u{2028}', '\u{2029}']) {
        assert_eq!(reread, objects, "printing changed the objects:\n{printed}");
    }
});
