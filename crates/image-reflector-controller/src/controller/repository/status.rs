//! The status a pass leaves and the event it announces, computed once from what the pass did,
//! with Flux's conditions, reasons and messages. Pure: the caller passes the clock.

use std::time::Duration;

use flux_runtime::conditions::{FALSE, Stamp, TRUE, delete_condition, find, mark_stalled, set_condition};
use flux_runtime::events::Severity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::due::ScanReason;
use crate::api::ImageRepositoryStatus;
use crate::api::conditions::{READY, RECONCILING, STALLED, reason};
use crate::api::image_repository::ScanResult;

/// How a pass ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// Nothing to do until the spec changes (an invalid image, a disabled feature gate).
    Stalled { reason: &'static str, message: String },
    /// Worth a retry; `scanning` says whether the pass had started a scan.
    Failed {
        reason: &'static str,
        message: String,
        scanning: Option<ScanReason>,
    },
    /// Up to date: `scan` is the new result when a scan ran, none when it was not due.
    Done {
        canonical_name: String,
        exclusion_list: Vec<String>,
        scan: Option<ScanResult>,
    },
}

/// What the object says about this pass.
pub(crate) struct Pass<'a> {
    pub generation: i64,
    pub requested_at: Option<&'a str>,
    pub stamp: Stamp,
}

/// The status after the pass, from the one before it.
pub(crate) fn next_status(
    old: Option<&ImageRepositoryStatus>,
    pass: &Pass<'_>,
    outcome: &Outcome,
) -> ImageRepositoryStatus {
    let mut status = old.cloned().unwrap_or_default();
    let stamp = &pass.stamp;
    if let Some(requested) = pass.requested_at {
        status.last_handled_reconcile_at = Some(requested.to_string());
    }
    let conditions = &mut status.conditions;
    match outcome {
        Outcome::Stalled { reason, message } => {
            mark_stalled(conditions, stamp, reason, message);
            set_condition(conditions, stamp, READY, FALSE, reason, message);
            status.observed_generation = pass.generation;
        }
        Outcome::Failed {
            reason,
            message,
            scanning,
        } => {
            let progress = match scanning {
                Some(why) => format!("scanning: {}", why.as_str()),
                None if status.observed_generation != pass.generation => format!(
                    "processing object: new generation {} -> {}",
                    status.observed_generation, pass.generation
                ),
                None => "reconciliation in progress".to_string(),
            };
            delete_condition(conditions, STALLED);
            set_condition(
                conditions,
                stamp,
                RECONCILING,
                TRUE,
                reason::PROGRESSING_WITH_RETRY,
                &progress,
            );
            set_condition(conditions, stamp, READY, FALSE, reason, message);
        }
        Outcome::Done {
            canonical_name,
            exclusion_list,
            scan,
        } => {
            if let Some(scan) = scan {
                status.last_scan_result = Some(scan.clone());
            }
            let (count, checksum) = status
                .last_scan_result
                .as_ref()
                .map_or((0, ""), |r| (r.tag_count, r.revision.as_deref().unwrap_or("")));
            let message = format!("successful scan: found {count} tags with checksum {checksum}");
            delete_condition(conditions, STALLED);
            delete_condition(conditions, RECONCILING);
            set_condition(conditions, stamp, READY, TRUE, reason::SUCCEEDED, &message);
            status.canonical_image_name = Some(canonical_name.clone());
            status.observed_exclusion_list = exclusion_list.clone();
            status.observed_generation = pass.generation;
        }
    }
    status
}

/// The event that announces a change of Ready: Normal when it became or stays Ready with a
/// new message, Warning when it is not Ready and that is news. A pass that changed nothing is
/// announced by no event (Flux repeats its Warning on every failed attempt).
pub(crate) fn announcement(old: &[Condition], new: &[Condition]) -> Option<(Severity, String, String)> {
    let now = find(new, READY)?;
    let before = find(old, READY);
    let same =
        before.is_some_and(|b| b.status == now.status && b.reason == now.reason && b.message == now.message);
    if same {
        return None;
    }
    let severity = if now.status == TRUE {
        Severity::Info
    } else {
        Severity::Error
    };
    Some((severity, now.reason.clone(), now.message.clone()))
}

/// What a pass that changed nothing says in its log (Flux's trace event).
pub(crate) fn next_scan_message(scanned: bool, tags_changed: bool, next: Duration) -> String {
    let next = flux_runtime::duration::format(next);
    match (scanned, tags_changed) {
        (true, false) => format!("tags did not change, next scan in {next}"),
        (true, true) => format!("successful scan, next scan in {next}"),
        (false, _) => format!("no change in repository configuration since last scan, next scan in {next}"),
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
