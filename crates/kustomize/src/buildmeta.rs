//! `buildMetadata: [transformerAnnotations]`: every object records, in order, each
//! transformer that ran over the kustomization holding it (kustomize records a transformer
//! on every object present when it runs, changed or not), printed at the end as the
//! `alpha.config.kubernetes.io/transformations` annotation.

use std::path::Path;
use std::sync::Arc;

use super::resmap::{ResMap, Transformation};

/// The annotation holding the record.
const TRANSFORMATIONS: &str = "alpha.config.kubernetes.io/transformations";

/// Records `runs` runs of one transformer on every object now in `map`.
pub(crate) fn ran(map: &mut ResMap, configured_in: &Path, kind: &str, name: Option<&str>, runs: usize) {
    if runs == 0 {
        return;
    }
    let run = Arc::new(Transformation {
        configured_in: configured_in.to_path_buf(),
        kind: kind.to_string(),
        name: name.map(str::to_string),
    });
    for res in &mut map.resources {
        res.transformations
            .extend(std::iter::repeat_n(Arc::clone(&run), runs));
    }
}

/// Writes the record of every object as its annotation; `relative` shows a file relative
/// to the root kustomization's directory.
pub(crate) fn annotate(map: &mut ResMap, relative: impl Fn(&Path) -> String) {
    map.each(|res| {
        if res.transformations.is_empty() {
            return;
        }
        let mut text = String::new();
        for run in &res.transformations {
            text.push_str(&format!(
                "- configuredIn: {}\n  configuredBy:\n    apiVersion: builtin\n    kind: {}\n",
                relative(&run.configured_in),
                run.kind
            ));
            if let Some(name) = &run.name {
                text.push_str(&format!("    name: {name}\n"));
            }
        }
        res.set_annotation(TRANSFORMATIONS, text);
    });
}
