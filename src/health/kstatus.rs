//! The status of one live object, computed from the object alone, with the rules of kstatus
//! (`fluxcd/cli-utils` `pkg/kstatus/status`) and Flux's Job reader, plus stricter rules for
//! custom resources: a CRD with a status subresource promises a controller that writes
//! status, so a custom resource without status (or with a stale Ready) is not done yet.

use std::fmt;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kustomize::gvk::split_api_version;
use serde_json::Value;

/// kstatus statuses, spelled as kstatus spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    InProgress,
    Failed,
    Current,
    Terminating,
    NotFound,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Current => "Current",
            Status::Terminating => "Terminating",
            Status::NotFound => "NotFound",
            Status::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status with the reason a person needs to act on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectStatus {
    pub status: Status,
    pub message: String,
}

impl ObjectStatus {
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// How long a pending pod may stay unschedulable before kstatus calls it Failed.
const SCHEDULE_WINDOW: SignedDuration = SignedDuration::from_secs(15);

/// The status of `object` (a full live object, status included), now.
pub(crate) fn compute(object: &Value) -> ObjectStatus {
    compute_at(object, Timestamp::now())
}

/// [`compute`] for a custom resource whose CRD declares a status subresource: a controller is
/// expected to write its status, so an object without any status has not been reconciled yet
/// and is InProgress, where kstatus would call it Current and a health check would pass before
/// the object was ever reconciled.
pub(crate) fn compute_expecting_status(object: &Value) -> ObjectStatus {
    let computed = compute(object);
    let no_status = object
        .get("status")
        .is_none_or(|s| s.is_null() || s.as_object().is_some_and(|m| m.is_empty()));
    if computed.status == Status::Current && no_status {
        return in_progress("Waiting for the controller to report status");
    }
    computed
}

/// [`compute`] at a given instant; only the Pod scheduling window depends on time.
pub(crate) fn compute_at(object: &Value, now: Timestamp) -> ObjectStatus {
    if let Some(generic) = generic(object) {
        return generic;
    }
    let kind = str_at(object, &["kind"]).unwrap_or_default();
    let api_version = str_at(object, &["apiVersion"]).unwrap_or_default();
    let (group, _) = split_api_version(api_version);
    match (group, kind) {
        ("", "Service") => service(object),
        ("", "Pod") => pod(object, now),
        ("", "PersistentVolumeClaim") => pvc(object),
        ("", "Namespace") => namespace(object),
        ("", "Secret" | "ConfigMap") | ("batch", "CronJob") => current("Resource is always ready"),
        ("apps" | "extensions", "Deployment") => deployment(object),
        ("apps", "StatefulSet") => stateful_set(object),
        ("apps" | "extensions", "DaemonSet") => daemon_set(object),
        ("apps" | "extensions", "ReplicaSet") => replica_set(object),
        ("batch", "Job") => job(object),
        ("policy", "PodDisruptionBudget") => current("AllowedDisruptions has been computed."),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(object),
        _ => other(object, kind),
    }
}

/// Whether a write of the spec of an object of this kind leaves it InProgress when the write
/// returns: its rule reads a status the cluster writes afterwards (a workload's observed
/// generation and replicas, a Pod's or a Job's progress, a claim's binding).
pub(crate) fn rolls_out(api_version: &str, kind: &str) -> bool {
    let (group, _) = split_api_version(api_version);
    matches!(
        (group, kind),
        ("", "Pod" | "PersistentVolumeClaim")
            | ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
            | ("batch", "Job")
    )
}

/// Whether the desired `object` is Current as soon as its write returns: the rule of its kind
/// reads nothing the cluster writes afterwards, so a wait needs no watch of it. A LoadBalancer
/// Service is left to the watch, its address comes later.
pub(crate) fn current_as_applied(object: &Value) -> bool {
    let api_version = str_at(object, &["apiVersion"]).unwrap_or_default();
    let (group, _) = split_api_version(api_version);
    match (group, str_at(object, &["kind"]).unwrap_or_default()) {
        ("", "Service") => str_at(object, &["spec", "type"]) != Some("LoadBalancer"),
        ("", "ConfigMap" | "Secret" | "ServiceAccount" | "LimitRange")
        | ("rbac.authorization.k8s.io", "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding")
        | ("networking.k8s.io", "Ingress" | "IngressClass" | "NetworkPolicy")
        | ("scheduling.k8s.io", "PriorityClass")
        | ("batch", "CronJob")
        | ("policy", "PodDisruptionBudget") => true,
        _ => false,
    }
}

/// Rules for every object: deletion, unobserved generation, and the kstatus conditions.
fn generic(object: &Value) -> Option<ObjectStatus> {
    if str_at(object, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_empty()) {
        return Some(ObjectStatus::new(
            Status::Terminating,
            "Resource scheduled for deletion",
        ));
    }
    let kind = str_at(object, &["kind"]).unwrap_or_default();
    if let (Some(generation), Some(observed)) = (
        int_at(object, &["metadata", "generation"]),
        int_at(object, &["status", "observedGeneration"]),
    ) && generation != observed
    {
        return Some(in_progress(format!(
            "{kind} generation is {generation}, but latest observed generation is {observed}"
        )));
    }
    conditions(object)
        .into_iter()
        .find_map(|c| match (c.type_, c.status) {
            ("Reconciling", "True") => Some(in_progress(c.message)),
            ("Stalled", "True") => Some(ObjectStatus::new(Status::Failed, c.message)),
            _ => None,
        })
}

fn deployment(object: &Value) -> ObjectStatus {
    // Without a progress deadline the controller never sets Progressing, so do not wait for it.
    let mut progressing =
        int_at(object, &["spec", "progressDeadlineSeconds"]).is_none_or(|s| s == i64::from(i32::MAX));
    let mut available = false;
    for c in conditions(object) {
        match c.type_ {
            "Progressing" if c.reason == "ProgressDeadlineExceeded" => {
                return ObjectStatus::new(Status::Failed, "Progress deadline exceeded");
            }
            "Progressing" if c.status == "True" && c.reason == "NewReplicaSetAvailable" => progressing = true,
            "Available" if c.status == "True" => available = true,
            _ => {}
        }
    }
    let spec = int_or(object, &["spec", "replicas"], 1);
    let replicas = int_or(object, &["status", "replicas"], 0);
    let updated = int_or(object, &["status", "updatedReplicas"], 0);
    let ready = int_or(object, &["status", "readyReplicas"], 0);
    let available_replicas = int_or(object, &["status", "availableReplicas"], 0);
    let rollout = short_of("Replicas", replicas, spec)
        .or_else(|| short_of("Updated", updated, spec))
        .or_else(|| pending_termination(replicas, spec))
        .or_else(|| short_of("Available", available_replicas, updated))
        .or_else(|| short_of("Ready", ready, spec));
    if let Some(status) = rollout {
        return status;
    }
    if !progressing {
        return in_progress("ReplicaSet not Available");
    }
    if !available {
        return in_progress("Deployment not Available");
    }
    current(format!("Deployment is available. Replicas: {replicas}"))
}

fn stateful_set(object: &Value) -> ObjectStatus {
    if str_at(object, &["spec", "updateStrategy", "type"]) == Some("OnDelete") {
        return current("StatefulSet is using the ondelete update strategy");
    }
    let spec = int_or(object, &["spec", "replicas"], 1);
    let ready = int_or(object, &["status", "readyReplicas"], 0);
    let current_replicas = int_or(object, &["status", "currentReplicas"], 0);
    let updated = int_or(object, &["status", "updatedReplicas"], 0);
    let replicas = int_or(object, &["status", "replicas"], 0);
    let scaling = short_of("Replicas", replicas, spec)
        .or_else(|| short_of("Ready", ready, spec))
        .or_else(|| pending_termination(replicas, spec));
    if let Some(status) = scaling {
        return status;
    }
    if let Some(partition) = int_at(object, &["spec", "updateStrategy", "rollingUpdate", "partition"]) {
        return short_of("updated", updated, spec - partition)
            .unwrap_or_else(|| current(format!("Partition rollout complete. updated: {updated}")));
    }
    if let Some(status) = short_of("current", current_replicas, spec) {
        return status;
    }
    if str_at(object, &["status", "currentRevision"]) != str_at(object, &["status", "updateRevision"]) {
        return in_progress("Waiting for updated revision to match current");
    }
    current(format!(
        "All replicas scheduled as expected. Replicas: {replicas}"
    ))
}

fn daemon_set(object: &Value) -> ObjectStatus {
    // The controller always writes observedGeneration, so its absence means "not seen yet".
    let kind = "DaemonSet";
    if int_at(object, &["metadata", "generation"]).is_none() {
        return in_progress(format!("{kind} metadata.generation not found"));
    }
    if int_at(object, &["status", "observedGeneration"]).is_none() {
        return in_progress(format!("{kind} status.observedGeneration not found"));
    }
    let Some(desired) = int_at(object, &["status", "desiredNumberScheduled"]) else {
        return in_progress("Missing .status.desiredNumberScheduled");
    };
    let scheduled = int_or(object, &["status", "currentNumberScheduled"], 0);
    let updated = int_or(object, &["status", "updatedNumberScheduled"], 0);
    let available = int_or(object, &["status", "numberAvailable"], 0);
    let ready = int_or(object, &["status", "numberReady"], 0);
    short_of("Current", scheduled, desired)
        .or_else(|| short_of("Updated", updated, desired))
        .or_else(|| short_of("Available", available, desired))
        .or_else(|| short_of("Ready", ready, desired))
        .unwrap_or_else(|| current(format!("All replicas scheduled as expected. Replicas: {desired}")))
}

fn replica_set(object: &Value) -> ObjectStatus {
    if conditions(object)
        .iter()
        .any(|c| c.type_ == "ReplicaFailure" && c.status == "True")
    {
        return in_progress("Replica Failure condition. Check Pods");
    }
    let spec = int_or(object, &["spec", "replicas"], 1);
    let replicas = int_or(object, &["status", "replicas"], 0);
    let ready = int_or(object, &["status", "readyReplicas"], 0);
    let available = int_or(object, &["status", "availableReplicas"], 0);
    let labelled = int_or(object, &["status", "fullyLabeledReplicas"], 0);
    short_of("Labelled", labelled, spec)
        .or_else(|| short_of("Available", available, spec))
        .or_else(|| short_of("Ready", ready, spec))
        .or_else(|| pending_termination(replicas, spec))
        .unwrap_or_else(|| current(format!("ReplicaSet is available. Replicas: {replicas}")))
}

/// Flux's Job reader: unlike upstream kstatus, a running Job is not yet Current.
fn job(object: &Value) -> ObjectStatus {
    let parallelism = int_or(object, &["spec", "parallelism"], 1);
    let completions = int_or(object, &["spec", "completions"], parallelism);
    let succeeded = int_or(object, &["status", "succeeded"], 0);
    let active = int_or(object, &["status", "active"], 0);
    let failed = int_or(object, &["status", "failed"], 0);
    for c in conditions(object) {
        match (c.type_, c.status) {
            ("Complete", "True") => {
                return current(format!("Job Completed. succeeded: {succeeded}/{completions}"));
            }
            ("Failed", "True") => {
                return ObjectStatus::new(
                    Status::Failed,
                    format!("Job Failed. failed: {failed}/{completions}"),
                );
            }
            ("Suspended", "True") => return current("Job is suspended"),
            _ => {}
        }
    }
    if bool_at(object, &["spec", "suspend"]) {
        return current("Job is suspended");
    }
    if str_at(object, &["status", "startTime"]).is_none_or(str::is_empty) {
        return in_progress("Job not started");
    }
    in_progress(format!(
        "Job in progress. success:{succeeded}, active: {active}, failed: {failed}"
    ))
}

fn pod(object: &Value, now: Timestamp) -> ObjectStatus {
    let conditions = conditions(object);
    match str_at(object, &["status", "phase"]).unwrap_or_default() {
        "Succeeded" => current("Pod has completed successfully"),
        "Failed" => current("Pod has completed, but not successfully"),
        "Running" => {
            if conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
            {
                return current("Pod is Ready");
            }
            let crash_looping: Vec<&str> = object
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|cs| {
                    cs.pointer("/state/waiting/reason").and_then(Value::as_str) == Some("CrashLoopBackOff")
                })
                .filter_map(|cs| cs.get("name").and_then(Value::as_str))
                .collect();
            if !crash_looping.is_empty() {
                return ObjectStatus::new(
                    Status::Failed,
                    format!("Containers in CrashLoop state: {}", crash_looping.join(",")),
                );
            }
            in_progress("Pod is running but is not Ready")
        }
        "Pending" => {
            let unschedulable = conditions
                .iter()
                .any(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason == "Unschedulable");
            if !unschedulable {
                return in_progress("Pod is in the Pending phase");
            }
            let created =
                str_at(object, &["metadata", "creationTimestamp"]).and_then(|t| t.parse::<Timestamp>().ok());
            match created {
                Some(created) if now.duration_since(created) <= SCHEDULE_WINDOW => {
                    in_progress("Pod has not been scheduled")
                }
                _ => ObjectStatus::new(Status::Failed, "Pod could not be scheduled"),
            }
        }
        "" => in_progress("Pod phase not available"),
        phase => ObjectStatus::new(Status::Unknown, format!("unknown phase {phase}")),
    }
}

fn pvc(object: &Value) -> ObjectStatus {
    match str_at(object, &["status", "phase"]) {
        Some("Bound") => current("PVC is Bound"),
        phase => in_progress(format!("PVC is not Bound. phase: {}", phase.unwrap_or("unknown"))),
    }
}

fn service(object: &Value) -> ObjectStatus {
    let load_balancer = str_at(object, &["spec", "type"]) == Some("LoadBalancer");
    if load_balancer && str_at(object, &["spec", "clusterIP"]).is_none_or(str::is_empty) {
        return in_progress("ClusterIP not set. Service type: LoadBalancer");
    }
    current("Service is ready")
}

fn crd(object: &Value) -> ObjectStatus {
    for c in conditions(object) {
        match (c.type_, c.status) {
            ("NamesAccepted", "False") => return ObjectStatus::new(Status::Failed, c.message),
            ("Established", "False") if c.reason != "Installing" => {
                return ObjectStatus::new(Status::Failed, c.message);
            }
            ("Established", "True") => return current("CRD is established"),
            _ => {}
        }
    }
    in_progress("Install in progress")
}

/// kstatus has no Namespace rule (deletion is caught by the generic rules); the phase also
/// says Terminating while content is being removed.
fn namespace(object: &Value) -> ObjectStatus {
    if str_at(object, &["status", "phase"]) == Some("Terminating") {
        return ObjectStatus::new(Status::Terminating, "Namespace is terminating");
    }
    current("Resource is current")
}

/// Kinds without their own rule, custom resources above all: the `Ready` condition decides.
/// Stricter than Flux: a Ready condition written for an older generation is stale.
fn other(object: &Value, kind: &str) -> ObjectStatus {
    let Some(ready) = conditions(object).into_iter().find(|c| c.type_ == "Ready") else {
        return current("Resource is current");
    };
    if let (Some(generation), Some(observed)) = (
        int_at(object, &["metadata", "generation"]),
        ready.observed_generation,
    ) && generation != observed
    {
        return in_progress(format!(
            "{kind} generation is {generation}, but its Ready condition observed generation {observed}"
        ));
    }
    match ready.status {
        "True" => current(if ready.message.is_empty() {
            "Resource is Ready"
        } else {
            ready.message
        }),
        _ if ready.message.is_empty() => in_progress(format!("Ready: {}", ready.status)),
        _ => in_progress(ready.message),
    }
}

fn current(message: impl Into<String>) -> ObjectStatus {
    ObjectStatus::new(Status::Current, message)
}

fn in_progress(message: impl Into<String>) -> ObjectStatus {
    ObjectStatus::new(Status::InProgress, message)
}

/// A workload whose `have` count is short of the `want` count is still rolling out.
fn short_of(label: &str, have: i64, want: i64) -> Option<ObjectStatus> {
    (want > have).then(|| in_progress(format!("{label}: {have}/{want}")))
}

/// A workload running more replicas than its spec asks for waits for the surplus to go.
fn pending_termination(replicas: i64, spec: i64) -> Option<ObjectStatus> {
    (replicas > spec).then(|| in_progress(format!("Pending termination: {}", replicas - spec)))
}

/// A `status.conditions[]` entry, borrowed from the object; absent strings are empty.
struct Condition<'a> {
    type_: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
    observed_generation: Option<i64>,
}

fn conditions(object: &Value) -> Vec<Condition<'_>> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| Condition {
            type_: field(c, "type"),
            status: field(c, "status"),
            reason: field(c, "reason"),
            message: field(c, "message"),
            observed_generation: c.get("observedGeneration").and_then(Value::as_i64),
        })
        .collect()
}

fn field<'a>(condition: &'a Value, name: &str) -> &'a str {
    condition.get(name).and_then(Value::as_str).unwrap_or_default()
}

fn at<'a>(object: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(object, |value, key| value.get(key))
}

fn str_at<'a>(object: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(object, path).and_then(Value::as_str)
}

fn int_at(object: &Value, path: &[&str]) -> Option<i64> {
    at(object, path).and_then(Value::as_i64)
}

fn int_or(object: &Value, path: &[&str], default: i64) -> i64 {
    int_at(object, path).unwrap_or(default)
}

fn bool_at(object: &Value, path: &[&str]) -> bool {
    at(object, path).and_then(Value::as_bool).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_current_as_applied_is_current_as_its_create_returns() {
        let created = |api_version: &str, kind: &str, spec: serde_json::Value| {
            serde_json::json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"name": "x", "namespace": "apps", "generation": 1}, "spec": spec})
        };
        let settled = [
            ("v1", "ConfigMap"),
            ("v1", "Secret"),
            ("v1", "ServiceAccount"),
            ("v1", "LimitRange"),
            ("v1", "Service"),
            ("rbac.authorization.k8s.io/v1", "Role"),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ("networking.k8s.io/v1", "Ingress"),
            ("networking.k8s.io/v1", "NetworkPolicy"),
            ("scheduling.k8s.io/v1", "PriorityClass"),
            ("batch/v1", "CronJob"),
            ("policy/v1", "PodDisruptionBudget"),
        ];
        for (api_version, kind) in settled {
            let object = created(api_version, kind, serde_json::json!({}));
            assert!(current_as_applied(&object), "{kind}");
            assert_eq!(compute(&object).status, Status::Current, "{kind}");
        }
        let balanced = created("v1", "Service", serde_json::json!({"type": "LoadBalancer"}));
        assert!(!current_as_applied(&balanced));
        for (api_version, kind) in [
            ("apps/v1", "Deployment"),
            ("batch/v1", "Job"),
            ("v1", "PersistentVolumeClaim"),
            ("v1", "Namespace"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("example.com/v1", "Widget"),
        ] {
            assert!(
                !current_as_applied(&created(api_version, kind, serde_json::json!({}))),
                "{kind}"
            );
        }
    }

    #[test]
    fn a_kind_that_rolls_out_is_in_progress_as_its_create_returns() {
        // what a create returns: a first generation, no status yet
        let created = |api_version: &str, kind: &str| {
            serde_json::json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"name": "x", "namespace": "apps", "generation": 1}, "spec": {}})
        };
        for (api_version, kind) in [
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("apps/v1", "ReplicaSet"),
            ("batch/v1", "Job"),
            ("v1", "Pod"),
            ("v1", "PersistentVolumeClaim"),
        ] {
            assert!(rolls_out(api_version, kind), "{kind}");
            let status = compute(&created(api_version, kind)).status;
            assert_ne!(status, Status::Current, "a created {kind} is not Current yet");
        }
        for (api_version, kind) in [
            ("v1", "ConfigMap"),
            ("v1", "Secret"),
            ("v1", "Service"),
            ("v1", "ServiceAccount"),
            ("batch/v1", "CronJob"),
        ] {
            assert!(!rolls_out(api_version, kind), "{kind}");
            let status = compute(&created(api_version, kind)).status;
            assert_eq!(status, Status::Current, "a created {kind} is Current at once");
        }
    }

    #[derive(serde::Deserialize)]
    struct Case {
        case: String,
        now: Option<String>,
        expect: Expect,
        object: Value,
    }

    #[derive(serde::Deserialize)]
    struct Expect {
        status: String,
        message: String,
    }

    fn check(fixture: &str, yaml: &str) {
        let cases: Vec<Case> = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{fixture}: {e}"));
        assert!(!cases.is_empty(), "{fixture} has no cases");
        let failures: Vec<String> = cases
            .iter()
            .filter_map(|case| {
                let now = case
                    .now
                    .as_deref()
                    .map_or_else(Timestamp::now, |t| t.parse().unwrap());
                let got = compute_at(&case.object, now);
                let ok = got.status.as_str() == case.expect.status && got.message == case.expect.message;
                (!ok).then(|| {
                    format!(
                        "{fixture}: {}\n  expected {}: {}\n  got      {}: {}",
                        case.case, case.expect.status, case.expect.message, got.status, got.message
                    )
                })
            })
            .collect();
        assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    }

    #[test]
    fn workloads() {
        check("workloads.yaml", include_str!("testdata/workloads.yaml"));
    }

    #[test]
    fn jobs_and_pods() {
        check(
            "batch-and-pods.yaml",
            include_str!("testdata/batch-and-pods.yaml"),
        );
    }

    #[test]
    fn core_kinds() {
        check("core.yaml", include_str!("testdata/core.yaml"));
    }

    #[test]
    fn a_custom_resource_expected_to_report_status_waits_for_it() {
        let fresh = serde_json::json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "podinfo", "namespace": "apps", "generation": 1}, "spec": {"interval": "5m"}
        });
        assert_eq!(
            compute(&fresh).status,
            Status::Current,
            "kstatus: no conditions means Current"
        );
        assert_eq!(
            compute_expecting_status(&fresh),
            ObjectStatus::new(Status::InProgress, "Waiting for the controller to report status")
        );
        let mut empty = fresh.clone();
        empty["status"] = serde_json::json!({});
        assert_eq!(compute_expecting_status(&empty).status, Status::InProgress);
        let mut reported = fresh.clone();
        reported["status"] = serde_json::json!({"observedGeneration": 1});
        assert_eq!(
            compute_expecting_status(&reported),
            ObjectStatus::new(Status::Current, "Resource is current")
        );
        let mut deleting = fresh;
        deleting["metadata"]["deletionTimestamp"] = serde_json::json!("2026-11-29T15:50:00Z");
        assert_eq!(compute_expecting_status(&deleting).status, Status::Terminating);
    }

    #[test]
    fn custom_resources() {
        check("custom.yaml", include_str!("testdata/custom.yaml"));
    }
}
