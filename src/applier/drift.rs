//! `drift: warn`: objects the cluster no longer matches are reported and left as they are.
//!
//! Drift is a difference between the live object and the manifest we last applied for it, not a
//! change the source asks for: an object is held back only when its normalized manifest is the
//! one last applied to it (remembered per object by this process across failed passes; after a
//! restart, when the whole build is the one the last successful pass applied) and its dry-run
//! would write fields. A changed manifest, or a new object, is applied as usual. An object
//! deleted out of band is reported as deleted and not recreated. A write that changes no field
//! (only field ownership) is not drift. Every write of an apply goes through [`Holding::hold`],
//! a retried (deferred) one too, and a held object is settled as skipped: it stays in the change
//! set, hence in the inventory, so holding never prunes.

use std::collections::HashMap;
use std::fmt;

use super::diff::drifted_fields;
use super::plan::{Desired, Outcome, Write};
use super::{Action, Drift};
use crate::api::inventory::ObjectRef;

/// What an apply does about drift.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriftPolicy {
    /// Correct it (Flux's behaviour).
    #[default]
    Correct,
    /// Report it and leave it. `same_build`: the last successful pass applied this very build,
    /// which tells drift from change when no applied manifest is remembered (after a restart).
    Warn { same_build: bool },
}

/// A drifted object, left in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriftReport {
    pub object: ObjectRef,
    pub drift: Drift,
}

/// `ConfigMap/apps/a (data.value)`, `ConfigMap/apps/b (deleted)`.
impl fmt::Display for DriftReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.drift {
            Drift::Missing => write!(f, "{} (deleted)", self.object),
            Drift::Changed(fields) if fields.is_empty() => write!(f, "{} (immutable fields)", self.object),
            Drift::Changed(fields) => write!(f, "{} ({})", self.object, fields.join(", ")),
        }
    }
}

/// A held-back write: the object's index, its drift and the outcome to record.
type Held = (usize, Drift, Outcome);

/// The writes that would correct drift, taken out of `writes` with their drift and the outcome
/// to record (skipped, with the live print as it is). `applied`: the manifest prints last
/// applied per object id, when remembered.
pub(super) fn held_back(
    desired: &[Desired],
    writes: Vec<(usize, Write)>,
    applied: Option<&HashMap<String, String>>,
    same_build: bool,
) -> (Vec<(usize, Write)>, Vec<Held>) {
    let mut kept = Vec::new();
    let mut held = Vec::new();
    for (i, write) in writes {
        let d = &desired[i];
        let applied_before = match applied {
            Some(applied) => applied.get(&d.object.id()) == Some(&d.print),
            None => same_build,
        };
        if !applied_before {
            kept.push((i, write));
            continue;
        }
        match &write {
            Write::Apply { live: None, .. } => {
                held.push((i, Drift::Missing, Outcome::settled(Action::Skipped, None)))
            }
            Write::Apply {
                live: Some(live),
                ignored,
                merged,
            } => {
                let fields = drifted_fields(live, merged, ignored);
                if fields.is_empty() {
                    kept.push((i, write));
                } else {
                    held.push((
                        i,
                        Drift::Changed(fields),
                        Outcome::settled(Action::Skipped, Some(live)),
                    ));
                }
            }
            Write::Recreate => held.push((
                i,
                Drift::Changed(Vec::new()),
                Outcome::settled(Action::Skipped, None),
            )),
        }
    }
    (kept, held)
}

/// What `drift: warn` holds back in one apply, and the drift it found.
pub(super) struct Holding {
    policy: DriftPolicy,
    applied: Option<HashMap<String, String>>,
    /// By index in the apply's desired objects.
    pub(super) drifted: Vec<(usize, Drift)>,
}

impl Holding {
    pub(super) fn new(policy: DriftPolicy, applied: Option<HashMap<String, String>>) -> Self {
        Self {
            policy,
            applied,
            drifted: Vec::new(),
        }
    }

    /// `writes` without those that would correct drift; each of those is settled through
    /// `settle` (skipped) and its drift kept.
    pub(super) fn hold(
        &mut self,
        desired: &[Desired],
        writes: Vec<(usize, Write)>,
        mut settle: impl FnMut(usize, Outcome),
    ) -> Vec<(usize, Write)> {
        let DriftPolicy::Warn { same_build } = self.policy else {
            return writes;
        };
        let (kept, held) = held_back(desired, writes, self.applied.as_ref(), same_build);
        for (i, drift, outcome) in held {
            settle(i, outcome);
            self.drifted.push((i, drift));
        }
        kept
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::applier::stage::Stage;
    use crate::kube_ext::ResolvedKind;
    use kube::api::ApiResource;
    use serde_json::json;

    /// ConfigMap `apps/name` with `data.value: desired`, whose manifest print is `print`.
    pub(in crate::applier) fn config_map(name: &str, print: &str) -> Desired {
        Desired {
            obj: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "apps"},
                "data": {"value": "desired"}}),
            object: ObjectRef::new("", "ConfigMap", "apps", name),
            api_version: "v1".into(),
            kind: ResolvedKind {
                resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
                namespaced: true,
            },
            stage: Stage::Rest,
            print: print.into(),
        }
    }

    fn apply_over(d: &Desired, live_value: Option<&str>) -> Write {
        let live = live_value.map(|v| {
            let mut live = d.obj.clone();
            live["data"]["value"] = v.into();
            live["metadata"]["resourceVersion"] = "5".into();
            live
        });
        let mut merged = d.obj.clone();
        merged["metadata"]["resourceVersion"] = "5".into();
        Write::Apply {
            live,
            ignored: Vec::new(),
            merged,
        }
    }

    #[test]
    fn only_objects_whose_manifest_was_applied_before_are_held_back() {
        let desired = vec![
            config_map("edited", "p1"),
            config_map("deleted", "p2"),
            config_map("changed-in-git", "new"),
            config_map("new", "p4"),
        ];
        let writes = vec![
            (0, apply_over(&desired[0], Some("edited"))),
            (1, apply_over(&desired[1], None)),
            (2, apply_over(&desired[2], Some("old"))),
            (3, apply_over(&desired[3], None)),
        ];
        let applied = HashMap::from([
            (desired[0].object.id(), "p1".to_string()),
            (desired[1].object.id(), "p2".to_string()),
            (desired[2].object.id(), "old".to_string()),
        ]);
        let (kept, held) = held_back(&desired, writes, Some(&applied), false);
        let kept: Vec<usize> = kept.iter().map(|(i, _)| *i).collect();
        assert_eq!(
            kept,
            [2, 3],
            "a change from the source and a new object are applied"
        );
        let held: Vec<(usize, Drift)> = held.into_iter().map(|(i, d, _)| (i, d)).collect();
        assert_eq!(
            held,
            [
                (0, Drift::Changed(vec!["data.value".into()])),
                (1, Drift::Missing)
            ]
        );
    }

    #[test]
    fn without_remembered_manifests_the_build_decides() {
        let desired = vec![config_map("edited", "p1")];
        let write = || vec![(0, apply_over(&desired[0], Some("edited")))];
        let (kept, held) = held_back(&desired, write(), None, true);
        assert_eq!(
            (kept.len(), held.len()),
            (0, 1),
            "the build applied last time: drift"
        );
        let (kept, held) = held_back(&desired, write(), None, false);
        assert_eq!((kept.len(), held.len()), (1, 0), "a new build: a change");
    }

    #[test]
    fn a_secret_is_reported_by_its_field_paths_never_its_values() {
        let mut d = config_map("creds", "p1");
        d.obj = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "apps"},
            "data": {"password": "c2VjcmV0LWRlc2lyZWQ="}});
        d.object = ObjectRef::new("", "Secret", "apps", "creds");
        let mut live = d.obj.clone();
        live["data"]["password"] = "bGVha2VkLWxpdmU=".into();
        live["metadata"]["resourceVersion"] = "5".into();
        let mut merged = d.obj.clone();
        merged["metadata"]["resourceVersion"] = "5".into();
        let write = Write::Apply {
            live: Some(live),
            ignored: Vec::new(),
            merged,
        };
        let applied = HashMap::from([(d.object.id(), "p1".to_string())]);
        let (_, held) = held_back(std::slice::from_ref(&d), vec![(0, write)], Some(&applied), false);
        let report = DriftReport {
            object: d.object.clone(),
            drift: held[0].1.clone(),
        }
        .to_string();
        assert_eq!(report, "Secret/apps/creds (data.password)");
    }

    #[test]
    fn correct_holds_nothing_and_warn_settles_what_it_holds() {
        let desired = vec![config_map("edited", "p1"), config_map("new", "p2")];
        let writes = || {
            vec![
                (0, apply_over(&desired[0], Some("edited"))),
                (1, apply_over(&desired[1], None)),
            ]
        };
        let applied = HashMap::from([(desired[0].object.id(), "p1".to_string())]);
        let mut settled = Vec::new();
        let mut correct = Holding::new(DriftPolicy::Correct, Some(applied.clone()));
        assert_eq!(correct.hold(&desired, writes(), |i, _| settled.push(i)).len(), 2);
        assert!(settled.is_empty() && correct.drifted.is_empty());

        let mut warn = Holding::new(DriftPolicy::Warn { same_build: false }, Some(applied));
        let mut skipped = Vec::new();
        let kept = warn.hold(&desired, writes(), |i, o| skipped.push((i, o.action)));
        assert_eq!(kept.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [1]);
        assert_eq!(skipped, [(0, Action::Skipped)], "held: settled as skipped");
        assert_eq!(warn.drifted, [(0, Drift::Changed(vec!["data.value".into()]))]);
    }

    #[test]
    fn reports_name_the_object_and_its_fields() {
        let object = ObjectRef::new("", "ConfigMap", "apps", "a");
        let changed = DriftReport {
            object: object.clone(),
            drift: Drift::Changed(vec!["data.value".into(), "metadata.labels.team".into()]),
        };
        assert_eq!(
            changed.to_string(),
            "ConfigMap/apps/a (data.value, metadata.labels.team)"
        );
        let missing = DriftReport {
            object,
            drift: Drift::Missing,
        };
        assert_eq!(missing.to_string(), "ConfigMap/apps/a (deleted)");
    }
}
