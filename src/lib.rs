//! A drop-in replacement for Flux's kustomize-controller.
#![forbid(unsafe_code)]

pub mod api;
pub mod applier;
pub mod cli;
pub mod controller;
pub mod error;
pub mod flux;
pub mod health;
pub mod kube_ext;
pub mod remote;
pub mod sops;
pub mod source;
mod task;
pub mod telemetry;
pub(crate) mod watch_retry;
