//! The events of a Kustomization: the step each one reports, its source as the related
//! object, and the revision metadata. Their shape and delivery are every controller's
//! (`flux_runtime::events`).

use std::collections::BTreeMap;

use flux_runtime::events::{EventSubject, annotations_of};
use k8s_openapi::api::core::v1::ObjectReference;

pub(crate) use flux_runtime::events::Notice;

use crate::api::Kustomization;
use crate::source::ResolvedSource;

/// Event metadata keys.
pub(crate) const REVISION_KEY: &str = "kustomize.toolkit.fluxcd.io/revision";
pub(crate) const ORIGIN_REVISION_KEY: &str = "kustomize.toolkit.fluxcd.io/originRevision";
pub(crate) const COMMIT_STATUS_KEY: &str = "kustomize.toolkit.fluxcd.io/commit_status";

/// The steps Flux's events name (`action`).
pub(crate) mod action {
    pub(crate) const RECONCILE: &str = "Reconcile";
    pub(crate) const CHECK_DEPENDENCIES: &str = "CheckDependencies";
    pub(crate) const APPLY: &str = "Apply";
    pub(crate) const PRUNE: &str = "Prune";
    pub(crate) const HEALTH_CHECK: &str = "HealthCheck";
}

/// The step of the reconcile an event reports, as Flux's events name it (`action`).
pub(crate) fn action(ks: &Kustomization, notice: &Notice) -> &'static str {
    use crate::api::conditions::reason;
    if ks.metadata.deletion_timestamp.is_some() {
        return "Finalize";
    }
    match notice.reason.as_str() {
        reason::PROGRESSING => "Apply",
        reason::DEPENDENCY_NOT_READY => "CheckDependencies",
        // A failed health check is reported by the end of the run, as Flux's is.
        reason::HEALTH_CHECK_CANCELED => "HealthCheck",
        reason::ARTIFACT_FAILED => "ResolveSource",
        _ => "Reconcile",
    }
}

impl EventSubject for Kustomization {
    fn event_action(&self, notice: &Notice) -> &'static str {
        action(self, notice)
    }
}

/// The source a pass read, as Flux's recorder references it in `relatedObject`: the object
/// itself, uid and resourceVersion included (events sent before the source is read have none).
pub(crate) fn source_reference(source: &ResolvedSource) -> ObjectReference {
    ObjectReference {
        api_version: Some(source.kind.api_resource().api_version),
        kind: Some(source.kind.as_str().to_string()),
        namespace: Some(source.namespace.clone()),
        name: Some(source.name.clone()),
        uid: source.uid.clone(),
        resource_version: source.resource_version.clone(),
        field_path: None,
    }
}

/// The metadata Flux attaches to an event: revisions (when known) and the Kustomization's
/// `event.toolkit.fluxcd.io/*` annotations.
pub fn metadata(
    ks: &Kustomization,
    revision: Option<&str>,
    origin_revision: Option<&str>,
) -> BTreeMap<String, String> {
    let mut metadata = annotations_of(ks);
    if let Some(revision) = revision.filter(|r| !r.is_empty()) {
        metadata.insert(REVISION_KEY.to_string(), revision.to_string());
    }
    if let Some(origin) = origin_revision.filter(|r| !r.is_empty()) {
        metadata.insert(ORIGIN_REVISION_KEY.to_string(), origin.to_string());
    }
    metadata
}

#[cfg(test)]
mod tests {
    use flux_runtime::events::{MAX_NOTE_BYTES, forward_payload, kube_event};
    use k8s_openapi::jiff::Timestamp;

    use serde_json::json;

    use super::*;
    use crate::api::kustomization::SourceKind;
    use crate::controller::IDENTITY;

    fn ks() -> Kustomization {
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system", "uid": "u-1", "resourceVersion": "7",
                "annotations": {"event.toolkit.fluxcd.io/team": "web", "other/annotation": "x"}},
            "spec": {"interval": "5m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}}
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_767_225_605).unwrap()
    }

    #[test]
    fn metadata_carries_revisions_and_event_annotations_only() {
        let metadata = metadata(&ks(), Some("main@sha1:1f3c"), Some(""));
        let expected = BTreeMap::from([
            ("event.toolkit.fluxcd.io/team".to_string(), "web".to_string()),
            (
                "kustomize.toolkit.fluxcd.io/revision".to_string(),
                "main@sha1:1f3c".to_string(),
            ),
        ]);
        assert_eq!(metadata, expected);
    }

    #[test]
    fn forwarded_event_has_fluxs_shape() {
        // Reference A.3.
        let meta = BTreeMap::from([(REVISION_KEY.to_string(), "main@sha1:1f3c".to_string())]);
        let source = ResolvedSource {
            kind: SourceKind::GitRepository,
            namespace: "flux-system".into(),
            name: "repo".into(),
            uid: Some("s-9".into()),
            resource_version: Some("42".into()),
            artifact: serde_json::from_value(json!({"path": "p", "url": "u", "revision": "r",
                "lastUpdateTime": "2026-01-01T00:00:00Z"}))
            .unwrap(),
        };
        let notice = Notice::info(
            "Progressing",
            "Service/apps/web created\nDeployment/apps/web created",
            meta,
        )
        .related_to(Some(&source_reference(&source)));
        let payload = forward_payload(&ks(), &notice, IDENTITY.component, "kc-0", now());
        assert_eq!(
            payload,
            json!({
                "involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": "apps",
                    "uid": "u-1", "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "resourceVersion": "7"},
                "relatedObject": {"kind": "GitRepository", "namespace": "flux-system", "name": "repo",
                    "uid": "s-9", "apiVersion": "source.toolkit.fluxcd.io/v1", "resourceVersion": "42"},
                "severity": "info",
                "timestamp": "2026-01-01T00:00:05Z",
                "message": "Service/apps/web created\nDeployment/apps/web created",
                "reason": "Progressing",
                "action": "Apply",
                "metadata": {"kustomize.toolkit.fluxcd.io/revision": "main@sha1:1f3c"},
                "reportingController": "kustomize-controller",
                "reportingInstance": "kc-0"
            })
        );
    }

    #[test]
    fn actions_name_the_step_as_flux_does() {
        let mut deleted = ks();
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        let cases = [
            (ks(), "Progressing", "Apply"),
            (ks(), "ReconciliationSucceeded", "Reconcile"),
            (ks(), "BuildFailed", "Reconcile"),
            (ks(), "HealthCheckFailed", "Reconcile"),
            (ks(), "HealthCheckCanceled", "HealthCheck"),
            (ks(), "DependencyNotReady", "CheckDependencies"),
            (ks(), "ArtifactFailed", "ResolveSource"),
            (deleted, "ReconciliationSucceeded", "Finalize"),
        ];
        for (ks, reason, expected) in cases {
            let notice = Notice::info(reason, "m", BTreeMap::new());
            assert_eq!(action(&ks, &notice), expected, "{reason}");
        }
        // No metadata: the key is left out, as Go's omitempty does.
        let payload = forward_payload(
            &ks(),
            &Notice::info("Progressing", "m", BTreeMap::new()),
            IDENTITY.component,
            "kc-0",
            now(),
        );
        assert!(payload.get("metadata").is_none(), "{payload}");
    }

    #[test]
    fn kube_event_is_a_warning_for_errors_with_annotations_and_a_capped_note() {
        let meta = BTreeMap::from([(REVISION_KEY.to_string(), "r".to_string())]);
        let notice = Notice::error("BuildFailed", "e".repeat(5000), meta.clone());
        let event = kube_event(&ks(), &notice, IDENTITY.component, "kc-0", now());
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.reason.as_deref(), Some("BuildFailed"));
        assert_eq!(event.metadata.annotations, Some(meta));
        assert_eq!(event.metadata.namespace.as_deref(), Some("flux-system"));
        assert_eq!(event.note.as_ref().unwrap().len(), MAX_NOTE_BYTES);
        assert_eq!(event.regarding.unwrap().name.as_deref(), Some("apps"));
        assert_eq!(
            event.reporting_controller.as_deref(),
            Some("kustomize-controller")
        );
    }
}
