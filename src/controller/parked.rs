//! Health waits parked off the workers. After the apply, a Kustomization whose objects are
//! still rolling out gives its worker back: the wait goes on in a task of its own and, once it
//! has a verdict, asks the controller to run the Kustomization again; that run finishes the
//! pass from where it was parked. So `--concurrent` bounds the work being done, not the number
//! of rollouts being awaited.
//!
//! One task per waiting Kustomization (its objects come from the watches all waits of its
//! identity share, see `health::feed`), nothing per object; what a parked pass keeps is its
//! status and inventory.
//! The task never writes anything: every status write stays in a reconcile, and kube-runtime
//! runs one reconcile of an object at a time, so a verdict can never overwrite a newer status.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flux_runtime::task::OwnedTask;
use futures::channel::mpsc;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::oneshot;

use crate::api::Kustomization;
use crate::health::{HealthError, Report};

/// What a wait is for: the generation, source revision and reconcile request it was started
/// for. A run for anything else supersedes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Work {
    pub generation: i64,
    pub revision: String,
    pub requested_at: Option<String>,
}

/// A wait that ended: its verdict and how long it took.
#[derive(Debug)]
pub(crate) struct Waited {
    pub verdict: Result<Report, HealthError>,
    pub elapsed: Duration,
}

/// What a wait's task and its owner share: the verdict once there is one, and whether the
/// wait has been parked (then the task, not the owner, asks for the next run). One lock for
/// both, so exactly one of them asks.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    waited: Option<Waited>,
    parked: bool,
}

impl Slot {
    fn take(&self) -> Option<Waited> {
        self.state.lock().expect("wait slot lock").waited.take()
    }
}

/// A wait started and not parked yet.
pub(crate) struct Started {
    object: ObjectRef<Kustomization>,
    slot: Arc<Slot>,
    /// Stopped with its owner: a superseded, deleted or dropped wait holds no watch.
    task: OwnedTask,
    undecided: oneshot::Receiver<()>,
}

/// How a started wait went while the worker stayed with it.
pub(crate) enum Settled {
    /// Decided by the first look at the objects (on a quiet interval, everything is healthy).
    Done(Waited),
    /// Still undecided once every object has been read: a rollout to wait for.
    Undecided(Started),
}

impl Started {
    /// Waits until the wait is decided or says it is undecided after its first lists.
    pub async fn settle(mut self) -> Settled {
        let returned = tokio::select! {
            biased;
            _ = &mut self.task.0 => true,
            signal = &mut self.undecided => {
                if signal.is_ok() {
                    return Settled::Undecided(self);
                }
                false
            }
        };
        if !returned {
            // The signal is dropped unsent only when the wait returns.
            let _ = (&mut self.task.0).await;
        }
        // Only a panic in the waiter leaves no verdict: report the wait as cut short.
        let cut_short = Waited {
            verdict: Err(HealthError::Canceled),
            elapsed: Duration::ZERO,
        };
        Settled::Done(self.slot.take().unwrap_or(cut_short))
    }
}

/// A parked wait and the pass it finishes.
struct Parked<T> {
    work: Work,
    pass: T,
    slot: Arc<Slot>,
    task: OwnedTask,
}

/// What a run finds for its Kustomization.
pub(crate) enum Resume<T> {
    /// No wait for this work (none parked, or the parked one was superseded and dropped).
    Idle,
    /// The wait for this very work goes on: nothing to do until it ends.
    Waiting,
    /// The wait ended: the parked pass and its verdict.
    Finished(T, Waited),
    /// The wait was for other work and is canceled (`CancelHealthCheckOnNewRevision`): the
    /// parked pass, to conclude as canceled, and the work it was for.
    Superseded(T, Work),
}

/// The parked waits, by `namespace/name`, and the channel that asks the controller to run a
/// Kustomization whose wait ended.
pub(crate) struct Waits<T> {
    parked: Mutex<HashMap<String, Parked<T>>>,
    trigger: mpsc::UnboundedSender<ObjectRef<Kustomization>>,
    triggers: Mutex<Option<mpsc::UnboundedReceiver<ObjectRef<Kustomization>>>>,
}

impl<T> Default for Waits<T> {
    fn default() -> Self {
        let (trigger, triggers) = mpsc::unbounded();
        Self {
            parked: Mutex::default(),
            trigger,
            triggers: Mutex::new(Some(triggers)),
        }
    }
}

impl<T> Waits<T> {
    /// The runs asked for by ended waits, for the controller (taken once).
    pub fn triggers(&self) -> Option<mpsc::UnboundedReceiver<ObjectRef<Kustomization>>> {
        self.triggers.lock().expect("wait triggers lock").take()
    }

    /// Starts the wait `wait` makes (given the sender of its "undecided" signal) in a task.
    pub fn start<F>(
        &self,
        object: ObjectRef<Kustomization>,
        wait: impl FnOnce(oneshot::Sender<()>) -> F,
    ) -> Started
    where
        F: Future<Output = Result<Report, HealthError>> + Send + 'static,
    {
        let (signal, undecided) = oneshot::channel();
        let wait = wait(signal);
        let slot = Arc::new(Slot::default());
        let (shared, trigger, target) = (slot.clone(), self.trigger.clone(), object.clone());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let verdict = wait.await;
            let parked = {
                let mut state = shared.state.lock().expect("wait slot lock");
                state.waited = Some(Waited {
                    verdict,
                    elapsed: started.elapsed(),
                });
                state.parked
            };
            if parked {
                // Closed only when the controller has stopped: nobody left to tell.
                let _ = trigger.unbounded_send(target);
            }
        });
        Started {
            object,
            slot,
            task: OwnedTask(task),
            undecided,
        }
    }

    /// Parks `started` for `work` with the pass it finishes; a wait parked before for `key`
    /// is dropped.
    pub fn park(&self, key: &str, work: Work, pass: T, started: Started) {
        let decided = {
            let mut state = started.slot.state.lock().expect("wait slot lock");
            state.parked = true;
            state.waited.is_some()
        };
        let parked = Parked {
            work,
            pass,
            slot: started.slot,
            task: started.task,
        };
        self.lock().insert(key.to_string(), parked);
        if decided {
            // Decided between the first lists and now: the task saw it unparked.
            let _ = self.trigger.unbounded_send(started.object);
        }
    }

    /// What a run for `work` finds for `key`; a wait parked for other work is dropped, and
    /// with `cancel` its pass handed back to conclude as canceled.
    pub fn resume(&self, key: &str, work: &Work, cancel: bool) -> Resume<T> {
        let mut parked = self.lock();
        let Some(entry) = parked.get(key) else {
            return Resume::Idle;
        };
        if entry.work != *work {
            let entry = parked.remove(key).expect("entry just read");
            return match cancel {
                true => Resume::Superseded(entry.pass, entry.work),
                false => Resume::Idle,
            };
        }
        match entry.slot.take() {
            Some(waited) => {
                let entry = parked.remove(key).expect("entry just read");
                Resume::Finished(entry.pass, waited)
            }
            None if entry.task.0.is_finished() => {
                // A waiter that panicked: start over.
                parked.remove(key);
                Resume::Idle
            }
            None => Resume::Waiting,
        }
    }

    /// Drops the wait parked for `key`, if any (the Kustomization is deleted or suspended).
    pub fn cancel(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Parked<T>>> {
        self.parked.lock().expect("parked waits lock")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures::StreamExt;

    use super::*;

    fn object() -> ObjectRef<Kustomization> {
        ObjectRef::new("app").within("apps")
    }

    fn work(revision: &str) -> Work {
        Work {
            generation: 1,
            revision: revision.to_string(),
            requested_at: None,
        }
    }

    fn healthy() -> Result<Report, HealthError> {
        Ok(Report { objects: Vec::new() })
    }

    /// Sets its flag when dropped: the future holding it was stopped or ran out.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_wait_decided_by_its_first_look_is_finished_on_the_worker() {
        let waits = Waits::<&str>::default();
        let started = waits.start(object(), |_undecided| async { healthy() });
        let Settled::Done(waited) = started.settle().await else {
            panic!("a wait that returned without signalling is done")
        };
        assert!(waited.verdict.is_ok());
    }

    #[tokio::test]
    async fn a_parked_wait_asks_for_a_run_when_it_ends_and_that_run_finishes_it() {
        let waits = Waits::default();
        let mut triggers = waits.triggers().expect("taken once");
        let (release, released) = oneshot::channel::<()>();
        let started = waits.start(object(), |undecided| async move {
            let _ = undecided.send(());
            let _ = released.await;
            Err(HealthError::Timeout(Vec::new()))
        });
        let Settled::Undecided(started) = started.settle().await else {
            panic!("a wait that signalled is undecided")
        };
        waits.park("apps/app", work("rev1"), "the parked pass", started);
        assert!(matches!(
            waits.resume("apps/app", &work("rev1"), false),
            Resume::Waiting
        ));

        release.send(()).unwrap();
        assert_eq!(
            triggers.next().await,
            Some(object()),
            "the ended wait asks for a run"
        );
        let Resume::Finished(pass, waited) = waits.resume("apps/app", &work("rev1"), false) else {
            panic!("the run after the trigger finishes the pass")
        };
        assert_eq!(pass, "the parked pass");
        assert!(matches!(waited.verdict, Err(HealthError::Timeout(_))));
        assert!(
            matches!(waits.resume("apps/app", &work("rev1"), false), Resume::Idle),
            "finished once"
        );
    }

    #[tokio::test]
    async fn a_wait_decided_while_being_parked_still_asks_for_a_run() {
        let waits = Waits::default();
        let mut triggers = waits.triggers().unwrap();
        let (release, released) = oneshot::channel::<()>();
        let started = waits.start(object(), |undecided| async move {
            let _ = undecided.send(());
            let _ = released.await;
            healthy()
        });
        let Settled::Undecided(started) = started.settle().await else {
            panic!("signalled first")
        };
        // Let the task return before it is parked.
        release.send(()).unwrap();
        while started.slot.state.lock().unwrap().waited.is_none() {
            tokio::task::yield_now().await;
        }
        waits.park("apps/app", work("rev1"), (), started);
        assert_eq!(triggers.next().await, Some(object()));
        assert!(matches!(
            waits.resume("apps/app", &work("rev1"), false),
            Resume::Finished((), _)
        ));
    }

    /// Parks a wait for `rev1` that never ends by itself; the flag says when it was stopped.
    async fn park_endless(waits: &Waits<()>) -> Arc<AtomicBool> {
        let stopped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(stopped.clone());
        let started = waits.start(object(), |undecided| async move {
            let _guard = guard;
            let _ = undecided.send(());
            std::future::pending::<()>().await;
            healthy()
        });
        let Settled::Undecided(started) = started.settle().await else {
            panic!("signalled")
        };
        waits.park("apps/app", work("rev1"), (), started);
        stopped
    }

    async fn until_stopped(stopped: &AtomicBool) {
        while !stopped.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn with_cancel_other_work_hands_the_parked_pass_back_and_stops_its_wait() {
        let waits = Waits::default();
        let stopped = park_endless(&waits).await;
        let Resume::Superseded((), was) = waits.resume("apps/app", &work("rev2"), true) else {
            panic!("the parked pass is handed back to conclude as canceled")
        };
        assert_eq!(was, work("rev1"));
        assert!(matches!(
            waits.resume("apps/app", &work("rev1"), true),
            Resume::Idle
        ));
        until_stopped(&stopped).await;
    }

    #[tokio::test]
    async fn other_work_supersedes_a_parked_wait_and_stops_it() {
        let waits = Waits::default();
        let stopped = park_endless(&waits).await;
        for other in [
            work("rev2"),
            Work {
                generation: 2,
                ..work("rev1")
            },
            Work {
                requested_at: Some("now".into()),
                ..work("rev1")
            },
        ] {
            assert!(matches!(waits.resume("apps/app", &other, false), Resume::Idle));
        }
        assert!(
            matches!(waits.resume("apps/app", &work("rev1"), false), Resume::Idle),
            "the superseded wait is gone"
        );
        until_stopped(&stopped).await;
    }

    #[tokio::test]
    async fn a_cancelled_wait_is_gone_and_stopped() {
        let waits = Waits::default();
        let stopped = park_endless(&waits).await;
        assert!(matches!(
            waits.resume("apps/app", &work("rev1"), false),
            Resume::Waiting
        ));
        waits.cancel("apps/app");
        assert!(matches!(
            waits.resume("apps/app", &work("rev1"), false),
            Resume::Idle
        ));
        until_stopped(&stopped).await;
    }
}
