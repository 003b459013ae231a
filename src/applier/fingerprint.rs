//! The no-op fast path: remember, per Kustomization, what the last successful apply left behind,
//! so that an unchanged source and unchanged live objects need no dry-run.
//!
//! Per object we keep the hash of the normalized desired manifest and a hash of the live
//! metadata seen after the apply (or confirmed by a dry-run). For objects with a
//! `metadata.generation` the live hash covers uid, generation, labels, annotations and the
//! managedFields entries of the main resource (so status updates by controllers do not count);
//! for others it covers uid and resourceVersion. The fast path lists the live metadata once per
//! kind (owner-label selector) and sends only objects whose hashes differ, or that are missing,
//! through the dry-run.
//!
//! A print says nothing about the source revision: an object whose normalized desired manifest
//! and live metadata are both unchanged has the same outcome whatever revision it came from, so
//! a new revision that changes m of N objects sends only those m through the dry-run. What else
//! decides the outcome invalidates the prints: a live change (the live hash), the force and
//! ignore settings of the run (the run key; the field managers are fixed per applier).
//!
//! Where a shared metadata watch of the kind is synced (the `watch` module), the live prints
//! come from its store instead of the LIST, so a quiet interval sends no request at all.
//!
//! State is in memory only: it is lost on restart (the first reconcile after start is a full
//! dry-run), dropped on any apply error, and replaced on changed force/ignore settings or after
//! `full_sync_every`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Action, Drift};
use crate::api::kustomization::IgnoreRule;

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Identifies the settings of a run that decide every object's outcome: force, ignore rules and
/// whether drift is left in place (`warns`).
pub(crate) fn run_key(force: bool, ignore: &[IgnoreRule], warns: bool) -> String {
    let rules = serde_json::to_string(ignore).unwrap_or_default();
    sha256_hex(format!("{force}\n{rules}\n{warns}").as_bytes())
}

/// Hash of a normalized desired object.
pub(crate) fn desired_print(obj: &Value) -> String {
    sha256_hex(obj.to_string().as_bytes())
}

/// Hash of what matters in live metadata (see the module doc). `metadata` is the object's
/// `metadata` map, from a full object, a metadata-only list or a metadata watch.
pub(crate) fn live_print(metadata: &Value) -> String {
    hex::encode(live_digest(metadata))
}

/// The bytes of [`live_print`]: what a metadata watch keeps per object.
pub(crate) fn live_digest(metadata: &Value) -> [u8; 32] {
    let field = |f: &str| metadata.get(f).cloned().unwrap_or(Value::Null);
    let generation = metadata
        .get("generation")
        .and_then(Value::as_i64)
        .filter(|g| *g > 0);
    let tracked = match generation {
        Some(generation) => {
            let managed: Vec<Value> = field("managedFields")
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m.get("subresource").is_none_or(|s| s.as_str() == Some("")))
                .cloned()
                .collect();
            serde_json::json!([
                field("uid"),
                generation,
                field("labels"),
                field("annotations"),
                managed
            ])
        }
        None => serde_json::json!([field("uid"), field("resourceVersion")]),
    };
    Sha256::digest(tracked.to_string().as_bytes()).into()
}

/// What the last apply recorded for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ObjectPrint {
    pub(crate) desired: String,
    /// `None` when the object did not exist (a skipped object absent from the cluster).
    pub(crate) live: Option<String>,
    /// What to report when nothing changed: `Unchanged` or `Skipped`.
    pub(crate) action: Action,
    /// The drift left in place (`drift: warn`), reported again while the prints hold.
    pub(crate) drift: Option<Drift>,
}

impl ObjectPrint {
    /// Whether an object with `desired` print and `live` metadata print still has the recorded
    /// outcome, whichever revision it came from.
    pub(crate) fn holds(&self, desired: &str, live: Option<&str>) -> bool {
        self.desired == desired && self.live.as_deref() == live
    }
}

struct RunState {
    key: String,
    full_sync_at: Instant,
    objects: HashMap<String, ObjectPrint>,
}

/// Per-Kustomization fingerprints, keyed by `namespace/name` of the Kustomization.
#[derive(Default)]
pub(crate) struct FingerprintStore {
    states: Mutex<HashMap<String, RunState>>,
    /// Per Kustomization, the desired print of each object as its last successful run left
    /// it: what tells drift from a change for `drift: warn`. Unlike the fast-path state it
    /// outlives failed runs, so a failure under load does not turn drift into a change.
    applied: Mutex<HashMap<String, HashMap<String, String>>>,
}

impl FingerprintStore {
    /// The recorded prints when `owner`'s last successful run had the same inputs and its last
    /// full dry-run is younger than `full_sync_every`; `None` means a full dry-run is due.
    pub(crate) fn fast_path(
        &self,
        owner: &str,
        key: &str,
        full_sync_every: Duration,
    ) -> Option<HashMap<String, ObjectPrint>> {
        let states = self.states.lock().expect("fingerprint lock");
        let state = states.get(owner)?;
        (state.key == key && state.full_sync_at.elapsed() < full_sync_every).then(|| state.objects.clone())
    }

    /// The manifest prints `owner`'s last successful run left, by object id.
    pub(crate) fn applied(&self, owner: &str) -> Option<HashMap<String, String>> {
        self.applied.lock().expect("applied lock").get(owner).cloned()
    }

    /// Records a successful run. `full` says whether every object was dry-run.
    pub(crate) fn record(&self, owner: &str, key: &str, objects: HashMap<String, ObjectPrint>, full: bool) {
        let applied = objects
            .iter()
            .map(|(id, print)| (id.clone(), print.desired.clone()))
            .collect();
        self.applied
            .lock()
            .expect("applied lock")
            .insert(owner.to_string(), applied);
        let mut states = self.states.lock().expect("fingerprint lock");
        let full_sync_at = match states.get(owner) {
            Some(prev) if !full && prev.key == key => prev.full_sync_at,
            _ => Instant::now(),
        };
        states.insert(
            owner.to_string(),
            RunState {
                key: key.to_string(),
                full_sync_at,
                objects,
            },
        );
    }

    /// Drops `owner`'s fast-path state, after an error.
    pub(crate) fn forget(&self, owner: &str) {
        self.states.lock().expect("fingerprint lock").remove(owner);
    }

    /// Drops everything kept for `owner`, when the Kustomization is deleted.
    pub(crate) fn forget_owner(&self, owner: &str) {
        self.forget(owner);
        self.applied.lock().expect("applied lock").remove(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A named change to an object's metadata.
    type Change = (&'static str, fn(&mut Value));

    #[test]
    fn status_updates_do_not_change_the_live_print_of_generated_objects() {
        let meta = json!({"uid": "u", "generation": 1, "resourceVersion": "10", "labels": {"a": "b"},
            "managedFields": [{"manager": "kustomize-controller", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]});
        let mut after_status = meta.clone();
        after_status["resourceVersion"] = "11".into();
        after_status["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(json!({"manager": "kcm", "subresource": "status"}));
        assert_eq!(live_print(&meta), live_print(&after_status));

        let changes: [Change; 3] = [
            ("edited", |m| {
                m["managedFields"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"manager": "kubectl-edit", "operation": "Update"}));
            }),
            ("relabelled", |m| m["labels"]["a"] = "c".into()),
            ("recreated", |m| m["uid"] = "v".into()),
        ];
        for (change, apply) in changes {
            let mut changed = meta.clone();
            apply(&mut changed);
            assert_ne!(live_print(&meta), live_print(&changed), "{change}");
        }
    }

    #[test]
    fn objects_without_generation_are_tracked_by_resource_version() {
        let meta = json!({"uid": "u", "resourceVersion": "10"});
        let mut changed = meta.clone();
        changed["resourceVersion"] = "11".into();
        assert_ne!(live_print(&meta), live_print(&changed));
    }

    #[test]
    fn fast_path_needs_the_same_settings_and_a_recent_full_sync() {
        let store = FingerprintStore::default();
        let key = run_key(false, &[], false);
        assert!(store.fast_path("ns/ks", &key, Duration::from_secs(60)).is_none());
        store.record("ns/ks", &key, HashMap::new(), true);
        assert!(store.fast_path("ns/ks", &key, Duration::from_secs(60)).is_some());
        assert!(store.fast_path("ns/ks", &key, Duration::ZERO).is_none());
        store.forget("ns/ks");
        assert!(store.fast_path("ns/ks", &key, Duration::from_secs(60)).is_none());
    }

    #[test]
    fn the_applied_manifests_outlive_a_failed_run_not_the_kustomization() {
        let store = FingerprintStore::default();
        let print = ObjectPrint {
            desired: "p1".into(),
            live: None,
            action: Action::Skipped,
            drift: None,
        };
        let key = run_key(false, &[], true);
        store.record("ns/ks", &key, HashMap::from([("cm".to_string(), print)]), true);
        let remembered = Some(HashMap::from([("cm".to_string(), "p1".to_string())]));
        store.forget("ns/ks");
        assert_eq!(
            store.applied("ns/ks"),
            remembered,
            "a failed run forgets the fast path only"
        );
        store.forget_owner("ns/ks");
        assert_eq!(store.applied("ns/ks"), None);
    }

    /// One object's next run: its settings, manifest and live metadata.
    struct NextRun {
        force: bool,
        warns: bool,
        ignore: Vec<IgnoreRule>,
        object: Value,
        live: Value,
    }

    /// A named change to the next run.
    type RunChange = (&'static str, fn(&mut NextRun));

    /// Whether the next run reports the object from its print, without a dry-run.
    fn from_print(store: &FingerprintStore, next: &NextRun) -> bool {
        let key = run_key(next.force, &next.ignore, next.warns);
        store
            .fast_path("ns/ks", &key, Duration::from_secs(60))
            .and_then(|prints| prints.get("cm").cloned())
            .is_some_and(|p| p.holds(&desired_print(&next.object), Some(&live_print(&next.live))))
    }

    #[test]
    fn a_print_survives_a_new_revision_and_nothing_that_decides_the_outcome() {
        let object =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "1"}});
        let live = json!({"uid": "u", "resourceVersion": "10"});
        let store = FingerprintStore::default();
        let print = ObjectPrint {
            desired: desired_print(&object),
            live: Some(live_print(&live)),
            action: Action::Unchanged,
            drift: None,
        };
        store.record(
            "ns/ks",
            &run_key(false, &[], false),
            HashMap::from([("cm".to_string(), print)]),
            true,
        );
        let same = || NextRun {
            force: false,
            warns: false,
            ignore: Vec::new(),
            object: object.clone(),
            live: live.clone(),
        };
        // a new revision leaves every input above as it was: the object keeps its print
        assert!(from_print(&store, &same()));

        let changes: [RunChange; 7] = [
            ("manifest changed", |n| n.object["data"]["a"] = "2".into()),
            ("live object written", |n| n.live["resourceVersion"] = "11".into()),
            ("live object recreated", |n| n.live["uid"] = "v".into()),
            ("live object gained a generation", |n| {
                n.live["generation"] = 1.into()
            }),
            ("force", |n| n.force = true),
            ("drift left in place", |n| n.warns = true),
            ("ignore rule", |n| {
                n.ignore = vec![serde_json::from_value(json!({"paths": ["/data"]})).unwrap()];
            }),
        ];
        for (change, apply) in changes {
            let mut next = same();
            apply(&mut next);
            assert!(!from_print(&store, &next), "{change}");
        }
    }
}
