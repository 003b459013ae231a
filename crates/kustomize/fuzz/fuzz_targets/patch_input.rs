//! The input format of the patch targets: a target (the last YAML document before the line
//! `---patch---`) and the patch after it, parsed by the parser the `patches` field uses.

use kustomize::fuzzing::Patch;
use kustomize::yaml::parse_documents;
use serde_json::Value;

/// The target and the parsed patch, or `None` when the input is not of this form.
pub fn target_and_patch(data: &[u8]) -> Option<(Value, Patch)> {
    let text = std::str::from_utf8(data).ok()?;
    let (target, patch_text) = text.split_once("\n---patch---\n")?;
    let target = parse_documents(target, "target.yaml").ok()?.pop()?;
    let doc = Patch::parse(patch_text, "patch.yaml").ok()?;
    Some((target, doc))
}
