//! Garbage collection of stale objects (those in the previous inventory but no longer in the
//! build output) and the deletion policies applied when a Kustomization is deleted.

use std::time::Duration;

use futures::{StreamExt, stream};
use kube::api::DeleteParams;
use serde_json::Value;
use tokio::time::Instant;

use super::http::{api_message, api_url, delete, get, is_not_found};
use super::policy::{excluded, prune_disabled};
use super::stage::{order_key, stage_of};
use super::{Action, Applier, ChangeSet, FailureKind, ObjectError, Owner};
use crate::api::conditions::{keys, reason};
use crate::api::inventory::{ObjectRef, ResourceInventory, ResourceRef};
use crate::api::kustomization::DeletionPolicy;
use crate::error::StepError;
use crate::kube_ext::ResolveError;

/// A prune or finalize that did not complete.
#[derive(Clone, Debug, thiserror::Error)]
pub enum PruneError {
    /// Some deletions failed. `pending` are the stale entries not confirmed deleted or skipped:
    /// keep them in the inventory so the next reconcile retries them.
    #[error("delete failed, errors: {}", errors.iter().map(|e| format!("{e};")).collect::<String>())]
    Delete {
        errors: Vec<ObjectError>,
        changes: ChangeSet,
        pending: Vec<ResourceRef>,
    },
    /// `WaitForTermination` timed out; the deletions were issued (Flux removes the finalizer
    /// anyway and emits a Warning event).
    #[error("failed to wait for resources termination: {} still present after {timeout:?}", remaining.join(", "))]
    TerminationTimeout {
        changes: ChangeSet,
        remaining: Vec<String>,
        timeout: Duration,
    },
}

/// Deletions are retried after `spec.retryInterval`; nothing in the manifests can fix them.
impl StepError for PruneError {
    fn reason(&self) -> &'static str {
        reason::PRUNE_FAILED
    }
}

impl PruneError {
    /// What was done before the error.
    pub(crate) fn changes(&self) -> &ChangeSet {
        match self {
            PruneError::Delete { changes, .. } | PruneError::TerminationTimeout { changes, .. } => changes,
        }
    }
}

/// What prune decides for one live object (pure).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum PruneDecision {
    Delete,
    /// Not ours any more, or protected by `prune: disabled` / `reconcile: disabled` / `ssa: Ignore`.
    Skip,
}

/// Deletes only while both owner labels still name `owner` and nothing protects the object.
pub(super) fn decide(live: &Value, owner: &Owner) -> PruneDecision {
    let label = |k: &str| {
        live.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
    };
    let ours = label(keys::NAME_LABEL) == Some(owner.name.as_str())
        && label(keys::NAMESPACE_LABEL) == Some(owner.namespace.as_str());
    if ours && !prune_disabled(live) && !excluded(live) {
        PruneDecision::Delete
    } else {
        PruneDecision::Skip
    }
}

/// Stale entries in deletion order: reverse stage, reverse kind order. Entries whose id cannot
/// be read are returned apart.
fn deletion_order(
    stale: &[ResourceRef],
    custom_stage_kinds: &[String],
) -> (Vec<(ObjectRef, String)>, Vec<ResourceRef>) {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for entry in stale {
        match entry.object_ref() {
            Ok(obj) => {
                let api_version = obj.api_version(&entry.v);
                ok.push((obj, api_version));
            }
            Err(_) => bad.push(entry.clone()),
        }
    }
    ok.sort_by_key(|(o, av)| {
        (
            stage_of(av, &o.kind, custom_stage_kinds),
            order_key(av, &o.kind, &o.namespace, &o.name),
        )
    });
    ok.reverse();
    (ok, bad)
}

impl Applier {
    /// Deletes stale objects of `owner` (previous inventory minus new), in reverse stage order,
    /// stage by stage, with bounded concurrency within a stage.
    pub async fn prune(&self, owner: &Owner, stale: &[ResourceRef]) -> Result<ChangeSet, PruneError> {
        let (ordered, malformed) = deletion_order(stale, &self.options.custom_stage_kinds);
        let mut errors: Vec<ObjectError> = malformed
            .iter()
            .map(|e| ObjectError {
                subject: e.id.clone(),
                kind: FailureKind::Invalid,
                message: "is not a valid inventory id".into(),
            })
            .collect();
        let mut pending = malformed;
        let mut changes = ChangeSet::default();
        let custom = &self.options.custom_stage_kinds;
        let mut groups: Vec<Vec<(ObjectRef, String)>> = Vec::new();
        for item in ordered {
            let stage = stage_of(&item.1, &item.0.kind, custom);
            match groups.last_mut() {
                Some(g) if stage_of(&g[0].1, &g[0].0.kind, custom) == stage => g.push(item),
                _ => groups.push(vec![item]),
            }
        }
        for group in groups {
            let results: Vec<_> = stream::iter(group)
                .map(|(obj, av)| async move {
                    let result = self.prune_one(owner, &obj, &av).await;
                    (obj, av, result)
                })
                .buffered(self.options.concurrency.max(1))
                .collect()
                .await;
            for (obj, av, result) in results {
                match result {
                    Ok(action) => changes.push(obj, &av, action),
                    Err(e) => {
                        pending.push(obj.to_entry(&av));
                        errors.push(e);
                    }
                }
            }
        }
        // kinds served by deleted CRDs go away: forget them
        if changes
            .with_action(Action::Deleted)
            .any(|e| e.object.kind == "CustomResourceDefinition")
        {
            self.resolver.invalidate();
        }
        if errors.is_empty() {
            Ok(changes)
        } else {
            Err(PruneError::Delete {
                errors,
                changes,
                pending,
            })
        }
    }

    async fn prune_one(
        &self,
        owner: &Owner,
        obj: &ObjectRef,
        api_version: &str,
    ) -> Result<Action, ObjectError> {
        let err = |message: String| ObjectError {
            subject: obj.to_string(),
            kind: FailureKind::Api,
            message,
        };
        let kind = match self.resolver.resolve(api_version, &obj.kind).await {
            Ok(kind) => kind,
            // the kind is gone (CRD deleted), so are its objects
            Err(ResolveError::UnknownKind { .. }) => return Ok(Action::Deleted),
            Err(e) => return Err(err(format!("query failed: {e}"))),
        };
        let url = api_url(&kind, &obj.namespace);
        let live = match get(self.client(), &url, &obj.name).await {
            Ok(None) => return Ok(Action::Deleted),
            Ok(Some(live)) => live,
            Err(e) => return Err(err(api_message("query failed", &e))),
        };
        if decide(&live, owner) == PruneDecision::Skip {
            return Ok(Action::Skipped);
        }
        match delete(self.client(), &url, &obj.name, &DeleteParams::background()).await {
            Ok(()) => Ok(Action::Deleted),
            Err(e) if is_not_found(&e) => Ok(Action::Deleted),
            Err(e) => Err(err(api_message("delete failed", &e))),
        }
    }

    /// What the controller calls when a Kustomization is deleted: deletes the inventory
    /// according to `policy` (MirrorPrune follows `prune`; Delete and WaitForTermination always;
    /// Orphan never) and forgets the fast-path state. WaitForTermination then waits up to
    /// `timeout` for the deleted objects to be gone.
    pub async fn finalize(
        &self,
        owner: &Owner,
        inventory: &ResourceInventory,
        policy: DeletionPolicy,
        prune: bool,
        timeout: Duration,
    ) -> Result<ChangeSet, PruneError> {
        self.prints.forget_owner(&owner.key());
        let delete = match policy {
            DeletionPolicy::MirrorPrune => prune,
            DeletionPolicy::Delete | DeletionPolicy::WaitForTermination => true,
            DeletionPolicy::Orphan => false,
        };
        if !delete || inventory.entries.is_empty() {
            return Ok(ChangeSet::default());
        }
        let changes = self.prune(owner, &inventory.entries).await?;
        if policy != DeletionPolicy::WaitForTermination {
            return Ok(changes);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let mut remaining = Vec::new();
            for entry in changes.with_action(Action::Deleted) {
                let Ok(kind) = self
                    .resolver
                    .resolve(&entry.api_version, &entry.object.kind)
                    .await
                else {
                    continue;
                };
                let url = api_url(&kind, &entry.object.namespace);
                if !matches!(get(self.client(), &url, &entry.object.name).await, Ok(None)) {
                    remaining.push(entry.object.to_string());
                }
            }
            if remaining.is_empty() {
                return Ok(changes);
            }
            if Instant::now() >= deadline {
                return Err(PruneError::TerminationTimeout {
                    changes,
                    remaining,
                    timeout,
                });
            }
            tokio::time::sleep(self.options.retry_interval).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deletes_only_objects_still_labelled_for_this_owner_and_unprotected() {
        let owner = Owner::new("apps", "flux-system");
        let labelled = |name: &str, ns: &str| json!({"metadata": {"labels": {"kustomize.toolkit.fluxcd.io/name": name, "kustomize.toolkit.fluxcd.io/namespace": ns}}});
        assert_eq!(
            decide(&labelled("apps", "flux-system"), &owner),
            PruneDecision::Delete
        );
        assert_eq!(
            decide(&labelled("other", "flux-system"), &owner),
            PruneDecision::Skip
        );
        assert_eq!(decide(&labelled("apps", "other"), &owner), PruneDecision::Skip);
        assert_eq!(decide(&json!({"metadata": {}}), &owner), PruneDecision::Skip);
        for (key, value) in [
            ("kustomize.toolkit.fluxcd.io/prune", "disabled"),
            ("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
            ("kustomize.toolkit.fluxcd.io/ssa", "Ignore"),
        ] {
            let mut live = labelled("apps", "flux-system");
            live["metadata"]["annotations"] = json!({key: value});
            assert_eq!(decide(&live, &owner), PruneDecision::Skip, "{key}");
        }
    }

    #[test]
    fn deletes_in_reverse_apply_order() {
        let entry = |id: &str, v: &str| ResourceRef {
            id: id.into(),
            v: v.into(),
        };
        let stale = vec![
            entry("_apps__Namespace", "v1"),
            entry("apps_cfg__ConfigMap", "v1"),
            entry(
                "_widgets.example.com_apiextensions.k8s.io_CustomResourceDefinition",
                "v1",
            ),
            entry("apps_web_apps_Deployment", "v1"),
            entry("_fast_storage.k8s.io_StorageClass", "v1"),
            entry("broken", "v1"),
        ];
        let (ordered, bad) = deletion_order(&stale, &[]);
        let kinds: Vec<_> = ordered.iter().map(|(o, _)| o.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "Deployment",
                "ConfigMap",
                "StorageClass",
                "Namespace",
                "CustomResourceDefinition"
            ]
        );
        assert_eq!(ordered[0].1, "apps/v1");
        assert_eq!(bad, vec![entry("broken", "v1")]);
    }
}
