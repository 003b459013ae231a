//! kstatus conditions as Flux's controllers set them: the condition types every Flux object
//! carries (Ready, Reconciling, Stalled), the reasons of fluxcd/pkg's `meta` package, and the
//! setters. Pure: no I/O, no clock (callers pass `now`).
//!
//! Condition setters follow Flux's `runtime/conditions` semantics: every set stamps the
//! object's generation, `lastTransitionTime` moves only when status, reason or message change,
//! messages are capped, and the list is ordered Stalled, Reconciling, Ready, then the rest.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The object is ready: the last reconcile did what its spec asks (normal-true).
pub const READY: &str = "Ready";
/// A reconcile is running, or the last one failed and will be retried (abnormal-true).
pub const RECONCILING: &str = "Reconciling";
/// The object cannot make progress until its spec changes (abnormal-true).
pub const STALLED: &str = "Stalled";

/// Condition reasons every Flux controller uses (fluxcd/pkg `apis/meta`).
pub mod reason {
    pub const PROGRESSING: &str = "Progressing";
    pub const PROGRESSING_WITH_RETRY: &str = "ProgressingWithRetry";
    pub const RECONCILIATION_SUCCEEDED: &str = "ReconciliationSucceeded";
    pub const RECONCILIATION_FAILED: &str = "ReconciliationFailed";
    pub const SUCCEEDED: &str = "Succeeded";
}

/// Flux caps condition messages at this many bytes.
const MAX_MESSAGE_BYTES: usize = 32768;
pub const TRUE: &str = "True";
pub const FALSE: &str = "False";
pub const UNKNOWN: &str = "Unknown";

/// When and for which generation a status change is made.
#[derive(Clone, Debug)]
pub struct Stamp {
    pub generation: i64,
    pub now: Timestamp,
}

impl Stamp {
    /// Condition times are whole seconds in UTC, as `metav1.Time` serializes them.
    pub fn time(&self) -> Time {
        Time(Timestamp::from_second(self.now.as_second()).unwrap_or(self.now))
    }
}

/// Sets (or replaces) a condition with Flux's setter semantics.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    stamp: &Stamp,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) {
    let message = crate::text::cap(message, MAX_MESSAGE_BYTES);
    let unchanged = |c: &Condition| c.status == status && c.reason == reason && c.message == message;
    let last_transition_time = match conditions.iter().find(|c| c.type_ == type_) {
        Some(existing) if unchanged(existing) => existing.last_transition_time.clone(),
        _ => stamp.time(),
    };
    conditions.retain(|c| c.type_ != type_);
    conditions.push(Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: Some(stamp.generation),
        last_transition_time,
    });
    sort_conditions(conditions);
}

/// Removes a condition type.
pub fn delete_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The condition of this type, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of this type is present with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// Reconciling=True; a reconcile in progress is no longer stalled.
pub fn mark_reconciling(conditions: &mut Vec<Condition>, stamp: &Stamp, reason: &str, message: &str) {
    delete_condition(conditions, STALLED);
    set_condition(conditions, stamp, RECONCILING, TRUE, reason, message);
}

/// Stalled=True; a stalled object is not reconciling.
pub fn mark_stalled(conditions: &mut Vec<Condition>, stamp: &Stamp, reason: &str, message: &str) {
    delete_condition(conditions, RECONCILING);
    set_condition(conditions, stamp, STALLED, TRUE, reason, message);
}

fn sort_conditions(conditions: &mut [Condition]) {
    let rank = |c: &Condition| match c.type_.as_str() {
        STALLED => 0,
        RECONCILING => 1,
        READY => 2,
        _ => 3,
    };
    conditions.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| b.observed_generation.cmp(&a.observed_generation))
            .then_with(|| a.type_.cmp(&b.type_))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Condition types and reasons of a Kustomization, for the order and exclusion rules.
    const HEALTHY: &str = "Healthy";
    const ACCESS_DENIED: &str = "AccessDenied";

    fn stamp(generation: i64, second: i64) -> Stamp {
        Stamp {
            generation,
            now: Timestamp::from_second(1_767_225_600 + second).unwrap(),
        }
    }

    fn types(conditions: &[Condition]) -> Vec<&str> {
        conditions.iter().map(|c| c.type_.as_str()).collect()
    }

    #[test]
    fn transition_time_moves_only_when_status_reason_or_message_change() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, &stamp(1, 0), READY, TRUE, "A", "m");
        let first = conditions[0].last_transition_time.clone();

        // Same status, reason and message, new generation: time kept, generation stamped.
        set_condition(&mut conditions, &stamp(2, 10), READY, TRUE, "A", "m");
        assert_eq!(conditions[0].last_transition_time, first);
        assert_eq!(conditions[0].observed_generation, Some(2));

        // Each of status, reason and message moves the time (stricter than metav1).
        for (second, (status, reason, message)) in [
            (20, (FALSE, "A", "m")),
            (30, (FALSE, "B", "m")),
            (40, (FALSE, "B", "n")),
        ] {
            set_condition(&mut conditions, &stamp(2, second), READY, status, reason, message);
            assert_eq!(
                conditions[0].last_transition_time,
                stamp(2, second).time(),
                "{status} {reason} {message}"
            );
        }
        assert_eq!(conditions.len(), 1);
    }

    #[test]
    fn times_are_truncated_to_seconds() {
        let now = Timestamp::from_millisecond(1_767_225_600_750).unwrap();
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            &Stamp { generation: 1, now },
            READY,
            TRUE,
            "A",
            "m",
        );
        assert_eq!(
            conditions[0].last_transition_time.0.to_string(),
            "2026-01-01T00:00:00Z"
        );
    }

    #[test]
    fn long_messages_are_cut_to_32768_bytes_ending_in_dots() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            &stamp(1, 0),
            READY,
            FALSE,
            "A",
            &"x".repeat(40_000),
        );
        let message = &conditions[0].message;
        assert_eq!(message.len(), 32768);
        assert!(message.ends_with("x..."));

        let exact = "y".repeat(32768);
        set_condition(&mut conditions, &stamp(1, 0), READY, FALSE, "A", &exact);
        assert_eq!(conditions[0].message, exact);

        // A multi-byte character straddling the cut is dropped whole.
        let wide = format!("{}é{}", "z".repeat(32764), "z".repeat(10));
        set_condition(&mut conditions, &stamp(1, 0), READY, FALSE, "A", &wide);
        assert!(conditions[0].message.len() <= 32768);
        assert!(conditions[0].message.ends_with("z..."));
    }

    #[test]
    fn order_is_stalled_reconciling_ready_then_the_rest() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, &stamp(1, 0), HEALTHY, TRUE, "A", "m");
        set_condition(&mut conditions, &stamp(1, 0), READY, FALSE, "A", "m");
        set_condition(&mut conditions, &stamp(1, 0), "Zeta", TRUE, "A", "m");
        set_condition(&mut conditions, &stamp(2, 0), "Omega", TRUE, "A", "m");
        set_condition(&mut conditions, &stamp(1, 0), RECONCILING, TRUE, "A", "m");
        set_condition(&mut conditions, &stamp(1, 0), STALLED, TRUE, "A", "m");
        // The rest: newest observedGeneration first, then by type.
        assert_eq!(
            types(&conditions),
            [STALLED, RECONCILING, READY, "Omega", HEALTHY, "Zeta"]
        );
    }

    #[test]
    fn reconciling_and_stalled_exclude_each_other() {
        let mut conditions = Vec::new();
        mark_stalled(&mut conditions, &stamp(1, 0), ACCESS_DENIED, "m");
        mark_reconciling(&mut conditions, &stamp(1, 0), reason::PROGRESSING, "m");
        assert_eq!(types(&conditions), [RECONCILING]);
        mark_stalled(&mut conditions, &stamp(1, 0), ACCESS_DENIED, "m");
        assert_eq!(types(&conditions), [STALLED]);
    }
}
