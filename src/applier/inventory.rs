//! The inventory recorded after an apply, and what became stale.

use std::collections::HashSet;

use super::{Action, ChangeSet};
use crate::api::inventory::{ResourceInventory, ResourceRef};

/// The inventory for a change set: every applied, unchanged or skipped object (skipped ones stay
/// so that skipping never prunes), in change-set order.
pub fn inventory_of(changes: &ChangeSet) -> ResourceInventory {
    let mut seen = HashSet::new();
    let entries = changes
        .entries
        .iter()
        .filter(|e| e.action != Action::Deleted)
        .map(|e| e.object.to_entry(&e.api_version))
        .filter(|entry| seen.insert(entry.id.clone()))
        .collect();
    ResourceInventory { entries }
}

/// Entries of `previous` whose id is not in `current` (version taken from the old entry).
pub fn stale(previous: &ResourceInventory, current: &ResourceInventory) -> Vec<ResourceRef> {
    let ids: HashSet<&str> = current.entries.iter().map(|e| e.id.as_str()).collect();
    previous
        .entries
        .iter()
        .filter(|e| !ids.contains(e.id.as_str()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::inventory::ObjectRef;
    use crate::applier::tests::change_set;

    #[test]
    fn inventory_keeps_skipped_and_drops_deleted() {
        let cs = change_set([
            (ObjectRef::new("", "Namespace", "", "a"), "v1", Action::Created),
            (
                ObjectRef::new("apps", "Deployment", "a", "web"),
                "apps/v1",
                Action::Skipped,
            ),
            (ObjectRef::new("", "ConfigMap", "a", "old"), "v1", Action::Deleted),
        ]);
        let inv = inventory_of(&cs);
        assert_eq!(
            inv.entries,
            vec![
                ResourceRef {
                    id: "_a__Namespace".into(),
                    v: "v1".into()
                },
                ResourceRef {
                    id: "a_web_apps_Deployment".into(),
                    v: "v1".into()
                },
            ]
        );
    }

    #[test]
    fn stale_is_previous_minus_current_by_id() {
        let entry = |id: &str, v: &str| ResourceRef {
            id: id.into(),
            v: v.into(),
        };
        let previous = ResourceInventory {
            entries: vec![
                entry("a_x__ConfigMap", "v1"),
                entry("a_y_apps_Deployment", "v1beta1"),
            ],
        };
        // same id at a new version is not stale
        let current = ResourceInventory {
            entries: vec![entry("a_y_apps_Deployment", "v1")],
        };
        assert_eq!(stale(&previous, &current), vec![entry("a_x__ConfigMap", "v1")]);
        assert!(stale(&current, &current).is_empty());
    }
}
