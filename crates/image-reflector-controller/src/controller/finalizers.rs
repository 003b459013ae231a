//! Adding Flux's finalizer. kube's `finalizer` helper adds it with a JSON patch that first
//! tests `metadata.finalizers` against the object it was handed; when the watch cache lags
//! behind the server (our own add of a moment ago, another writer's finalizer), the test fails
//! and the API server answers 422 Invalid. A server-side apply of that one entry of the
//! finalizer set merges with whatever the server holds instead, and is a no-op when it is there.

use std::fmt::Debug;
use std::sync::Arc;

use futures::TryFuture;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error, Event, finalizer};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::IMAGE_REPOSITORY;
use crate::api::FINALIZER;

/// Adds the finalizer unless `object` has it or is being deleted (no finalizer may be added
/// then). `Ok(true)`: applied; the watch event of the change runs the next pass, as after
/// kube's own add. Public for the tests that run it against a real API server.
pub async fn add_finalizer<K>(api: &Api<K>, object: &K) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let has = object.finalizers().iter().any(|f| f == FINALIZER);
    if has || object.meta().deletion_timestamp.is_some() {
        return Ok(false);
    }
    let name = object.name_any();
    let entry = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name, "finalizers": [FINALIZER]},
    });
    let params = PatchParams::apply(IMAGE_REPOSITORY.field_manager).force();
    api.patch(&name, &params, &Patch::Apply(entry)).await?;
    Ok(true)
}

/// kube's `finalizer` (the pass on `Apply`, the cleanup on `Cleanup`, then the finalizer's
/// removal), with the finalizer added by `add_finalizer` first.
pub(crate) async fn finalized<K, Fut>(
    api: &Api<K>,
    object: Arc<K>,
    reconcile: impl FnOnce(Event<K>) -> Fut,
) -> Result<Action, Error<Fut::Error>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
    Fut: TryFuture<Ok = Action>,
    Fut::Error: std::error::Error + 'static,
{
    if add_finalizer(api, object.as_ref())
        .await
        .map_err(Error::AddFinalizer)?
    {
        return Ok(Action::await_change());
    }
    finalizer(api, FINALIZER, object, reconcile).await
}
