//! The image reflector's own test parts: the control-plane harness (`cluster`), Flux's
//! controller as a peer, an HTTP proxy, a paging front, raw replies and a token service. The
//! registry, kubectl and free ports come from the `test-support` crate, shared with the
//! Kustomization controller's tests.

#![allow(dead_code)] // each test binary uses its own part of the support

pub mod cluster;
pub mod flux_peer;
pub mod paging;
pub mod proxy;
pub mod raw;
pub mod token;
