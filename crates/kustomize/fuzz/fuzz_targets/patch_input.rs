//! The input format of the patch targets: a target (the last YAML document before the line
//! `---patch---`) and the patch after it, parsed by the parser the `patches` field uses.

use serde_json::Value;

use crate::kustomize::patch::{self, PatchDoc};
use crate::kustomize::yaml::parse_documents;

/// The target and the parsed patch, or `None` when the input is not of this form.
pub fn target_and_patch(data: &[u8]) -> Option<(Value, PatchDoc)> {
    let text = std::str::from_utf8(data).ok()?;
    let (target, patch_text) = text.split_once("\n---patch---\n")?;
    let target = parse_documents(target, "target.yaml").ok()?.pop()?;
    let doc = patch::parse(patch_text, "patch.yaml").ok()?;
    Some((target, doc))
}
