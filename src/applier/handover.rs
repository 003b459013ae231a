//! Handing an object over from one Kustomization to another, so that moving it between two
//! Kustomizations of one source in one commit keeps it (same UID) whichever reconciles first,
//! while two that both keep claiming it are reported as a conflict naming both.
//!
//! A moves the object out, B moves it in, both built from the same source revision R:
//! - Prune deletes only objects whose owner labels still name the pruner: once B has applied
//!   the object (its labels now name B), A drops it from its inventory without deleting it.
//! - A first: A applies R; the object is stale for A. While a sibling (same namespace, same
//!   source, not suspended) has not applied R yet, A does not delete it: it marks the object
//!   released ([`RELEASED_BY`], naming A) and keeps it in its inventory, so a later pass deletes
//!   it if nobody took it. B then finds it labelled A and released by A, and takes it over.
//! - B first: B finds the object labelled A and listed in A's inventory, but A has not applied
//!   R (A's last applied revision differs): A's build at R may well not hold it, so B takes it
//!   over. If A's build at R does hold it, A reports the conflict when it applies R (below).
//! - A has applied R, still lists the object and has not released it: both claim it, a
//!   conflict naming both. Kustomizations of different sources have no common revision to
//!   compare: a listed, unreleased object is a conflict.
//!
//! A sibling that never applies R (failing, or waiting for a dependency) holds A's deletions,
//! not its applies: the objects are kept, which is the safe way to be wrong.

use futures::{StreamExt, stream};
use serde_json::{Value, json};

use super::http::{api_message, api_url, get, merge_patch};
use super::prune::{PruneDecision, decide};
use super::{Applier, Owner};
use crate::api::Kustomization;
use crate::api::inventory::ResourceRef;

/// Annotation a Kustomization sets (to its `namespace/name`) on an object it no longer builds
/// but has not deleted yet, so that a sibling may take the object over.
pub(crate) const RELEASED_BY: &str = "kustomize.toolkit.fluxcd.io/released-by";

/// What a Kustomization does with an object labelled as another's (pure).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    TakeOver,
    /// The message: both Kustomizations keep claiming the object.
    Conflict(String),
}

/// `claimer` (applying `revision`, its own Kustomization object `mine` when readable) meets
/// `live`, labelled as owned by `other`.
pub(crate) fn claim(
    live: &Value,
    other: &Value,
    mine: Option<&Value>,
    claimer: &Owner,
    revision: &str,
    id: &str,
) -> Claim {
    let listed = other
        .pointer("/status/inventory/entries")
        .and_then(Value::as_array)
        .is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e.get("id").and_then(Value::as_str) == Some(id))
        });
    if !listed || other.pointer("/metadata/deletionTimestamp").is_some() {
        return Claim::TakeOver;
    }
    let other_key = key_of(other);
    let released = live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(RELEASED_BY))
        .and_then(Value::as_str);
    if released == Some(other_key.as_str()) {
        return Claim::TakeOver;
    }
    let applied = other
        .pointer("/status/lastAppliedRevision")
        .and_then(Value::as_str);
    if mine.is_some_and(|mine| same_source(mine, other)) && applied != Some(revision) {
        return Claim::TakeOver;
    }
    Claim::Conflict(format!(
        "is claimed by both Kustomization {} and Kustomization {other_key}: it is in the inventory \
         of {other_key}, which has not released it; remove it from one of them",
        claimer.key()
    ))
}

/// `namespace/name` of a Kustomization object.
fn key_of(ks: &Value) -> String {
    let meta = |f: &str| {
        ks.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    format!("{}/{}", meta("namespace"), meta("name"))
}

/// The source a Kustomization object reads, as `kind/namespace/name` (the namespace defaults to
/// the Kustomization's own).
fn source_of(ks: &Value) -> Option<String> {
    let source = ks.pointer("/spec/sourceRef")?;
    let field = |f: &str| source.get(f).and_then(Value::as_str);
    let own = ks.pointer("/metadata/namespace").and_then(Value::as_str);
    Some(format!(
        "{}/{}/{}",
        field("kind")?,
        field("namespace").or(own)?,
        field("name")?
    ))
}

fn same_source(a: &Value, b: &Value) -> bool {
    source_of(a).is_some_and(|s| Some(s) == source_of(b))
}

/// The siblings of `ks` (same namespace and source, not suspended, not being deleted) that have
/// not applied `revision` yet: they may still take over what `ks` stopped building (pure).
pub(crate) fn lagging_siblings(ks: &Kustomization, all: &[Kustomization], revision: &str) -> Vec<String> {
    let value = |k: &Kustomization| serde_json::to_value(k).unwrap_or(Value::Null);
    let mine = value(ks);
    all.iter()
        .filter(|k| k.metadata.name != ks.metadata.name && !k.spec.suspend)
        .filter(|k| k.metadata.deletion_timestamp.is_none())
        .filter(|k| k.status.as_ref().and_then(|s| s.last_applied_revision.as_deref()) != Some(revision))
        .filter(|k| same_source(&value(k), &mine))
        .filter_map(|k| k.metadata.name.clone())
        .collect()
}

impl Applier {
    /// Marks the stale objects still labelled as `owner`'s released by it instead of deleting
    /// them, and returns their entries, to keep in the inventory until a later prune. Objects
    /// gone or labelled as someone else's are dropped; one that cannot be read or marked is
    /// kept (the next pass tries again).
    pub(crate) async fn release(&self, owner: &Owner, stale: &[ResourceRef]) -> Vec<ResourceRef> {
        let key = owner.key();
        let key = key.as_str();
        let kept = stream::iter(stale.iter().cloned())
            .map(|entry| async move { self.release_one(owner, key, &entry).await.then_some(entry) })
            .buffered(self.options.concurrency.max(1))
            .collect::<Vec<_>>()
            .await;
        kept.into_iter().flatten().collect()
    }

    /// Whether `entry` stays in the inventory.
    async fn release_one(&self, owner: &Owner, key: &str, entry: &ResourceRef) -> bool {
        let Ok(obj) = entry.object_ref() else {
            return true;
        };
        let kind = match self.resolver.resolve(&obj.api_version(&entry.v), &obj.kind).await {
            Ok(kind) => kind,
            Err(error) => {
                tracing::warn!(object = %entry.id, %error, "cannot resolve a released object's kind");
                return true;
            }
        };
        let url = api_url(&kind, &obj.namespace);
        let live = match get(self.client(), &url, &obj.name).await {
            Ok(Some(live)) => live,
            Ok(None) => return false,
            Err(error) => {
                tracing::warn!(object = %entry.id, error = %api_message("query failed", &error), "release deferred");
                return true;
            }
        };
        // What prune would leave alone (someone else's, protected) leaves the inventory.
        if decide(&live, owner) == PruneDecision::Skip {
            return false;
        }
        let marked = live
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(RELEASED_BY))
            .and_then(Value::as_str);
        if marked != Some(key) {
            let patch = json!({"metadata": {"annotations": {RELEASED_BY: key}}});
            if let Err(error) = merge_patch(self.client(), &url, &obj.name, &patch).await {
                tracing::warn!(object = %entry.id, error = %api_message("release failed", &error), "release deferred");
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{Claim, RELEASED_BY, claim, lagging_siblings};
    use crate::api::Kustomization;
    use crate::applier::Owner;

    const R1: &str = "main@sha1:1111111111111111111111111111111111111111";
    const R2: &str = "main@sha1:2222222222222222222222222222222222222222";
    const ID: &str = "apps_cm__ConfigMap";

    fn kustomization(name: &str, source: &str, applied: &str, listed: bool) -> Value {
        let entries: Vec<Value> = if listed {
            vec![json!({"id": ID, "v": "v1"})]
        } else {
            vec![]
        };
        json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": "flux-system"},
            "spec": {"interval": "5m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": source}},
            "status": {"lastAppliedRevision": applied, "inventory": {"entries": entries}},
        })
    }

    fn live(released_by: Option<&str>) -> Value {
        let mut obj = json!({"metadata": {"name": "cm", "namespace": "apps", "labels": {
            "kustomize.toolkit.fluxcd.io/name": "a", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}}});
        if let Some(by) = released_by {
            obj["metadata"]["annotations"] = json!({RELEASED_BY: by});
        }
        obj
    }

    #[test]
    fn who_takes_an_object_labelled_as_another_kustomizations() {
        let b = Owner::new("b", "flux-system");
        let mine = kustomization("b", "repo", R1, false);
        let take = |live: &Value, other: &Value, mine: Option<&Value>| claim(live, other, mine, &b, R2, ID);
        let cases = [
            (
                "A does not list it",
                live(None),
                kustomization("a", "repo", R2, false),
                Some(&mine),
                true,
            ),
            (
                "A released it",
                live(Some("flux-system/a")),
                kustomization("a", "repo", R2, true),
                Some(&mine),
                true,
            ),
            (
                "A has not applied R2",
                live(None),
                kustomization("a", "repo", R1, true),
                Some(&mine),
                true,
            ),
            (
                "A applied R2 and lists it",
                live(None),
                kustomization("a", "repo", R2, true),
                Some(&mine),
                false,
            ),
            (
                "released by a third one",
                live(Some("flux-system/c")),
                kustomization("a", "repo", R2, true),
                Some(&mine),
                false,
            ),
            (
                "another source",
                live(None),
                kustomization("a", "other", R1, true),
                Some(&mine),
                false,
            ),
            (
                "own Kustomization unreadable",
                live(None),
                kustomization("a", "repo", R1, true),
                None,
                false,
            ),
        ];
        for (case, live, other, mine, takes) in cases {
            assert_eq!(take(&live, &other, mine) == Claim::TakeOver, takes, "{case}");
        }
        let Claim::Conflict(message) = take(&live(None), &kustomization("a", "repo", R2, true), Some(&mine))
        else {
            panic!("a conflict")
        };
        assert!(
            message.contains("Kustomization flux-system/b and Kustomization flux-system/a"),
            "names both: {message}"
        );
    }

    #[test]
    fn siblings_of_the_same_source_that_have_not_applied_the_revision_hold_a_prune() {
        let parse = |v: Value| -> Kustomization { serde_json::from_value(v).unwrap() };
        let a = parse(kustomization("a", "repo", R2, false));
        let mut suspended = kustomization("s", "repo", R1, false);
        suspended["spec"]["suspend"] = json!(true);
        let all = [
            a.clone(),
            parse(kustomization("behind", "repo", R1, false)),
            parse(kustomization("current", "repo", R2, false)),
            parse(kustomization("elsewhere", "other", R1, false)),
            parse(suspended),
        ];
        assert_eq!(lagging_siblings(&a, &all, R2), ["behind"]);
    }
}
