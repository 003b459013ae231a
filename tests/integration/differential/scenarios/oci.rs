//! An OCIRepository source: trees pushed by the real `flux push artifact` with the commit they
//! come from, so both sides record that commit as `lastAppliedOriginRevision`.

use serde_json::json;

use super::{Action, Expect, Scenario, apply, config_map, step, tree};

pub(super) fn scenarios() -> Vec<Scenario> {
    let first = tree(&[config_map("a", "one"), config_map("b", "one")]);
    vec![Scenario {
        name: "oci-source",
        files: first.clone(),
        setup: vec![],
        steps: vec![
            step(Action::Push(first), vec![]),
            apply(
                "app",
                json!({"sourceRef": {"kind": "OCIRepository", "name": "oci"}}),
            ),
            // A new artifact on the same tag: applied with its own origin, b pruned.
            step(
                Action::Push(tree(&[config_map("a", "two")])),
                vec![("app", Expect::Revision)],
            ),
        ],
    }]
}
