//! Health assessment of applied objects: which objects to wait for, kstatus rules, CEL health
//! expressions, and a watch-based waiter.

pub mod cel;
mod feed;
pub mod kstatus;
mod targets;
pub mod wait;

pub use feed::HealthWatches;
pub use kstatus::{ObjectStatus, Status};
pub(crate) use kstatus::{current_as_applied, rolls_out};
pub(crate) use targets::wait_targets;
pub use wait::{HealthCheckFailed, HealthError, ObjectReport, Report, WaitTarget, wait, wait_signalling};
