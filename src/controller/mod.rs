//! The Kustomization controller: watches, the reconcile pipeline driver, status and events.

pub mod status;
