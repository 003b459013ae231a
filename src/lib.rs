//! A drop-in replacement for Flux's kustomize-controller.
#![forbid(unsafe_code)]

pub mod api;
pub mod applier;
pub mod build;
pub mod cli;
pub mod controller;
pub mod error;
pub mod health;
pub mod kube_ext;
pub mod source;
pub mod telemetry;
