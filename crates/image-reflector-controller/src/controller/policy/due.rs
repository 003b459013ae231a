//! When a policy is evaluated again. Flux runs it on a new generation, a new
//! `reconcile.fluxcd.io/requestedAt`, a new scan revision of its repository, and when the
//! requeue its last result asked for is up (the `Always` interval, `--requeue-dependency`, a
//! backoff). Anything else, a status write of its own or a rescan that found the same tags,
//! leaves it alone. The reconciler keeps the last evaluation in memory: after a restart every
//! policy is evaluated once, as Flux's first list does.

use std::time::Duration;

/// What the reconciler remembers of a policy's last evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LastEvaluation {
    /// The repository's `lastScanResult.revision` it read (`None` before the first scan).
    pub revision: Option<String>,
    /// The requeue its outcome asked for (see `status::Requeue`); `None` waits for a change.
    pub requeue_after: Option<Duration>,
    /// Time since it ended.
    pub elapsed: Duration,
}

/// The policy and repository as they are now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observed<'a> {
    pub generation: i64,
    pub observed_generation: i64,
    pub requested_at: Option<&'a str>,
    pub last_handled_reconcile_at: Option<&'a str>,
    /// The repository's `lastScanResult.revision`, if it was read.
    pub revision: Option<&'a str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    FirstEvaluation,
    NewGeneration,
    ReconcileRequested,
    NewRevision,
    RequeueDue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    Now(Why),
    /// Not yet: evaluate again after this long.
    After(Duration),
    /// Only a change can make it due.
    Idle,
}

pub(crate) fn due(observed: &Observed<'_>, last: Option<&LastEvaluation>) -> Due {
    let Some(last) = last else {
        return Due::Now(Why::FirstEvaluation);
    };
    if observed.generation != observed.observed_generation {
        return Due::Now(Why::NewGeneration);
    }
    if observed
        .requested_at
        .is_some_and(|r| Some(r) != observed.last_handled_reconcile_at)
    {
        return Due::Now(Why::ReconcileRequested);
    }
    if observed.revision != last.revision.as_deref() {
        return Due::Now(Why::NewRevision);
    }
    match last.requeue_after {
        Some(after) if last.elapsed >= after => Due::Now(Why::RequeueDue),
        Some(after) => Due::After(after - last.elapsed),
        None => Due::Idle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn observed() -> Observed<'static> {
        Observed {
            generation: 2,
            observed_generation: 2,
            requested_at: Some("r1"),
            last_handled_reconcile_at: Some("r1"),
            revision: Some("sha256:aa"),
        }
    }

    fn last(requeue_after: Option<Duration>, elapsed: Duration) -> LastEvaluation {
        LastEvaluation {
            revision: Some("sha256:aa".into()),
            requeue_after,
            elapsed,
        }
    }

    #[test]
    fn only_a_change_or_a_due_requeue_evaluates_again() {
        let settled = last(None, MINUTE);
        let cases: Vec<(&str, Observed<'static>, Option<LastEvaluation>, Due)> = vec![
            (
                "after a restart",
                observed(),
                None,
                Due::Now(Why::FirstEvaluation),
            ),
            ("nothing changed", observed(), Some(settled.clone()), Due::Idle),
            (
                "new generation",
                Observed {
                    generation: 3,
                    ..observed()
                },
                Some(settled.clone()),
                Due::Now(Why::NewGeneration),
            ),
            (
                "new request",
                Observed {
                    requested_at: Some("r2"),
                    ..observed()
                },
                Some(settled.clone()),
                Due::Now(Why::ReconcileRequested),
            ),
            (
                "first request",
                Observed {
                    last_handled_reconcile_at: None,
                    ..observed()
                },
                Some(settled.clone()),
                Due::Now(Why::ReconcileRequested),
            ),
            (
                "new revision",
                Observed {
                    revision: Some("sha256:bb"),
                    ..observed()
                },
                Some(settled.clone()),
                Due::Now(Why::NewRevision),
            ),
            (
                "first scan since an empty store",
                observed(),
                Some(LastEvaluation {
                    revision: None,
                    ..settled.clone()
                }),
                Due::Now(Why::NewRevision),
            ),
            (
                "Always interval not up",
                observed(),
                Some(last(Some(10 * MINUTE), 4 * MINUTE)),
                Due::After(6 * MINUTE),
            ),
            (
                "Always interval up",
                observed(),
                Some(last(Some(10 * MINUTE), 10 * MINUTE)),
                Due::Now(Why::RequeueDue),
            ),
            (
                "dependency requeue up",
                observed(),
                Some(last(Some(Duration::from_secs(30)), Duration::from_secs(31))),
                Due::Now(Why::RequeueDue),
            ),
        ];
        for (name, observed, last, expected) in cases {
            assert_eq!(due(&observed, last.as_ref()), expected, "{name}");
        }
    }
}
