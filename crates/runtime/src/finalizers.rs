//! One finalizer rule for every controller. Flux's patch helper writes the finalizer with a
//! merge patch by the controller's field manager, which the API server records in
//! managedFields as an `Update` by that manager. Ours is a JSON patch by the same manager (the
//! same managedFields entry, which the Kustomization differential suite compares with Flux's)
//! that tests the finalizers it read, so another writer's finalizer is never clobbered. A
//! failed test (422: the view was older than the server's, e.g. a cache that has not seen a
//! finalizer added since) is answered by reading the object afresh and patching once more
//! from the server's view.

use std::fmt::Debug;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Where an object stands with a finalizer.
#[derive(Debug, PartialEq)]
pub enum Stage {
    /// Held and not deleted: reconcile.
    Held,
    /// Held and deleted: clean up, then remove the finalizer.
    Deleting,
    /// Not held yet: add it first (its watch event runs the first pass).
    Missing,
    /// Deleted and not held: nothing left to do.
    Released,
}

pub fn stage(object: &impl Resource, finalizer: &str) -> Stage {
    let held = object.finalizers().iter().any(|f| f == finalizer);
    match (held, object.meta().deletion_timestamp.is_some()) {
        (true, false) => Stage::Held,
        (true, true) => Stage::Deleting,
        (false, false) => Stage::Missing,
        (false, true) => Stage::Released,
    }
}

/// The JSON patch adding `finalizer` to the `held` finalizers; `None` when there is nothing to
/// add (held already, or the object is being deleted: no finalizer may be added then).
fn add_patch(object: &impl Resource, finalizer: &str) -> Option<Value> {
    if stage(object, finalizer) != Stage::Missing {
        return None;
    }
    let held = object.finalizers();
    Some(if held.is_empty() {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": held},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ])
    })
}

/// The JSON patch removing `finalizer`; `None` when it is not held.
fn remove_patch(object: &impl Resource, finalizer: &str) -> Option<Value> {
    let index = object.finalizers().iter().position(|f| f == finalizer)?;
    let path = format!("/metadata/finalizers/{index}");
    Some(json!([
        {"op": "test", "path": path, "value": finalizer},
        {"op": "remove", "path": path},
    ]))
}

/// Adds `finalizer` by `manager` unless `object` holds it or is being deleted. `Ok(true)`: a
/// patch went through; the watch event of the change runs the next pass.
pub async fn add<K>(api: &Api<K>, object: &K, finalizer: &str, manager: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    patch(api, object, manager, |view| add_patch(view, finalizer)).await
}

/// Removes `finalizer` by `manager` if `object` holds it.
pub async fn remove<K>(api: &Api<K>, object: &K, finalizer: &str, manager: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    patch(api, object, manager, |view| remove_patch(view, finalizer))
        .await
        .map(drop)
}

/// Patches with what `build` makes of `object`; on a stale view (422), once more with what it
/// makes of the server's object. Still stale then: another writer changed the finalizers in
/// between, and the watch event of that change runs the next pass.
async fn patch<K>(
    api: &Api<K>,
    object: &K,
    manager: &str,
    build: impl Fn(&K) -> Option<Value>,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let name = object.name_any();
    let Some(first) = build(object) else {
        return Ok(false);
    };
    match send(api, &name, manager, first).await {
        Err(error) if stale_view(&error) => {
            tracing::debug!(%error, "the finalizers changed since this view of the object; reading it afresh")
        }
        other => return other.map(|()| true),
    }
    let Some(fresh) = api.get_opt(&name).await? else {
        return Ok(false);
    };
    let Some(second) = build(&fresh) else {
        return Ok(false);
    };
    match send(api, &name, manager, second).await {
        Err(error) if stale_view(&error) => {
            tracing::debug!(%error, "the finalizers changed again; the watch event of that change runs the next pass");
            Ok(false)
        }
        other => other.map(|()| true),
    }
}

async fn send<K>(api: &Api<K>, name: &str, manager: &str, patch: Value) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch: json_patch::Patch = serde_json::from_value(patch).expect("a well-formed JSON patch");
    let params = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::<()>::Json(patch))
        .await
        .map(drop)
}

fn stale_view(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 422)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    const FINALIZER: &str = "finalizers.fluxcd.io";

    fn object(finalizers: &[&str], deleted: bool) -> ConfigMap {
        let deletion = deleted.then_some("2026-01-01T00:00:00Z");
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "apps", "namespace": "team-a", "finalizers": finalizers,
                "deletionTimestamp": deletion},
        }))
        .unwrap()
    }

    #[test]
    fn the_stage_follows_the_finalizer_and_the_deletion() {
        assert_eq!(
            stage(&object(&["other", FINALIZER], false), FINALIZER),
            Stage::Held
        );
        assert_eq!(
            stage(&object(&["other", FINALIZER], true), FINALIZER),
            Stage::Deleting
        );
        assert_eq!(stage(&object(&["other"], false), FINALIZER), Stage::Missing);
        assert_eq!(stage(&object(&[], true), FINALIZER), Stage::Released);
    }

    #[test]
    fn patches_test_what_they_read() {
        assert_eq!(
            add_patch(&object(&[], false), FINALIZER),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["finalizers.fluxcd.io"]},
            ]))
        );
        assert_eq!(
            add_patch(&object(&["other"], false), FINALIZER),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "finalizers.fluxcd.io"},
            ]))
        );
        assert_eq!(
            remove_patch(&object(&["a", "b", FINALIZER], true), FINALIZER),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers/2", "value": "finalizers.fluxcd.io"},
                {"op": "remove", "path": "/metadata/finalizers/2"},
            ]))
        );
    }

    #[test]
    fn nothing_is_patched_when_there_is_nothing_to_change() {
        assert_eq!(
            add_patch(&object(&[FINALIZER], false), FINALIZER),
            None,
            "held already"
        );
        assert_eq!(
            add_patch(&object(&[], true), FINALIZER),
            None,
            "deleted: none may be added"
        );
        assert_eq!(
            remove_patch(&object(&["other"], true), FINALIZER),
            None,
            "not held"
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
