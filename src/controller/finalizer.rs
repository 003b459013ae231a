//! The finalizer `finalizers.fluxcd.io`, added before the first pass and removed once
//! deletion has cleaned up, by the runtime's one rule for every controller
//! ([`flux_runtime::finalizers`]: a JSON patch by Flux's field manager,
//! `gotk-kustomize-controller`, recorded as Flux's merge patches are).

use flux_runtime::finalizers;
pub(crate) use flux_runtime::finalizers::Stage;
use kube::api::Api;

use crate::api::Kustomization;
use crate::api::conditions::keys::FINALIZER;

pub(crate) fn stage(ks: &Kustomization) -> Stage {
    finalizers::stage(ks, FINALIZER)
}

#[derive(Debug, thiserror::Error)]
pub enum FinalizerError {
    #[error("failed to add finalizer: {0}")]
    Add(#[source] kube::Error),
    #[error("failed to remove finalizer: {0}")]
    Remove(#[source] kube::Error),
}

pub(crate) async fn add(
    api: &Api<Kustomization>,
    ks: &Kustomization,
    manager: &str,
) -> Result<(), FinalizerError> {
    finalizers::add(api, ks, FINALIZER, manager)
        .await
        .map(drop)
        .map_err(FinalizerError::Add)
}

pub(crate) async fn remove(
    api: &Api<Kustomization>,
    ks: &Kustomization,
    manager: &str,
) -> Result<(), FinalizerError> {
    finalizers::remove(api, ks, FINALIZER, manager)
        .await
        .map_err(FinalizerError::Remove)
}
