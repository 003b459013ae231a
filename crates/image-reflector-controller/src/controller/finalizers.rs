//! Flux's finalizer around a pass, by the runtime's one rule for every controller
//! ([`flux_runtime::finalizers`]: JSON patches by the controller's field manager that test
//! the finalizers they read and, from a view older than the server's, try once more from the
//! server's). kube's `finalizer` helper gave up with 422 Invalid on a stale view and removed
//! the finalizer without a field manager; its `Event` and `Error` stay the passes' vocabulary.

use std::fmt::Debug;
use std::sync::Arc;

use flux_runtime::finalizers::{self, Stage};
use futures::{TryFuture, TryFutureExt};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::IMAGE_REPOSITORY;
use crate::api::FINALIZER;

/// The pass on `Apply`, the cleanup on `Cleanup` and then the finalizer's removal, with the
/// finalizer added first (its watch event runs the first pass).
pub(crate) async fn finalized<K, Fut>(
    api: &Api<K>,
    object: Arc<K>,
    reconcile: impl FnOnce(Event<K>) -> Fut,
) -> Result<Action, Error<Fut::Error>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    Fut: TryFuture<Ok = Action>,
    Fut::Error: std::error::Error + 'static,
{
    let manager = IMAGE_REPOSITORY.field_manager;
    match finalizers::stage(object.as_ref(), FINALIZER) {
        Stage::Held => TryFutureExt::into_future(reconcile(Event::Apply(object)))
            .await
            .map_err(Error::ApplyFailed),
        Stage::Deleting => {
            let action = TryFutureExt::into_future(reconcile(Event::Cleanup(object.clone())))
                .await
                .map_err(Error::CleanupFailed)?;
            finalizers::remove(api, object.as_ref(), FINALIZER, manager)
                .await
                .map_err(Error::RemoveFinalizer)?;
            Ok(action)
        }
        Stage::Missing => {
            finalizers::add(api, object.as_ref(), FINALIZER, manager)
                .await
                .map_err(Error::AddFinalizer)?;
            Ok(Action::await_change())
        }
        Stage::Released => Ok(Action::await_change()),
    }
}
