//! The health waiter: watches a set of objects until all are Current, one is Failed, one is
//! missing, the timeout passes, or the caller cancels (a new revision arrived).
//!
//! Watches, not polling: the shared watches of `feed`, one per kind and namespace for every
//! wait of an identity, so a status change is seen when the API server sends it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::Value;
use tokio::time::{Instant, sleep_until};

use super::cel::HealthExprs;
use super::feed::{HealthWatches, Subscription, Update};
use super::kstatus::{self, ObjectStatus, Status};
use crate::api::conditions::reason;
use crate::api::duration;
use crate::error::StepError;
use crate::kube_ext::ResolveError;

/// How long a missing object (or an unknown kind) may take to appear before it is reported.
///
/// Objects this controller applied are visible at once (watches list at a resource version
/// no older than the apply), but health checks may name objects that another controller
/// creates right after the apply (a Deployment rendered by an operator), and a CRD applied in
/// the same run takes a moment to be served. Five seconds covers both without letting a typo
/// wait for the whole timeout.
pub(crate) const NOT_FOUND_GRACE: Duration = Duration::from_secs(5);

/// How often objects already read are re-judged without an event: only time-based rules (a
/// Pod unschedulable for 15s) change meanwhile. No API request is made.
const REJUDGE_EVERY: Duration = Duration::from_secs(5);

/// How often a kind that is not served yet is looked up again during the grace period.
const RESOLVE_RETRY: Duration = Duration::from_secs(1);

/// One object to wait for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WaitTarget {
    pub api_version: String,
    pub kind: String,
    /// The namespace of a namespaced object; ignored for cluster-scoped kinds.
    pub namespace: Option<String>,
    pub name: String,
    /// The object may be deleted once done (a Job with `ttlSecondsAfterFinished`): absence
    /// counts as success.
    pub absent_is_success: bool,
    /// The write that just returned made the object Current (its kind's rule reads nothing the
    /// cluster writes later): no watch unless `healthCheckExprs` judge the kind.
    pub current_as_applied: bool,
}

impl WaitTarget {
    pub fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            absent_is_success: false,
            current_as_applied: false,
        }
    }
}

/// `Kind/namespace/name`, or `Kind/name` for cluster-scoped objects.
impl fmt::Display for WaitTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{ns}/{}", self.kind, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// The last known status of one awaited object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectReport {
    pub target: WaitTarget,
    pub status: ObjectStatus,
}

impl fmt::Display for ObjectReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.target, self.status.status, self.status.message
        )
    }
}

/// Every awaited object, Current.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub objects: Vec<ObjectReport>,
}

/// Why the wait ended without every object Current. The lists name every object that is not
/// Current, failed ones first.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("timeout waiting for: [{}]", list(.0))]
    Timeout(Vec<ObjectReport>),
    #[error("failed early due to stalled resources: [{}]", list(.0))]
    Failed(Vec<ObjectReport>),
    #[error("failed early due to missing resources: [{}]", list(.0))]
    NotFound(Vec<ObjectReport>),
    /// The caller cancelled: a new revision or spec change arrived.
    #[error("health check canceled")]
    Canceled,
}

impl StepError for HealthError {
    fn reason(&self) -> &'static str {
        match self {
            HealthError::Canceled => reason::HEALTH_CHECK_CANCELED,
            _ => reason::HEALTH_CHECK_FAILED,
        }
    }
}

/// A wait that ended without every object Current, as the Ready condition tells it (Flux's
/// wording): how long the checks ran, then why they failed. The Healthy condition carries the
/// wait's error alone.
#[derive(Debug, thiserror::Error)]
#[error("health check failed after {}: {error}", duration::format(*.elapsed))]
pub struct HealthCheckFailed {
    pub elapsed: Duration,
    pub error: HealthError,
}

impl StepError for HealthCheckFailed {
    fn reason(&self) -> &'static str {
        reason::HEALTH_CHECK_FAILED
    }
}

impl HealthError {
    /// The objects that were not Current, if the wait ran to a verdict.
    pub fn objects(&self) -> &[ObjectReport] {
        match self {
            HealthError::Timeout(objects) | HealthError::Failed(objects) | HealthError::NotFound(objects) => {
                objects
            }
            HealthError::Canceled => &[],
        }
    }
}

fn list(objects: &[ObjectReport]) -> String {
    objects
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Waits until every object in `objects` is Current (`Ok`), or until one is Failed, one is
/// still missing after [`NOT_FOUND_GRACE`], `timeout` passes, or `cancel` completes (`Err`).
/// `exprs` override kstatus for the groups/kinds they name.
pub async fn wait(
    watches: &HealthWatches,
    objects: &[WaitTarget],
    exprs: &HealthExprs,
    timeout: Duration,
    cancel: impl Future<Output = ()>,
) -> Result<Report, HealthError> {
    // Cancellation wins over everything, discovery included.
    tokio::select! {
        biased;
        () = cancel => Err(HealthError::Canceled),
        verdict = watch_until_verdict(watches, objects, exprs, timeout, true, None) => verdict,
    }
}

/// [`wait`] without cancellation (drop the future to stop it) that also says when the wait
/// will be a real one: `undecided` is sent once every watch has listed its objects and they
/// do not decide the wait yet. A wait decided by those first lists never sends it, so a
/// caller can tell "already healthy" from "rollout in progress" without a timing guess.
/// Without `fail_fast`, a Failed object ends the wait only once no object is still on its way.
pub async fn wait_signalling(
    watches: &HealthWatches,
    objects: &[WaitTarget],
    exprs: &HealthExprs,
    timeout: Duration,
    fail_fast: bool,
    undecided: tokio::sync::oneshot::Sender<()>,
) -> Result<Report, HealthError> {
    watch_until_verdict(watches, objects, exprs, timeout, fail_fast, Some(undecided)).await
}

async fn watch_until_verdict(
    watches: &HealthWatches,
    objects: &[WaitTarget],
    exprs: &HealthExprs,
    timeout: Duration,
    fail_fast: bool,
    mut undecided: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<Report, HealthError> {
    let start = Instant::now();
    let deadline = start + timeout;
    let grace_end = start + NOT_FOUND_GRACE.min(timeout);
    let mut board = Board::new(objects, fail_fast);

    let mut kinds: Vec<(String, String)> = Vec::new();
    for (entry, target) in board.entries.iter_mut().zip(objects) {
        if target.current_as_applied && !exprs.judges(&target.api_version, &target.kind) {
            entry.status = Some(ObjectStatus::new(
                Status::Current,
                "Resource is current as applied",
            ));
            continue;
        }
        let kind = (target.api_version.clone(), target.kind.clone());
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    let mut streams: SelectAll<BoxStream<'static, (usize, Update)>> = SelectAll::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut unresolved = start_watches(watches, &kinds, &mut board, &mut groups, &mut streams).await;

    let mut rejudge = tokio::time::interval_at(start + REJUDGE_EVERY, REJUDGE_EVERY);
    let mut resolve_retry = tokio::time::interval_at(start + RESOLVE_RETRY, RESOLVE_RETRY);
    loop {
        if let Some(verdict) = board.verdict(Instant::now() >= grace_end) {
            return verdict;
        }
        if unresolved.is_empty()
            && board.entries.iter().all(|e| e.status.is_some())
            && let Some(undecided) = undecided.take()
        {
            // The receiver is gone only when nobody waits for the signal any more.
            let _ = undecided.send(());
        }
        tokio::select! {
            () = sleep_until(deadline) => return Err(HealthError::Timeout(board.not_current())),
            () = sleep_until(grace_end), if Instant::now() < grace_end => {}
            _ = rejudge.tick() => board.rejudge(exprs),
            _ = resolve_retry.tick(), if !unresolved.is_empty() => {
                unresolved = start_watches(watches, &unresolved, &mut board, &mut groups, &mut streams).await;
            }
            Some((group, update)) = streams.next() => board.apply(&groups[group], update, exprs).await,
        }
    }
}

/// The awaited objects of one kind in one namespace, served by one subscription.
struct Group {
    /// Indexes into the board, by object name (one object may be listed twice).
    members: HashMap<String, Vec<usize>>,
    /// Kept while the wait lasts: dropping it ends the subscription.
    _subscription: Subscription,
}

/// Resolves `kinds` and subscribes to their objects; returns the kinds not served (yet), whose
/// objects are marked NotFound meanwhile.
async fn start_watches(
    watches: &HealthWatches,
    kinds: &[(String, String)],
    board: &mut Board,
    groups: &mut Vec<Group>,
    streams: &mut SelectAll<BoxStream<'static, (usize, Update)>>,
) -> Vec<(String, String)> {
    let resolver = watches.resolver();
    let mut unresolved = Vec::new();
    for (api_version, kind) in kinds {
        let resolved = match resolver.resolve(api_version, kind).await {
            Ok(resolved) => resolved,
            Err(e) => {
                // A kind not served (yet) or a malformed apiVersion is as missing as an
                // absent object; a failed discovery may pass.
                let status = match e {
                    ResolveError::UnknownKind { .. } | ResolveError::InvalidApiVersion(_) => Status::NotFound,
                    ResolveError::Discovery { .. } => Status::Unknown,
                };
                board.mark_kind(api_version, kind, ObjectStatus::new(status, e.to_string()));
                unresolved.push((api_version.clone(), kind.clone()));
                continue;
            }
        };
        let expects_status = crd_declares_status(resolver.client(), &resolved.resource).await;
        // Group this kind's objects by namespace; cluster-scoped objects have none.
        let mut by_namespace: HashMap<Option<String>, HashMap<String, Vec<usize>>> = HashMap::new();
        for (index, entry) in board.entries.iter_mut().enumerate() {
            if entry.target.api_version == *api_version && entry.target.kind == *kind {
                if !resolved.namespaced {
                    entry.target.namespace = None;
                }
                entry.expects_status = expects_status;
                by_namespace
                    .entry(entry.target.namespace.clone())
                    .or_default()
                    .entry(entry.target.name.clone())
                    .or_default()
                    .push(index);
            }
        }
        for (namespace, members) in by_namespace {
            let (api, _) = match resolver.api(api_version, kind, namespace.as_deref()).await {
                Ok(found) => found,
                Err(e) => {
                    for &index in members.values().flatten() {
                        board.entries[index].status = Some(ObjectStatus::new(Status::Unknown, e.to_string()));
                    }
                    continue;
                }
            };
            let mut subscription = watches.subscribe(api, members.keys().cloned().collect());
            let group = groups.len();
            streams.push(subscription.updates().map(move |update| (group, update)).boxed());
            groups.push(Group {
                members,
                _subscription: subscription,
            });
        }
    }
    unresolved
}

/// What is known about each awaited object.
struct Board {
    entries: Vec<Entry>,
    /// Stop at the first Failed object; otherwise only once every object is Current or Failed
    /// (Flux's DisableFailFastBehavior gate turns it off).
    fail_fast: bool,
}

struct Entry {
    target: WaitTarget,
    /// The live object as last seen, for re-judging without an event: the feed's own copy.
    object: Option<Arc<DynamicObject>>,
    /// `None` until the object was read or found missing.
    status: Option<ObjectStatus>,
    /// The kind is a custom resource whose controller is expected to write status.
    expects_status: bool,
}

impl Board {
    fn new(targets: &[WaitTarget], fail_fast: bool) -> Self {
        let entries = targets
            .iter()
            .map(|target| Entry {
                target: target.clone(),
                object: None,
                status: None,
                expects_status: false,
            })
            .collect();
        Self { entries, fail_fast }
    }

    fn mark_kind(&mut self, api_version: &str, kind: &str, status: ObjectStatus) {
        for entry in &mut self.entries {
            if entry.target.api_version == api_version && entry.target.kind == kind {
                entry.status = Some(status.clone());
            }
        }
    }

    async fn apply(&mut self, group: &Group, update: Update, exprs: &HealthExprs) {
        match update {
            Update::Seen(object) => {
                let name = object.metadata.name.as_deref().unwrap_or_default();
                for &index in group.members.get(name).into_iter().flatten() {
                    self.observe(index, object.clone(), exprs).await;
                }
            }
            Update::Gone(name) => {
                for &index in group.members.get(&name).into_iter().flatten() {
                    self.missing(index);
                }
            }
            Update::Failed(message) => {
                // Retried by the feed; kept for the timeout report.
                for &index in group.members.values().flatten() {
                    let entry = &mut self.entries[index];
                    if entry.object.is_none() {
                        entry.status = Some(ObjectStatus::new(Status::Unknown, message.clone()));
                    }
                }
            }
        }
    }

    async fn observe(&mut self, index: usize, object: Arc<DynamicObject>, exprs: &HealthExprs) {
        let entry = &mut self.entries[index];
        let json = object_json(&entry.target, &object);
        entry.status = Some(match json {
            Some(json) => judge(&json, exprs, entry.expects_status).await,
            None => unreadable(),
        });
        entry.object = Some(object);
    }

    fn missing(&mut self, index: usize) {
        let entry = &mut self.entries[index];
        entry.object = None;
        entry.status = Some(if entry.target.absent_is_success {
            ObjectStatus::new(Status::Current, "Resource deleted after completion")
        } else {
            ObjectStatus::new(Status::NotFound, "Resource not found")
        });
    }

    /// Re-judges by the kstatus rules: CEL rules read nothing but the object, so without an
    /// event their verdict cannot change.
    fn rejudge(&mut self, exprs: &HealthExprs) {
        for entry in &mut self.entries {
            if exprs.judges(&entry.target.api_version, &entry.target.kind) {
                continue;
            }
            if let Some(object) = &entry.object {
                entry.status = Some(match object_json(&entry.target, object) {
                    Some(json) => kstatus_of(&json, entry.expects_status),
                    None => unreadable(),
                });
            }
        }
    }

    /// The end of the wait, if the statuses already decide it.
    fn verdict(&self, grace_over: bool) -> Option<Result<Report, HealthError>> {
        let statuses: Vec<Option<Status>> = self
            .entries
            .iter()
            .map(|e| e.status.as_ref().map(|s| s.status))
            .collect();
        if statuses.iter().all(|s| *s == Some(Status::Current)) {
            let objects = self
                .entries
                .iter()
                .map(|e| ObjectReport {
                    target: e.target.clone(),
                    status: e.status.clone().expect("all read"),
                })
                .collect();
            return Some(Ok(Report { objects }));
        }
        let settled = || {
            statuses
                .iter()
                .all(|s| matches!(s, Some(Status::Current | Status::Failed)))
        };
        if statuses.contains(&Some(Status::Failed)) && (self.fail_fast || settled()) {
            return Some(Err(HealthError::Failed(self.not_current())));
        }
        if grace_over && statuses.contains(&Some(Status::NotFound)) {
            return Some(Err(HealthError::NotFound(self.not_current())));
        }
        None
    }

    /// Every object not Current, Failed first, then in the caller's order.
    fn not_current(&self) -> Vec<ObjectReport> {
        let mut objects: Vec<ObjectReport> = self
            .entries
            .iter()
            .filter(|e| e.status.as_ref().is_none_or(|s| s.status != Status::Current))
            .map(|e| ObjectReport {
                target: e.target.clone(),
                status: e
                    .status
                    .clone()
                    .unwrap_or_else(|| ObjectStatus::new(Status::Unknown, "not read yet")),
            })
            .collect();
        objects.sort_by_key(|o| o.status.status != Status::Failed);
        objects
    }
}

/// A live object of `target`'s kind as JSON, with its type: list items may come without it.
fn object_json(target: &WaitTarget, object: &DynamicObject) -> Option<Value> {
    let mut json = serde_json::to_value(object).ok()?;
    json["apiVersion"] = Value::String(target.api_version.clone());
    json["kind"] = Value::String(target.kind.clone());
    Some(json)
}

fn unreadable() -> ObjectStatus {
    ObjectStatus::new(Status::Unknown, "the object could not be read")
}

/// CEL rules for the kinds they name, kstatus for the rest. An expression that cannot be
/// evaluated leaves the object Unknown with the error; one over its limits fails the object,
/// since evaluating it again would spend as much again.
async fn judge(object: &Value, exprs: &HealthExprs, expects_status: bool) -> ObjectStatus {
    let Some(evaluation) = exprs.evaluate(object) else {
        return kstatus_of(object, expects_status);
    };
    match evaluation.await {
        Ok(status) => status,
        Err(e) if e.is_terminal() => ObjectStatus::new(Status::Failed, e.to_string()),
        Err(e) => ObjectStatus::new(Status::Unknown, e.to_string()),
    }
}

fn kstatus_of(object: &Value, expects_status: bool) -> ObjectStatus {
    if expects_status {
        kstatus::compute_expecting_status(object)
    } else {
        kstatus::compute(object)
    }
}

/// Whether `resource` is served by a CRD whose version declares a status subresource. Built-in
/// and aggregated kinds have no CRD; a CRD we may not read counts as no (kstatus behaviour).
async fn crd_declares_status(client: &Client, resource: &ApiResource) -> bool {
    // A CRD's group has a dot: no request for the built-in groups.
    if !resource.group.contains('.') {
        return false;
    }
    let name = format!("{}.{}", resource.plural, resource.group);
    let Ok(Some(crd)) = Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(&name)
        .await
    else {
        return false;
    };
    crd.spec
        .versions
        .iter()
        .any(|v| v.name == resource.version && v.subresources.as_ref().is_some_and(|s| s.status.is_some()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::kustomization::CustomHealthCheck;
    use crate::health::cel;

    fn board(statuses: &[(WaitTarget, Option<ObjectStatus>)]) -> Board {
        let targets: Vec<WaitTarget> = statuses.iter().map(|(t, _)| t.clone()).collect();
        let mut board = Board::new(&targets, true);
        for (entry, (_, status)) in board.entries.iter_mut().zip(statuses) {
            entry.status = status.clone();
        }
        board
    }

    fn web() -> WaitTarget {
        WaitTarget::new("apps/v1", "Deployment", Some("apps"), "web")
    }

    fn crd() -> WaitTarget {
        WaitTarget::new(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            "widgets.example.com",
        )
    }

    #[test]
    fn errors_list_every_object_not_current_failed_first() {
        let board = board(&[
            (
                crd(),
                Some(ObjectStatus::new(Status::InProgress, "Install in progress")),
            ),
            (
                WaitTarget::new("v1", "ConfigMap", Some("apps"), "settings"),
                Some(ObjectStatus::new(Status::Current, "ok")),
            ),
            (
                web(),
                Some(ObjectStatus::new(Status::Failed, "Progress deadline exceeded")),
            ),
        ]);
        let Some(Err(err)) = board.verdict(false) else {
            panic!("a Failed object ends the wait")
        };
        assert_eq!(
            err.to_string(),
            "failed early due to stalled resources: [Deployment/apps/web: Failed: Progress deadline exceeded; \
             CustomResourceDefinition/widgets.example.com: InProgress: Install in progress]"
        );
        assert_eq!(err.reason(), "HealthCheckFailed");
    }

    // Before, the DisableFailFastBehavior gate was accepted without effect: the first Failed
    // object always ended the wait.
    #[test]
    fn without_fail_fast_a_failed_object_ends_the_wait_once_nothing_is_on_its_way() {
        let failed = || Some(ObjectStatus::new(Status::Failed, "Progress deadline exceeded"));
        let mut rolling = board(&[
            (web(), failed()),
            (crd(), Some(ObjectStatus::new(Status::InProgress, "Installing"))),
        ]);
        rolling.fail_fast = false;
        assert!(
            rolling.verdict(false).is_none(),
            "the CRD may still become Current"
        );
        let mut settled = board(&[
            (web(), failed()),
            (
                crd(),
                Some(ObjectStatus::new(Status::Current, "CRD is established")),
            ),
        ]);
        settled.fail_fast = false;
        let Some(Err(err)) = settled.verdict(false) else {
            panic!("nothing left on its way")
        };
        assert_eq!(
            err.to_string(),
            "failed early due to stalled resources: [Deployment/apps/web: Failed: Progress deadline exceeded]"
        );
    }

    #[test]
    fn missing_objects_end_the_wait_only_after_the_grace_period() {
        let board = board(&[
            (
                web(),
                Some(ObjectStatus::new(Status::NotFound, "Resource not found")),
            ),
            (
                crd(),
                Some(ObjectStatus::new(Status::Current, "CRD is established")),
            ),
        ]);
        assert!(board.verdict(false).is_none());
        let Some(Err(err)) = board.verdict(true) else {
            panic!("NotFound after the grace ends the wait")
        };
        assert_eq!(
            err.to_string(),
            "failed early due to missing resources: [Deployment/apps/web: NotFound: Resource not found]"
        );
    }

    #[test]
    fn unread_objects_keep_the_wait_going_and_show_as_unknown() {
        let board = board(&[
            (web(), None),
            (
                crd(),
                Some(ObjectStatus::new(Status::Current, "CRD is established")),
            ),
        ]);
        assert!(board.verdict(true).is_none());
        assert_eq!(
            HealthError::Timeout(board.not_current()).to_string(),
            "timeout waiting for: [Deployment/apps/web: Unknown: not read yet]"
        );
    }

    #[test]
    fn a_deleted_job_with_ttl_counts_as_done() {
        let mut job = WaitTarget::new("batch/v1", "Job", Some("apps"), "migrate");
        job.absent_is_success = true;
        let mut board = board(&[(job, None)]);
        board.missing(0);
        let Some(Ok(report)) = board.verdict(true) else {
            panic!("absence of a TTL job is success")
        };
        assert_eq!(report.objects[0].status.status, Status::Current);
    }

    #[test]
    fn a_failed_check_says_how_long_it_ran_before_why() {
        let report = ObjectReport {
            target: web(),
            status: ObjectStatus::new(
                Status::InProgress,
                "Deployment does not have minimum availability.",
            ),
        };
        let failed = HealthCheckFailed {
            elapsed: Duration::from_millis(30_500),
            error: HealthError::Timeout(vec![report]),
        };
        assert_eq!(
            failed.to_string(),
            "health check failed after 30.5s: timeout waiting for: [Deployment/apps/web: InProgress: \
             Deployment does not have minimum availability.]"
        );
        assert_eq!(failed.reason(), "HealthCheckFailed");
    }

    #[test]
    fn cancellation_maps_to_its_own_reason() {
        assert_eq!(HealthError::Canceled.reason(), "HealthCheckCanceled");
    }

    #[tokio::test]
    async fn a_cel_rule_over_its_limits_fails_the_object_naming_its_field() {
        // A string doubled 24 times. Before: it was built to the end (with 50 doublings the
        // process aborted on memory) and judged the Deployment Current.
        let doubling = format!("['ab']{}.all(s, size(s) > 0)", ".map(s, s + s)".repeat(24));
        let rule = |current: &str| CustomHealthCheck {
            api_version: "apps/v1".into(),
            kind: Some("Deployment".into()),
            current: current.into(),
            in_progress: None,
            failed: None,
        };
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        let exprs = cel::compile(&[rule(&doubling)]).await.unwrap();
        assert_eq!(
            judge(&deployment, &exprs, false).await,
            ObjectStatus::new(
                Status::Failed,
                "healthCheckExprs[0].current: evaluation exceeded its cost limit (16 MiB of values built or copied)"
            )
        );
        // An expression that fails on this object may hold on the next one: Unknown meanwhile.
        let exprs = cel::compile(&[rule("status.readyReplicas > 0")]).await.unwrap();
        assert_eq!(judge(&deployment, &exprs, false).await.status, Status::Unknown);
    }
}
