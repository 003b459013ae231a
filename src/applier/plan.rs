//! The pure part of planning: the prepared desired object, what is decided for it, the facts
//! about the whole apply that classify dry-run failures, and the payload of a write.

use std::collections::HashSet;

use kube::api::ApiResource;
use kube::core::Status;
use serde_json::Value;

use super::diff::remove_pointers;
use super::fingerprint::live_print;
use super::http::status_of;
use super::managed::owned_by_other_applier;
use super::stage::Stage;
use super::{Action, FailureKind, ObjectError};
use crate::api::inventory::ObjectRef;
use crate::kube_ext::ResolvedKind;

/// A prepared object: normalized, resolved, placed.
#[derive(Clone)]
pub(super) struct Desired {
    pub(super) obj: Value,
    pub(super) object: ObjectRef,
    pub(super) api_version: String,
    pub(super) kind: ResolvedKind,
    pub(super) stage: Stage,
    /// Fingerprint of `obj`, for the fast path.
    pub(super) print: String,
}

impl Desired {
    pub(super) fn subject(&self) -> String {
        self.object.to_string()
    }
}

/// What happened to one object in this run: its action and the print of its live metadata
/// afterwards (none when it does not exist).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Outcome {
    pub(super) action: Action,
    pub(super) live_print: Option<String>,
}

impl Outcome {
    /// The outcome of an object nothing is written to (skipped or unchanged).
    pub(super) fn settled(action: Action, live: Option<&Value>) -> Self {
        Self {
            action,
            live_print: live.map(|l| live_print(&l["metadata"])),
        }
    }
}

/// What planning knows of an object's live state before it sends a request about it.
#[derive(Debug)]
pub(super) enum Known {
    /// Read already, from a LIST of the objects we own.
    Read(Value),
    /// Absent from a LIST of the objects we own, or from an earlier plan of this apply: most
    /// likely it does not exist, though it may exist without our labels; the dry-run's answer
    /// tells, so no read is sent first.
    Unlisted,
    /// Nothing known: read it first.
    Unread,
}

impl Known {
    /// What a deferred plan leaves known for the next one.
    pub(super) fn after_deferral(exists: bool) -> Self {
        if exists { Known::Unread } else { Known::Unlisted }
    }
}

/// Whether a server-side dry-run answered with a stored object: only those carry a
/// resourceVersion, a dry-run create has none.
pub(super) fn answers_stored(merged: &Value) -> bool {
    merged
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|rv| !rv.is_empty())
}

/// Whether a failed server-side apply proves the object does not exist: an apply creates what
/// is missing, so NotFound means its namespace or its kind is missing, and with it the object.
pub(super) fn proves_absent(err: &kube::Error) -> bool {
    status_of(err).is_some_and(|s| s.code == 404)
}

/// What planning decided for one object.
pub(super) enum Plan {
    /// Skipped or unchanged: nothing to write.
    Settled(Outcome),
    Write(Write),
    /// Depends on something in this apply that does not exist yet; `exists` tells whether the
    /// object itself is already there.
    Deferred {
        error: ObjectError,
        exists: bool,
    },
}

/// A planned write.
pub(super) enum Write {
    /// Server-side apply: a create when there is no `live` object. `merged` is the dry-run's
    /// answer, `ignored` the `spec.ignore` paths that apply to it.
    Apply {
        live: Option<Value>,
        ignored: Vec<String>,
        merged: Value,
    },
    /// Immutable change with force: delete, then create.
    Recreate,
}

impl Write {
    /// The action this write reports.
    pub(super) fn action(&self) -> Action {
        match self {
            Write::Apply { live: Some(_), .. } => Action::Configured,
            Write::Apply { live: None, .. } | Write::Recreate => Action::Created,
        }
    }

    /// What is sent: for an update, `desired` with its ignored paths left to the live object.
    pub(super) fn payload(&self, desired: &Value) -> Value {
        match self {
            Write::Apply {
                live: Some(live),
                ignored,
                ..
            } => payload_with_ignored(desired, live, ignored),
            Write::Apply { live: None, .. } | Write::Recreate => desired.clone(),
        }
    }
}

/// Facts about the whole apply that classify dry-run failures.
pub(super) struct Batch {
    pub(super) namespaces: HashSet<String>,
    /// `group/Kind` served by CRDs in this apply.
    pub(super) pending_kinds: HashSet<String>,
    /// `namespace/name` of the ServiceAccounts in this apply.
    pub(super) service_accounts: HashSet<String>,
}

impl Batch {
    pub(super) fn of(desired: &[Desired]) -> Self {
        let core = |d: &&Desired, kind: &str| d.object.kind == kind && d.object.group.is_empty();
        Self {
            namespaces: desired
                .iter()
                .filter(|d| core(d, "Namespace"))
                .map(|d| d.object.name.clone())
                .collect(),
            pending_kinds: pending_kinds(desired),
            service_accounts: desired
                .iter()
                .filter(|d| core(d, "ServiceAccount"))
                .map(|d| format!("{}/{}", d.object.namespace, d.object.name))
                .collect(),
        }
    }
}

/// Why a server-side dry-run failed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum DryRunFailure {
    /// Only because something this apply creates does not exist yet: retried after the rest.
    Deferred,
    /// A change of this immutable field of an existing object: recreated when forced.
    Immutable(String),
    /// Fails now.
    Failed(FailureKind),
}

/// Classifies a failed dry-run of `desired`; `exists` tells whether the object is live.
pub(super) fn classify_dry_run(
    err: &kube::Error,
    desired: &Desired,
    batch: &Batch,
    exists: bool,
) -> DryRunFailure {
    let Some(status) = status_of(err) else {
        return DryRunFailure::Failed(FailureKind::Api);
    };
    if missing_dependency(status, desired, batch) {
        return DryRunFailure::Deferred;
    }
    if let Some(field) = immutable_field(status).filter(|_| exists) {
        return DryRunFailure::Immutable(field);
    }
    // a namespace or ServiceAccount nobody in this apply creates may still come from elsewhere
    // (another Kustomization): worth a retry, not a fix of the manifest
    if namespace_missing(status) || missing_service_account(status).is_some() {
        DryRunFailure::Failed(FailureKind::MissingDependency)
    } else {
        DryRunFailure::Failed(transport_kind(err))
    }
}

/// The failure kind of an API error that is not about the manifest.
pub(super) fn transport_kind(err: &kube::Error) -> FailureKind {
    match status_of(err) {
        Some(s) if s.code == 409 => FailureKind::Conflict,
        Some(s) if matches!(s.code, 400 | 403 | 404 | 422) => FailureKind::Invalid,
        _ => FailureKind::Api,
    }
}

/// Whether a LIST that failed so is worth replacing with a read of each object: only when the
/// API server refused the LIST itself (an identity allowed to get but not to list, a kind that
/// cannot be listed). Any other failure (unreachable, overloaded, timed out) would fail each
/// read the same way, one request per object.
pub(super) fn list_refused(err: &kube::Error) -> bool {
    // Forbidden, Not Found, Method Not Allowed.
    status_of(err).is_some_and(|s| matches!(s.code, 403..=405))
}

/// The field named by an immutable-field error: from the status causes, or the message. Only
/// errors that say "immutable" count (not every 409/422 as in Flux).
fn immutable_field(status: &Status) -> Option<String> {
    let mentions = |m: &str| m.to_ascii_lowercase().contains("immutable");
    if let Some(cause) = status
        .details
        .as_ref()
        .and_then(|d| d.causes.iter().find(|c| mentions(&c.message)))
    {
        return Some(if cause.field.is_empty() {
            cause.message.clone()
        } else {
            cause.field.clone()
        });
    }
    if !mentions(&status.message) {
        return None;
    }
    // "<Kind> \"name\" is invalid: spec.selector: Invalid value: ...: field is immutable"
    let field = status
        .message
        .split(": ")
        .nth(1)
        .filter(|f| !f.contains(' '))
        .unwrap_or("(unknown field)");
    Some(field.to_string())
}

fn namespace_missing(status: &Status) -> bool {
    status.code == 404 && status.details.as_ref().is_some_and(|d| d.kind == "namespaces")
}

/// The ServiceAccount (`namespace/name`) the ServiceAccount admission plugin could not find for
/// a Pod: "pods \"p\" is forbidden: error looking up service account ns/sa: serviceaccount
/// \"sa\" not found".
fn missing_service_account(status: &Status) -> Option<&str> {
    if status.code != 403 || !status.message.ends_with("not found") {
        return None;
    }
    let (_, rest) = status.message.split_once("error looking up service account ")?;
    rest.split_once(':').map(|(sa, _)| sa)
}

/// True when a dry-run failed only because something this apply creates does not exist yet.
/// A namespace's `default` ServiceAccount counts as created by this apply: the
/// serviceaccount-controller adds it to every new namespace shortly after.
fn missing_dependency(status: &Status, desired: &Desired, batch: &Batch) -> bool {
    let msg = status.message.to_ascii_lowercase();
    let kind_key = format!("{}/{}", desired.kind.resource.group, desired.kind.resource.kind);
    (namespace_missing(status) && batch.namespaces.contains(&desired.object.namespace))
        || (status.code == 404 && batch.pending_kinds.contains(&kind_key))
        || msg.contains("failed calling webhook")
        || missing_service_account(status)
            .is_some_and(|sa| sa.ends_with("/default") || batch.service_accounts.contains(sa))
}

/// Ignored paths of an object that is applied anyway: a field another Apply manager owns is
/// left to it (stripped); otherwise the live value is kept (adopted). Creates are unmodified.
fn payload_with_ignored(desired: &Value, live: &Value, ignored: &[String]) -> Value {
    let mut payload = desired.clone();
    let mut stripped = Vec::new();
    for path in ignored {
        let (want, have) = (desired.pointer(path), live.pointer(path));
        if want == have {
            continue;
        }
        if owned_by_other_applier(live, path) || have.is_none() {
            stripped.push(path.clone());
        } else if let (Some(slot), Some(have)) = (payload.pointer_mut(path), have) {
            *slot = have.clone();
        }
    }
    // after the adoptions, which name elements by their index in `desired`
    remove_pointers(&mut payload, &stripped);
    payload
}

/// `group/Kind` of every kind served by a CRD in the apply.
fn pending_kinds(desired: &[Desired]) -> HashSet<String> {
    desired
        .iter()
        .filter(|d| d.object.kind == "CustomResourceDefinition")
        .filter_map(|d| {
            let group = d.obj.pointer("/spec/group")?.as_str()?;
            let kind = d.obj.pointer("/spec/names/kind")?.as_str()?;
            Some(format!("{group}/{kind}"))
        })
        .collect()
}

/// The kind as served by a CRD of this apply, for custom resources applied with their CRD.
pub(super) fn crd_serving(crds: &[&Value], api_version: &str, kind: &str) -> Option<ResolvedKind> {
    let (group, version) = api_version.split_once('/')?;
    crds.iter().find_map(|crd| {
        let spec = crd.get("spec")?;
        let served = spec
            .get("versions")?
            .as_array()?
            .iter()
            .any(|v| v["name"] == version && v["served"] != false);
        (spec["group"] == group && spec.pointer("/names/kind")?.as_str() == Some(kind) && served).then(|| {
            ResolvedKind {
                resource: ApiResource {
                    group: group.into(),
                    version: version.into(),
                    api_version: api_version.into(),
                    kind: kind.into(),
                    plural: spec
                        .pointer("/names/plural")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                },
                namespaced: spec["scope"] != "Cluster",
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};
    use kustomize::gvk::split_api_version;
    use serde_json::json;

    #[test]
    fn a_dry_run_shows_an_object_absent_by_a_missing_resource_version_or_not_found() {
        // the API server's answers: a dry-run create carries no resourceVersion, an update does
        let created =
            json!({"metadata": {"name": "c", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"}});
        assert!(!answers_stored(&created));
        assert!(!answers_stored(&json!({"metadata": {"resourceVersion": ""}})));
        assert!(answers_stored(
            &json!({"metadata": {"name": "c", "resourceVersion": "211"}})
        ));

        let namespace_missing = kube::Error::Api(Box::new(status(
            404,
            "NotFound",
            "namespaces \"x\" not found",
            vec![],
        )));
        assert!(proves_absent(&namespace_missing));
        let invalid = kube::Error::Api(Box::new(status(
            422,
            "Invalid",
            "Service \"s\" is invalid",
            vec![],
        )));
        assert!(!proves_absent(&invalid), "an invalid object may exist");

        assert!(matches!(Known::after_deferral(false), Known::Unlisted));
        assert!(matches!(Known::after_deferral(true), Known::Unread));
    }

    #[test]
    fn only_a_refused_list_is_replaced_by_reads_of_each_object() {
        let answered = |code, reason| kube::Error::Api(Box::new(status(code, reason, "list", vec![])));
        assert!(
            list_refused(&answered(403, "Forbidden")),
            "get may be allowed where list is not"
        );
        assert!(list_refused(&answered(405, "MethodNotAllowed")));
        for (code, reason) in [
            (500, "InternalError"),
            (503, "ServiceUnavailable"),
            (429, "TooManyRequests"),
        ] {
            assert!(
                !list_refused(&answered(code, reason)),
                "{code}: each read would fail alike"
            );
        }
        let unreachable = kube::Error::Service("connection refused".into());
        assert!(!list_refused(&unreachable));
    }

    fn status(code: u16, reason: &str, message: &str, causes: Vec<StatusCause>) -> Status {
        let mut s = Status::failure(message, reason).with_code(code);
        s.details = Some(StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        });
        s
    }

    // Message shapes from the API server (apimachinery field.Forbidden / ValidateImmutableField).
    #[test]
    fn only_errors_that_say_immutable_are_immutable() {
        let cause = StatusCause {
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: ...: field is immutable".into(),
            field: "spec.selector".into(),
        };
        let cases = [
            (
                status(
                    422,
                    "Invalid",
                    "Deployment.apps \"web\" is invalid: spec.selector: Invalid value: ...: field is immutable",
                    vec![cause],
                ),
                Some("spec.selector"),
            ),
            (
                status(
                    422,
                    "Invalid",
                    "Job.batch \"j\" is invalid: spec.template: Invalid value: ...: field is immutable",
                    vec![],
                ),
                Some("spec.template"),
            ),
            (
                status(
                    422,
                    "Invalid",
                    "ConfigMap \"c\" is invalid: metadata.name: Invalid value: \"A\": a lowercase RFC 1123 subdomain",
                    vec![],
                ),
                None,
            ),
            (
                status(409, "Conflict", "Apply failed with 1 conflict", vec![]),
                None,
            ),
        ];
        for (failure, field) in cases {
            assert_eq!(immutable_field(&failure).as_deref(), field, "{}", failure.message);
        }
    }

    fn desired(api_version: &str, kind: &str, ns: &str) -> Desired {
        let resolved = ResolvedKind {
            resource: ApiResource {
                group: split_api_version(api_version).0.into(),
                version: "v1".into(),
                api_version: api_version.into(),
                kind: kind.into(),
                plural: format!("{}s", kind.to_lowercase()),
            },
            namespaced: true,
        };
        Desired {
            obj: json!({}),
            object: ObjectRef::new(split_api_version(api_version).0, kind, ns, "x"),
            api_version: api_version.into(),
            kind: resolved,
            stage: Stage::Rest,
            print: String::new(),
        }
    }

    // Status shapes the API server returns (checked against kube-apiserver 1.35 in the
    // integration tests for the namespace, CRD and webhook cases).
    #[test]
    fn dependency_failures_are_deferred_only_when_this_apply_provides_the_dependency() {
        let batch = Batch {
            namespaces: ["apps".to_string()].into(),
            pending_kinds: ["example.com/Widget".to_string()].into(),
            service_accounts: ["x/builder".to_string()].into(),
        };
        let mut ns_missing = status(404, "NotFound", "namespaces \"apps\" not found", vec![]);
        ns_missing.details.as_mut().unwrap().kind = "namespaces".into();
        assert!(namespace_missing(&ns_missing));
        let no_kind = status(
            404,
            "NotFound",
            "the server could not find the requested resource",
            vec![],
        );
        let webhook = status(
            500,
            "InternalError",
            "Internal error occurred: failed calling webhook \"guard\": no endpoints",
            vec![],
        );
        // the ServiceAccount admission plugin's message, as kube-apiserver 1.35 returns it
        let sa_missing = |sa: &str| {
            let (ns, name) = sa.split_once('/').unwrap();
            status(
                403,
                "Forbidden",
                &format!(
                    "pods \"p\" is forbidden: error looking up service account {ns}/{name}: serviceaccount \"{name}\" not found"
                ),
                vec![],
            )
        };
        assert_eq!(
            missing_service_account(&sa_missing("x/builder")),
            Some("x/builder")
        );
        let rbac_forbidden = status(
            403,
            "Forbidden",
            "pods \"p\" is forbidden: User \"u\" cannot patch resource \"pods\" in API group \"\" in the namespace \"x\"",
            vec![],
        );
        assert_eq!(missing_service_account(&rbac_forbidden), None);
        let invalid = status(
            422,
            "Invalid",
            "ConfigMap \"x\" is invalid: data: Invalid value",
            vec![],
        );
        // (the failure, the object's apiVersion, kind and namespace, deferred)
        let cases = [
            (&ns_missing, ("v1", "ConfigMap", "apps"), true),
            (&ns_missing, ("v1", "ConfigMap", "other"), false),
            (&no_kind, ("example.com/v1", "Widget", "apps"), true),
            (&no_kind, ("example.com/v1", "Gadget", "apps"), false),
            (&webhook, ("v1", "ConfigMap", "x"), true),
            (&sa_missing("x/builder"), ("v1", "Pod", "x"), true),
            // the serviceaccount-controller creates `default` in every namespace
            (&sa_missing("y/default"), ("v1", "Pod", "y"), true),
            // a ServiceAccount this apply does not create fails now, as a missing dependency
            (&sa_missing("x/other"), ("v1", "Pod", "x"), false),
            (&sa_missing("z/builder"), ("v1", "Pod", "z"), false),
            (&invalid, ("v1", "ConfigMap", "apps"), false),
        ];
        for (failure, (api_version, kind, ns), expected) in cases {
            assert_eq!(
                missing_dependency(failure, &desired(api_version, kind, ns), &batch),
                expected,
                "{} for {kind} in {ns}",
                failure.message
            );
        }
    }

    #[test]
    fn dry_run_failures_are_deferred_recreated_or_reported_by_kind() {
        let batch = Batch {
            namespaces: ["apps".to_string()].into(),
            pending_kinds: HashSet::new(),
            service_accounts: HashSet::new(),
        };
        let cm = desired("v1", "ConfigMap", "apps");
        let api = |s: Status| kube::Error::Api(Box::new(s));
        let mut ns_missing = status(404, "NotFound", "namespaces \"apps\" not found", vec![]);
        ns_missing.details.as_mut().unwrap().kind = "namespaces".into();
        assert_eq!(
            classify_dry_run(&api(ns_missing.clone()), &cm, &batch, false),
            DryRunFailure::Deferred
        );
        // the same namespace, created by nobody in this apply
        assert_eq!(
            classify_dry_run(
                &api(ns_missing),
                &desired("v1", "ConfigMap", "other"),
                &batch,
                false
            ),
            DryRunFailure::Failed(FailureKind::MissingDependency)
        );
        let immutable = status(
            422,
            "Invalid",
            "Job.batch \"j\" is invalid: spec.template: Invalid value: ...: field is immutable",
            vec![],
        );
        assert_eq!(
            classify_dry_run(&api(immutable.clone()), &cm, &batch, true),
            DryRunFailure::Immutable("spec.template".into())
        );
        // nothing to recreate when the object does not exist
        assert_eq!(
            classify_dry_run(&api(immutable), &cm, &batch, false),
            DryRunFailure::Failed(FailureKind::Invalid)
        );
        let conflict = status(409, "Conflict", "Operation cannot be fulfilled", vec![]);
        assert_eq!(
            classify_dry_run(&api(conflict), &cm, &batch, true),
            DryRunFailure::Failed(FailureKind::Conflict)
        );
        let unavailable = status(503, "ServiceUnavailable", "etcd is down", vec![]);
        assert_eq!(
            classify_dry_run(&api(unavailable), &cm, &batch, true),
            DryRunFailure::Failed(FailureKind::Api)
        );
    }

    #[test]
    fn ignored_fields_are_stripped_when_another_applier_owns_them_else_adopted() {
        let desired = json!({"spec": {"replicas": 1, "paused": false}});
        let live = json!({"metadata": {"managedFields": [
            {"manager": "hpa", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {"replicas": 5, "paused": true}});
        let payload =
            payload_with_ignored(&desired, &live, &["/spec/replicas".into(), "/spec/paused".into()]);
        assert_eq!(payload, json!({"spec": {"paused": true}}));
    }

    #[test]
    fn custom_resources_resolve_from_a_crd_in_the_same_apply() {
        let crd = json!({"kind": "CustomResourceDefinition", "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"}, "versions": [{"name": "v1", "served": true}]}});
        let resolved = crd_serving(&[&crd], "example.com/v1", "Widget").unwrap();
        assert_eq!(resolved.resource.plural, "widgets");
        assert!(resolved.namespaced);
        assert!(crd_serving(&[&crd], "example.com/v2", "Widget").is_none());
        assert!(crd_serving(&[&crd], "example.com/v1", "Gadget").is_none());
    }
}
