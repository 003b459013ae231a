//! The apply: the stages and the second pass, on the shared planner.
//!
//! Order of work for one apply:
//! 1. prepare (no writes): compile `spec.ignore`, resolve kinds (from discovery, or from a CRD
//!    in the same apply), normalize, check namespaces; any error stops here;
//! 2. fast path ([`super::fingerprint`]): objects whose desired and live fingerprints match the
//!    last successful run are reported unchanged after one LIST per kind;
//! 3. plan (no writes but the managed-fields patches, the apiVersion migration before the
//!    dry-run and the cleanup after one that passed, as Flux): read the live object (on a full run
//!    from one owner-labelled LIST per kind, a GET only for objects not found there) and
//!    server-side dry-run every other object, concurrently; a terminal error in any object
//!    stops here, so an invalid object changes nothing; dry-runs that fail only because
//!    something in this apply does not exist yet are deferred;
//! 4. apply the drifted objects stage by stage; after the first two stages wait until what they
//!    wrote is kstatus Current (CRDs Established, namespaces there, classes accepted), refresh
//!    discovery after the first; objects deferred for something an earlier stage wrote are
//!    dry-run again at the start of their own stage;
//! 5. second pass: the deferred objects are dry-run and applied again, every
//!    `retry_interval`, until `wait_timeout`; only what still fails is reported.

use std::collections::HashMap;

use futures::{StreamExt, stream};
use tokio::time::Instant;

use super::drift::{DriftPolicy, DriftReport, Holding};
use super::fingerprint::{ObjectPrint, live_print, run_key};
use super::http::{api_message, api_url, server_side_apply};
use super::inspect::{Mode, Planning};
use super::masking::redact;
use super::plan::{Desired, Known, Outcome, Plan, Write, transport_kind};
use super::stage::Stage;
use super::{Action, Applier, ApplyError, ApplyRequest, ChangeSet, FailureKind, ObjectError};

/// Where the objects of one apply stand.
struct Run<'a> {
    desired: &'a [Desired],
    /// Per object (by index in `desired`), once it is settled or written.
    outcomes: Vec<Option<Outcome>>,
    /// What was done so far, in the order it was done: the change set of a failed apply.
    changes: &'a mut ChangeSet,
}

/// One round of plans, sorted.
#[derive(Default)]
struct Round {
    writes: Vec<(usize, Write)>,
    /// With whether the object exists.
    deferred: Vec<(usize, ObjectError, bool)>,
    failures: Vec<ObjectError>,
}

/// Deferred objects, to be planned again from what their deferral showed.
fn again(deferred: Vec<(usize, ObjectError, bool)>) -> Vec<(usize, Known)> {
    deferred
        .into_iter()
        .map(|(i, _, exists)| (i, Known::after_deferral(exists)))
        .collect()
}

impl<'a> Run<'a> {
    fn new(desired: &'a [Desired], changes: &'a mut ChangeSet) -> Self {
        Self {
            desired,
            outcomes: vec![None; desired.len()],
            changes,
        }
    }

    fn settle(&mut self, i: usize, outcome: Outcome) {
        self.outcomes[i] = Some(outcome);
    }

    /// Settles the plans that write nothing; the rest sorted into writes, deferrals, failures.
    fn sort(&mut self, plans: Vec<(usize, Result<Plan, ObjectError>)>) -> Round {
        let mut round = Round::default();
        for (i, plan) in plans {
            match plan {
                Ok(Plan::Settled(outcome)) => self.settle(i, outcome),
                Ok(Plan::Write(write)) => round.writes.push((i, write)),
                Ok(Plan::Deferred { error, exists }) => round.deferred.push((i, error, exists)),
                Err(e) => round.failures.push(e),
            }
        }
        round
    }

    /// Adds object `i` to the change set once it has an outcome.
    fn record(&mut self, i: usize) {
        if let Some(outcome) = &self.outcomes[i] {
            let d = &self.desired[i];
            self.changes
                .push(d.object.clone(), &d.api_version, outcome.action);
        }
    }

    /// Adds the settled objects of `stage` to the change set, in apply order.
    fn record_stage(&mut self, stage: Stage) {
        for i in 0..self.desired.len() {
            if self.desired[i].stage == stage {
                self.record(i);
            }
        }
    }

    /// The objects of `stage` that were created or configured.
    fn written_in(&self, stage: Stage) -> Vec<&'a Desired> {
        let desired = self.desired;
        desired
            .iter()
            .zip(&self.outcomes)
            .filter(|(d, o)| {
                d.stage == stage
                    && o.as_ref()
                        .is_some_and(|o| matches!(o.action, Action::Created | Action::Configured))
            })
            .map(|(d, _)| d)
            .collect()
    }

    /// The change set in apply order (fast-path, unchanged and skipped objects included), and
    /// the fingerprints the next run compares with. The inventory is this change set, and prune
    /// deletes what the previous inventory has beyond it: an object of the build left out would
    /// be deleted, so an object without an outcome fails the apply instead.
    fn finish(self) -> Result<(ChangeSet, HashMap<String, ObjectPrint>), Vec<ObjectError>> {
        let unsettled: Vec<ObjectError> = self
            .desired
            .iter()
            .zip(&self.outcomes)
            .filter(|(_, outcome)| outcome.is_none())
            .map(|(d, _)| ObjectError {
                subject: d.subject(),
                kind: FailureKind::Api,
                message: "was neither applied nor skipped by this apply".into(),
            })
            .collect();
        if !unsettled.is_empty() {
            return Err(unsettled);
        }
        let mut ordered = ChangeSet::default();
        let mut prints = HashMap::new();
        for (d, outcome) in self.desired.iter().zip(self.outcomes) {
            let Some(outcome) = outcome else { continue };
            ordered.push(d.object.clone(), &d.api_version, outcome.action);
            let action = if outcome.action == Action::Skipped {
                Action::Skipped
            } else {
                Action::Unchanged
            };
            let print = ObjectPrint {
                desired: d.print.clone(),
                live: outcome.live_print,
                action,
                drift: None,
            };
            prints.insert(d.object.id(), print);
        }
        Ok((ordered, prints))
    }
}

impl Applier {
    /// Applies `req.objects` for `req.owner` (see the module doc for the order of work).
    pub async fn apply(&self, req: ApplyRequest<'_>) -> Result<ChangeSet, ApplyError> {
        let (changes, _) = self.apply_with(req, DriftPolicy::Correct).await?;
        Ok(changes)
    }

    /// [`Applier::apply`] with a drift policy; with [`DriftPolicy::Warn`] the drifted objects
    /// are skipped and reported (the `drift` module).
    pub async fn apply_with(
        &self,
        req: ApplyRequest<'_>,
        policy: DriftPolicy,
    ) -> Result<(ChangeSet, Vec<DriftReport>), ApplyError> {
        let mut changes = ChangeSet::default();
        self.apply_stages(&req, policy, &mut changes)
            .await
            .map_err(|errors| {
                self.prints.forget(&req.owner.key());
                ApplyError { errors, changes }
            })
    }

    /// The apply; on failure the errors, with what was done recorded in `changes`.
    async fn apply_stages(
        &self,
        req: &ApplyRequest<'_>,
        policy: DriftPolicy,
        changes: &mut ChangeSet,
    ) -> Result<(ChangeSet, Vec<DriftReport>), Vec<ObjectError>> {
        let p = self.prepare(req, Mode::Apply).await?;
        let key = run_key(req.force, req.ignore, policy != DriftPolicy::Correct);
        let owner_key = req.owner.key();
        let previous = self
            .prints
            .fast_path(&owner_key, &key, self.options.full_sync_every);
        let full = previous.is_none();
        let mut run = Run::new(&p.desired, changes);
        let mut holding = Holding::new(policy, self.prints.applied(&owner_key));
        if let Some(previous) = &previous {
            for (i, outcome) in self.fast_path(&p, previous).await? {
                let id = p.desired[i].object.id();
                // drift left in place holds while the live object does: reported again
                holding.drifted.extend(
                    previous
                        .get(&id)
                        .and_then(|print| print.drift.clone())
                        .map(|d| (i, d)),
                );
                run.settle(i, outcome);
            }
        }

        // plan everything else, concurrently; nothing is written unless all plans succeed. On a
        // full run the live objects we own come from one LIST per kind instead of a GET each,
        // and a kind whose watch holds none of them needs no LIST.
        let todo: Vec<usize> = (0..p.desired.len())
            .filter(|i| run.outcomes[*i].is_none())
            .collect();
        let mut prefetched = if full {
            let (unseen, seen) = self.unseen_kinds(&p, todo.iter().copied());
            let mut known = self.list_owned(&p, seen.into_iter(), false).await?;
            known.extend(unseen.into_iter().map(|i| (i, Known::Unlisted)));
            known
        } else {
            HashMap::new()
        };
        let items = todo
            .into_iter()
            .map(|i| (i, prefetched.remove(&i).unwrap_or(Known::Unread)))
            .collect();
        let planned = run.sort(self.plan_all(&p, items).await);
        if !planned.failures.is_empty() {
            return Err(planned.failures);
        }
        let mut deferred = planned.deferred;
        let mut writes = holding.hold(&p.desired, planned.writes, |i, o| run.settle(i, o));

        let mut earlier_stage_wrote = false;
        for stage in Stage::ALL {
            let (mut now, later): (Vec<_>, Vec<_>) = writes
                .into_iter()
                .partition(|(i, _)| p.desired[*i].stage == stage);
            writes = later;
            // Objects of this stage deferred for something an earlier stage has now written
            // (a *Class whose CRD came in the first stage): dry-run them again, so they are
            // applied, and waited for, in their stage and not after everything else.
            if earlier_stage_wrote {
                let (retry, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut deferred)
                    .into_iter()
                    .partition(|(i, _, _)| p.desired[*i].stage == stage);
                deferred = keep;
                let replanned = run.sort(self.plan_all(&p, again(retry)).await);
                if !replanned.failures.is_empty() {
                    return Err(replanned.failures);
                }
                now.extend(holding.hold(&p.desired, replanned.writes, |i, o| run.settle(i, o)));
                deferred.extend(replanned.deferred);
                now.sort_by_key(|(i, _)| *i);
            }
            let mut failures = Vec::new();
            for (i, written) in self.write_all(&p.desired, now).await {
                match written {
                    Ok(outcome) => run.settle(i, outcome),
                    Err(e) => failures.push(e),
                }
            }
            run.record_stage(stage);
            if !failures.is_empty() {
                return Err(failures);
            }
            let written = run.written_in(stage);
            earlier_stage_wrote |= !written.is_empty();
            if stage.waited_for() && !written.is_empty() {
                self.wait_until_current(&written).await?;
                if stage == Stage::Definitions {
                    self.resolver.invalidate();
                }
            }
        }
        self.second_pass(&p, &mut run, &mut holding, deferred).await?;

        let (ordered, mut prints) = run.finish()?;
        // in apply order, so that an unchanged set reads the same in every pass
        let mut drifted = holding.drifted;
        drifted.sort_by_key(|(i, _)| *i);
        let mut reports = Vec::new();
        for (i, drift) in drifted {
            let object = &p.desired[i].object;
            if let Some(print) = prints.get_mut(&object.id()) {
                print.drift = Some(drift.clone());
            }
            reports.push(DriftReport {
                object: object.clone(),
                drift,
            });
        }
        self.prints.record(&owner_key, &key, prints, full);
        self.watch_kinds(&p.desired);
        Ok((ordered, reports))
    }

    /// The objects that needed something from this apply: planned again and applied, every
    /// `retry_interval` until `wait_timeout`; what still fails then is reported.
    async fn second_pass(
        &self,
        p: &Planning<'_>,
        run: &mut Run<'_>,
        holding: &mut Holding,
        mut deferred: Vec<(usize, ObjectError, bool)>,
    ) -> Result<(), Vec<ObjectError>> {
        let deadline = Instant::now() + self.options.wait_timeout;
        while !deferred.is_empty() {
            let indices: Vec<usize> = deferred.iter().map(|d| d.0).collect();
            let round = run.sort(self.plan_all(p, again(deferred)).await);
            let mut failures = round.failures;
            deferred = round.deferred;
            for (i, write) in holding.hold(&p.desired, round.writes, |i, o| run.settle(i, o)) {
                match self.write(&p.desired[i], write).await {
                    Ok(outcome) => run.settle(i, outcome),
                    Err(e) => failures.push(e),
                }
            }
            for i in indices {
                run.record(i);
            }
            if !failures.is_empty() {
                return Err(failures);
            }
            if deferred.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(deferred.into_iter().map(|(_, e, _)| e).collect());
            }
            tokio::time::sleep(self.options.retry_interval).await;
        }
        Ok(())
    }

    async fn write_all(
        &self,
        desired: &[Desired],
        writes: Vec<(usize, Write)>,
    ) -> Vec<(usize, Result<Outcome, ObjectError>)> {
        stream::iter(writes)
            .map(|(i, write)| async move { (i, self.write(&desired[i], write).await) })
            .buffered(self.options.concurrency.max(1))
            .collect()
            .await
    }

    /// Writes one planned object; its outcome carries the live print after the write.
    async fn write(&self, d: &Desired, write: Write) -> Result<Outcome, ObjectError> {
        let fail = |kind, message: String| ObjectError {
            subject: d.subject(),
            kind,
            message: redact(&message, &[&d.obj]),
        };
        let url = api_url(&d.kind, &d.object.namespace);
        if let Write::Recreate = write {
            self.delete_and_wait(&url, &d.object.name)
                .await
                .map_err(|m| fail(FailureKind::Api, format!("immutable field detected, {m}")))?;
        }
        let applied = server_side_apply(self.client(), &url, &d.object.name, &write.payload(&d.obj), false)
            .await
            .map_err(|e| fail(transport_kind(&e), api_message("apply failed", &e)))?;
        Ok(Outcome {
            action: write.action(),
            live_print: Some(live_print(&applied["metadata"])),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applier::drift::tests::config_map;

    #[test]
    fn an_object_of_the_build_without_an_outcome_fails_the_apply_rather_than_leave_the_inventory() {
        let desired = vec![config_map("held", "p1"), config_map("lost", "p2")];
        let mut changes = ChangeSet::default();
        let mut run = Run::new(&desired, &mut changes);
        run.settle(0, Outcome::settled(Action::Skipped, None));
        let errors = run.finish().expect_err("an object without an outcome");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].subject, "ConfigMap/apps/lost");

        let mut run = Run::new(&desired, &mut changes);
        run.settle(0, Outcome::settled(Action::Skipped, None));
        run.settle(1, Outcome::settled(Action::Unchanged, None));
        let (ordered, prints) = run.finish().expect("every object settled");
        let actions: Vec<Action> = ordered.entries.iter().map(|e| e.action).collect();
        assert_eq!(actions, [Action::Skipped, Action::Unchanged]);
        assert_eq!(prints.len(), 2);
    }
}
