//! The Kustomization controller: watches, the reconcile pipeline driver, status and events.

pub mod clients;
pub mod dependencies;
pub mod events;
pub mod leader;
pub mod options;
pub mod status;
