//! A drop-in replacement for Flux's kustomize-controller.
#![forbid(unsafe_code)]

pub mod api;
pub mod build;
pub mod kube_ext;
