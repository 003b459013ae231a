//! Flux's image reflection as the second controller of this repository: `ImageRepository`
//! scans a registry's tags into a store of its own, `ImagePolicy` picks the latest of them.
//! Its runtime (telemetry, leader election, events, status writes, flags) is `flux_runtime`,
//! shared with the Kustomization controller.

pub mod api;
pub mod controller;
pub mod options;
pub mod policy;
pub mod registry;
pub mod store;

pub use options::{IMAGE_POLICY, IMAGE_REPOSITORY};
