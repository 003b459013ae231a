//! Flux's layer around a kustomize build.
