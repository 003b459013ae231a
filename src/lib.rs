//! A drop-in replacement for Flux's kustomize-controller.
#![forbid(unsafe_code)]

pub mod api;
pub mod applier;
pub mod cli;
pub mod controller;
pub mod deadline;
pub mod flux;
pub mod health;
pub mod kube_ext;
pub mod remote;
pub mod sops;
pub mod source;
pub(crate) mod tmpdir;

/// The one classification every step error implements, shared by every controller.
pub use flux_runtime::error;
