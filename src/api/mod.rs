//! The `kustomize.toolkit.fluxcd.io/v1` API: CRD types and their pure helpers. No I/O here.

pub mod conditions;
pub mod duration;
pub mod inventory;
pub mod kustomization;
pub mod source;

pub use inventory::{ObjectRef, ResourceInventory, ResourceRef};
pub use kustomization::{Kustomization, KustomizationSpec, KustomizationStatus};
