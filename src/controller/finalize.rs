//! Deletion of a Kustomization (finalizer `finalizers.fluxcd.io`): delete or orphan what it
//! applied according to `deletionPolicy`, then let it go. Deletion finishes without deleting when
//! the objects can never be reached with the configured identity (a ServiceAccount or the
//! kubeconfig Secret/ConfigMap is gone, or the kubeconfig is refused): the objects are left
//! behind and an event lists them. Any other failure to reach them keeps the finalizer and is
//! retried, so a passing API hiccup does not orphan the objects.

use flux_runtime::telemetry::ObjectLabels;
use kube::ResourceExt;

use crate::api::conditions::READY;
use crate::api::kustomization::DeletionPolicy;
use crate::api::{Kustomization, ResourceInventory};
use crate::applier::{Owner, PruneError};

use super::Context;
use super::events::{self, Notice};
use super::identity_error::IdentityError;
use super::status;
use crate::error::{Retry, StepError};

#[derive(Debug, thiserror::Error)]
pub enum FinalizeError {
    /// Some objects could not be deleted; the finalizer stays and deletion is retried.
    #[error("pruning for deleted resource failed: {0}")]
    Prune(#[source] PruneError),
    /// The impersonated ServiceAccount could not be looked up; retried.
    #[error("unable to look up the ServiceAccount to impersonate: {0}")]
    ServiceAccount(#[source] kube::Error),
    /// The client could not be built for a reason that may pass; retried.
    #[error("{0}")]
    Client(String),
}

/// Whether deletion gives up on the objects rather than retrying: the identity that could
/// delete them is gone or can never be built.
fn unreachable_for_good(error: &IdentityError) -> bool {
    error.reference_gone() || error.retry() == Retry::Terminal
}

/// Whether the policy deletes the inventory: `MirrorPrune` (the default) follows `spec.prune`,
/// `Delete` and `WaitForTermination` always do, `Orphan` never.
pub(crate) fn deletes_objects(ks: &Kustomization) -> bool {
    match ks.spec.deletion_policy() {
        DeletionPolicy::MirrorPrune => ks.spec.prune,
        DeletionPolicy::Delete | DeletionPolicy::WaitForTermination => true,
        DeletionPolicy::Orphan => false,
    }
}

/// `Kind/namespace/name` lines of an inventory, for events about what was left behind.
pub(crate) fn inventory_lines(inventory: &ResourceInventory) -> String {
    inventory
        .entries
        .iter()
        .map(|entry| {
            entry
                .object_ref()
                .map_or_else(|_| entry.id.clone(), |object| object.to_string())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What Flux sends once a deletion is done, as after every run that ends Ready (its deferred
/// report runs for deletions too): "Reconciliation finished" with a commit status update.
/// `None` when not Ready or suspended.
pub(crate) fn finished_notice(ks: &Kustomization, elapsed: std::time::Duration) -> Option<Notice> {
    let status = ks.status.as_ref()?;
    let ready = status::find(&status.conditions, READY).filter(|c| c.status == "True")?;
    if ks.spec.suspend {
        return None;
    }
    let message = format!(
        "Reconciliation finished in {}, next run in {}",
        crate::api::duration::format(elapsed),
        crate::api::duration::format(ks.spec.interval())
    );
    let mut metadata = events::metadata(
        ks,
        status.last_applied_revision.as_deref(),
        status.last_applied_origin_revision.as_deref(),
    );
    metadata.insert(events::COMMIT_STATUS_KEY.into(), "update".into());
    Some(Notice::info(&ready.reason, message, metadata).acting(events::action::RECONCILE))
}

/// The finalizer's cleanup branch. Idempotent: a retry after a partial delete deletes the rest.
pub(crate) async fn cleanup(ks: &Kustomization, ctx: &Context) -> Result<(), FinalizeError> {
    let labels = ObjectLabels {
        kind: "Kustomization".into(),
        name: ks.name_any(),
        namespace: ks.namespace().unwrap_or_default(),
    };
    ctx.metrics.record_ready(&labels, None);
    let status = ks.status.clone().unwrap_or_default();
    let inventory = status.inventory.clone().unwrap_or_default();
    // Events on this path carry the last Ready reason, as Flux's do.
    let reason =
        status::find(&status.conditions, READY).map_or("Finalized".to_string(), |c| c.reason.clone());
    let metadata = events::metadata(ks, status.last_applied_revision.as_deref(), None);
    if inventory.entries.is_empty() {
        return Ok(());
    }
    if ks.spec.suspend || !deletes_objects(ks) {
        let message = format!(
            "objects left in place (deletionPolicy {:?}{}):\n{}",
            ks.spec.deletion_policy(),
            if ks.spec.suspend { ", suspended" } else { "" },
            inventory_lines(&inventory)
        );
        ctx.notifier.emit(ks, &Notice::info(&reason, message, metadata));
        return Ok(());
    }

    let sa_exists = ctx
        .identities
        .service_account_exists(ks)
        .await
        .map_err(FinalizeError::ServiceAccount)?;
    let tools = match ctx.identities.for_kustomization(ks).await {
        Ok(tools) if sa_exists => Some(tools),
        Ok(_) => None,
        Err(error) if unreachable_for_good(&error) => {
            tracing::warn!(%error, "cannot reach the objects of a deleted Kustomization");
            None
        }
        Err(error) => {
            return Err(FinalizeError::Client(
                error.condition_message(std::time::Duration::ZERO),
            ));
        }
    };
    let Some(tools) = tools else {
        let message = format!("unable to prune objects: \n{}", inventory_lines(&inventory));
        ctx.notifier.emit(ks, &Notice::error(&reason, message, metadata));
        return Ok(());
    };
    let owner = Owner::new(&ks.name_any(), &ks.namespace().unwrap_or_default());
    let policy = ks.spec.deletion_policy();
    match tools
        .applier
        .finalize(&owner, &inventory, policy, ks.spec.prune, ks.spec.timeout())
        .await
    {
        Ok(changes) => {
            if !changes.is_empty() {
                ctx.notifier
                    .emit(ks, &Notice::info(&reason, changes.to_string(), metadata));
            }
            Ok(())
        }
        Err(error @ PruneError::TerminationTimeout { .. }) => {
            tracing::warn!(%error, "deleted objects did not terminate in time");
            let notice = Notice::error(&reason, "failed to wait for resources termination", metadata);
            ctx.notifier.emit(ks, &notice);
            Ok(())
        }
        Err(error) => {
            ctx.notifier.emit(
                ks,
                &Notice::error(&reason, "pruning for deleted resource failed", metadata),
            );
            Err(FinalizeError::Prune(error))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::ResourceRef;

    fn ks(prune: bool, policy: Option<&str>) -> Kustomization {
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "team-a"},
            "spec": {"interval": "5m", "prune": prune, "deletionPolicy": policy,
                "sourceRef": {"kind": "GitRepository", "name": "repo"}}
        }))
        .unwrap()
    }

    #[test]
    fn deletion_policy_table() {
        let cases = [
            (true, None, true),
            (false, None, false),
            (true, Some("MirrorPrune"), true),
            (false, Some("Delete"), true),
            (false, Some("WaitForTermination"), true),
            (true, Some("Orphan"), false),
        ];
        for (prune, policy, expected) in cases {
            assert_eq!(
                deletes_objects(&ks(prune, policy)),
                expected,
                "prune={prune} policy={policy:?}"
            );
        }
    }

    /// A read error from an API server that cannot be reached: a passing fault.
    async fn unreachable_read() -> kube::Error {
        let client =
            kube::Client::try_from(kube::Config::new("https://127.0.0.1:1".parse().unwrap())).unwrap();
        kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client, "team-a")
            .get("remote")
            .await
            .unwrap_err()
    }

    #[tokio::test]
    async fn deletion_gives_up_only_when_the_identity_is_gone_for_good() {
        let not_found = || {
            kube::Error::Api(
                kube::core::Status::failure("not found", "NotFound")
                    .with_code(404)
                    .boxed(),
            )
        };
        let secret = || "team-a/remote".to_string();
        let cases = [
            (IdentityError::ReadSecret(secret(), not_found()), true),
            (IdentityError::ReadConfigMap(secret(), not_found()), true),
            (IdentityError::TokenRequest(secret(), not_found()), true),
            (IdentityError::MissingKey(secret(), "value".into()), true),
            (IdentityError::UnsupportedProvider(secret(), "aws".into()), true),
            (
                IdentityError::ReadSecret(secret(), unreachable_read().await),
                false,
            ),
            (
                IdentityError::ReadConfigMap(secret(), unreachable_read().await),
                false,
            ),
            (
                IdentityError::TokenRequest(secret(), unreachable_read().await),
                false,
            ),
            (IdentityError::Build(unreachable_read().await), false),
        ];
        for (error, gives_up) in cases {
            assert_eq!(unreachable_for_good(&error), gives_up, "{error}");
        }
    }

    #[test]
    fn left_behind_objects_are_listed_by_subject() {
        let inventory = ResourceInventory {
            entries: vec![
                ResourceRef {
                    id: "_team-a__Namespace".into(),
                    v: "v1".into(),
                },
                ResourceRef {
                    id: "team-a_web_apps_Deployment".into(),
                    v: "v1".into(),
                },
            ],
        };
        assert_eq!(
            inventory_lines(&inventory),
            "Namespace/team-a\nDeployment/team-a/web"
        );
    }

    #[test]
    fn a_deletion_of_a_ready_kustomization_is_announced_as_finished() {
        let with_status = |ready: &str, suspend: bool| -> Kustomization {
            let mut ks = ks(true, None);
            ks.spec.suspend = suspend;
            ks.status = serde_json::from_value(json!({
                "lastAppliedRevision": "main@sha1:abc",
                "conditions": [{"type": "Ready", "status": ready, "reason": "ReconciliationSucceeded",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
            }))
            .unwrap();
            ks
        };
        let elapsed = std::time::Duration::from_millis(1500);
        let notice = finished_notice(&with_status("True", false), elapsed).expect("announced");
        assert_eq!(
            notice.message,
            "Reconciliation finished in 1.5s, next run in 5m0s"
        );
        assert_eq!(notice.reason, "ReconciliationSucceeded");
        assert_eq!(notice.action, Some("Reconcile"));
        assert_eq!(notice.metadata[events::COMMIT_STATUS_KEY], "update");
        assert_eq!(notice.metadata[events::REVISION_KEY], "main@sha1:abc");
        assert!(finished_notice(&with_status("False", false), elapsed).is_none());
        assert!(
            finished_notice(&with_status("True", true), elapsed).is_none(),
            "suspended"
        );
        assert!(finished_notice(&ks(true, None), elapsed).is_none(), "no status");
    }
}
