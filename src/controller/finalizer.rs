//! The finalizer `finalizers.fluxcd.io`: added before the first pass, removed once deletion
//! has cleaned up. Both are JSON patches that test the finalizers they read, so a concurrent
//! change fails (422) instead of clobbering someone else's finalizer, written by Flux's field
//! manager (`gotk-kustomize-controller`) as Flux's patches are.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::api::Kustomization;
use crate::api::conditions::keys::FINALIZER;

/// Where a Kustomization stands with the finalizer.
#[derive(Debug, PartialEq)]
pub(crate) enum Stage {
    /// Held and not deleted: reconcile.
    Held,
    /// Held and deleted: clean up, then remove the finalizer at this index.
    Deleting(usize),
    /// Not held yet: add it first (its watch event runs the first pass).
    Missing,
    /// Deleted and not held: nothing left to do.
    Released,
}

pub(crate) fn stage(ks: &Kustomization) -> Stage {
    let index = ks.finalizers().iter().position(|f| f == FINALIZER);
    match (index, ks.metadata.deletion_timestamp.is_some()) {
        (Some(_), false) => Stage::Held,
        (Some(index), true) => Stage::Deleting(index),
        (None, false) => Stage::Missing,
        (None, true) => Stage::Released,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FinalizerError {
    #[error("failed to add finalizer: {0}")]
    Add(#[source] kube::Error),
    #[error("failed to remove finalizer: {0}")]
    Remove(#[source] kube::Error),
}

/// The JSON patch adding the finalizer to the `held` finalizers.
fn add_patch(held: &[String]) -> Value {
    if held.is_empty() {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": held},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ])
    }
}

/// The JSON patch removing the finalizer at `index`.
fn remove_patch(index: usize) -> Value {
    let path = format!("/metadata/finalizers/{index}");
    json!([
        {"op": "test", "path": path, "value": FINALIZER},
        {"op": "remove", "path": path},
    ])
}

pub(crate) async fn add(
    api: &Api<Kustomization>,
    ks: &Kustomization,
    manager: &str,
) -> Result<(), FinalizerError> {
    patch(api, ks, manager, add_patch(ks.finalizers()))
        .await
        .map_err(FinalizerError::Add)
}

pub(crate) async fn remove(
    api: &Api<Kustomization>,
    ks: &Kustomization,
    manager: &str,
    index: usize,
) -> Result<(), FinalizerError> {
    patch(api, ks, manager, remove_patch(index))
        .await
        .map_err(FinalizerError::Remove)
}

/// A failed test (422) means the finalizers changed since this view of the object (typically
/// a pass run from a cache that has not yet seen the finalizer the pass before it added). That
/// change has a watch event of its own, which runs the next pass: not a failure.
async fn patch(
    api: &Api<Kustomization>,
    ks: &Kustomization,
    manager: &str,
    patch: Value,
) -> Result<(), kube::Error> {
    let patch: json_patch::Patch = serde_json::from_value(patch).expect("a well-formed JSON patch");
    let params = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    match api
        .patch(&ks.name_any(), &params, &Patch::<()>::Json(patch))
        .await
    {
        Err(error) if stale_view(&error) => {
            tracing::debug!(%error, "the finalizers changed since this view of the object; the watch event of that change runs the next pass");
            Ok(())
        }
        other => other.map(drop),
    }
}

fn stale_view(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 422)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ks(finalizers: &[&str], deleted: bool) -> Kustomization {
        let deletion = deleted.then_some("2026-01-01T00:00:00Z");
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "team-a", "finalizers": finalizers,
                "deletionTimestamp": deletion},
            "spec": {"interval": "5m", "prune": true,
                "sourceRef": {"kind": "GitRepository", "name": "repo"}}
        }))
        .unwrap()
    }

    #[test]
    fn the_stage_follows_the_finalizer_and_the_deletion() {
        assert_eq!(stage(&ks(&["other", FINALIZER], false)), Stage::Held);
        assert_eq!(stage(&ks(&["other", FINALIZER], true)), Stage::Deleting(1));
        assert_eq!(stage(&ks(&["other"], false)), Stage::Missing);
        assert_eq!(stage(&ks(&[], true)), Stage::Released);
    }

    #[test]
    fn patches_test_what_they_read() {
        assert_eq!(
            add_patch(&[]),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["finalizers.fluxcd.io"]},
            ])
        );
        assert_eq!(
            add_patch(&["other".into()]),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "finalizers.fluxcd.io"},
            ])
        );
        assert_eq!(
            remove_patch(2),
            json!([
                {"op": "test", "path": "/metadata/finalizers/2", "value": "finalizers.fluxcd.io"},
                {"op": "remove", "path": "/metadata/finalizers/2"},
            ])
        );
    }

    #[test]
    fn only_a_failed_test_is_a_stale_view() {
        let api = |code: u16| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("rejected", "Invalid").with_code(code),
            ))
        };
        assert!(stale_view(&api(422)));
        assert!(!stale_view(&api(500)), "a server error is retried");
        assert!(!stale_view(&api(403)), "a forbidden patch is retried");
    }
}
