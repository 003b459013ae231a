//! What every Flux controller in this repository shares, generic over the kind it reconciles
//! and parameterized by its [`ControllerIdentity`]: telemetry in Flux's shape, leader election
//! and the write fence, the kube clients' layers, watch retries, owned tasks, the step-error
//! classification, kstatus conditions, status writes, the finalizer, events, the runtime flags and feature
//! gates, durations, requeue timing, probes and shutdown. It depends on no controller.
#![forbid(unsafe_code)]

pub mod client;
pub mod conditions;
pub mod controller;
pub mod duration;
pub mod error;
pub mod events;
pub mod finalizers;
pub mod gates;
mod identity;
pub mod leader;
pub mod options;
pub mod probes;
pub mod requeue;
pub mod status_writes;
pub mod task;
pub mod telemetry;
mod text;
pub mod triggers;
pub mod watch_retry;

pub use identity::ControllerIdentity;
