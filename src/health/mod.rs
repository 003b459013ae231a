//! Health assessment of applied objects: kstatus rules, CEL health expressions, and a
//! watch-based waiter (flux-kustomization.md section 8).

pub mod cel;
pub mod kstatus;
pub mod wait;

pub use kstatus::{ObjectStatus, Status, compute};
pub use wait::{HealthError, ObjectReport, Report, WaitTarget, health_check_targets, wait};
