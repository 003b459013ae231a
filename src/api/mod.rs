//! The `kustomize.toolkit.fluxcd.io/v1` API: CRD types and their pure helpers. No I/O here.

pub mod conditions;
pub mod inventory;
pub mod kustomization;
pub mod source;

/// Go `time.Duration` strings, as Flux writes them in specs and messages.
pub use flux_runtime::duration;
pub use inventory::{ObjectRef, ResourceInventory, ResourceRef};
pub use kustomization::{Kustomization, KustomizationSpec, KustomizationStatus};
