//! The Kustomization controller: watches, the reconcile pipeline driver, status and events.

pub mod events;
pub mod status;
