//! Events about a Kustomization: events.k8s.io Events carrying Flux's reasons and revision
//! annotations, optionally forwarded to notification-controller as Flux's event JSON.
//!
//! The driver decides *whether* to emit (only when something changed); this module decides
//! *what* an event looks like and delivers it.

use std::collections::BTreeMap;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::{Client as HttpClient, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::api::Kustomization;

/// The reporting component, as Flux names it.
pub(crate) const REPORTING_CONTROLLER: &str = "kustomize-controller";
/// Event metadata keys.
pub(crate) const REVISION_KEY: &str = "kustomize.toolkit.fluxcd.io/revision";
pub(crate) const ORIGIN_REVISION_KEY: &str = "kustomize.toolkit.fluxcd.io/originRevision";
pub(crate) const COMMIT_STATUS_KEY: &str = "kustomize.toolkit.fluxcd.io/commit_status";
/// Annotations of the Kustomization with this prefix are copied onto its events.
const EVENT_ANNOTATION_PREFIX: &str = "event.toolkit.fluxcd.io/";
/// The events API rejects longer notes.
const MAX_NOTE_BYTES: usize = 1024;

/// Flux's severities; `Error` becomes a Warning event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Severity {
    Info,
    Error,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Error => "error",
        }
    }

    fn event_type(self) -> &'static str {
        match self {
            Self::Info => "Normal",
            Self::Error => "Warning",
        }
    }
}

/// One event to emit about a Kustomization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Notice {
    pub severity: Severity,
    pub reason: String,
    pub message: String,
    pub metadata: BTreeMap<String, String>,
}

impl Notice {
    pub fn info(reason: &str, message: impl Into<String>, metadata: BTreeMap<String, String>) -> Self {
        Self {
            severity: Severity::Info,
            reason: reason.to_string(),
            message: message.into(),
            metadata,
        }
    }

    pub fn error(reason: &str, message: impl Into<String>, metadata: BTreeMap<String, String>) -> Self {
        Self {
            severity: Severity::Error,
            reason: reason.to_string(),
            message: message.into(),
            metadata,
        }
    }
}

/// The metadata Flux attaches to an event: revisions (when known) and the Kustomization's
/// `event.toolkit.fluxcd.io/*` annotations.
pub fn metadata(
    ks: &Kustomization,
    revision: Option<&str>,
    origin_revision: Option<&str>,
) -> BTreeMap<String, String> {
    let mut metadata: BTreeMap<String, String> = ks
        .annotations()
        .iter()
        .filter(|(key, _)| key.starts_with(EVENT_ANNOTATION_PREFIX))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if let Some(revision) = revision.filter(|r| !r.is_empty()) {
        metadata.insert(REVISION_KEY.to_string(), revision.to_string());
    }
    if let Some(origin) = origin_revision.filter(|r| !r.is_empty()) {
        metadata.insert(ORIGIN_REVISION_KEY.to_string(), origin.to_string());
    }
    metadata
}

/// The events.k8s.io Event for a notice. Pure, so its shape is tested.
pub(crate) fn kube_event(ks: &Kustomization, notice: &Notice, instance: &str, now: Timestamp) -> KubeEvent {
    let regarding = ks.object_ref(&());
    KubeEvent {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", ks.name_any(), now.as_nanosecond())),
            namespace: ks.namespace(),
            annotations: (!notice.metadata.is_empty()).then(|| notice.metadata.clone()),
            ..ObjectMeta::default()
        },
        action: Some(
            if notice.severity == Severity::Error {
                "ReconcileFailed"
            } else {
                "Reconcile"
            }
            .to_string(),
        ),
        reason: Some(notice.reason.clone()),
        note: Some(truncate(&notice.message, MAX_NOTE_BYTES)),
        type_: Some(notice.severity.event_type().to_string()),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding),
        reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
        reporting_instance: Some(instance.to_string()),
        ..KubeEvent::default()
    }
}

/// The JSON body notification-controller expects (Flux's `eventv1.Event`).
pub(crate) fn forward_payload(
    ks: &Kustomization,
    notice: &Notice,
    instance: &str,
    now: Timestamp,
) -> serde_json::Value {
    let ObjectReference {
        api_version,
        kind,
        name,
        namespace,
        uid,
        ..
    } = ks.object_ref(&());
    let resource_version = ks.resource_version();
    json!({
        "involvedObject": {
            "kind": kind, "namespace": namespace, "name": name, "uid": uid,
            "apiVersion": api_version, "resourceVersion": resource_version,
        },
        "severity": notice.severity.as_str(),
        "timestamp": Timestamp::from_second(now.as_second()).unwrap_or(now).to_string(),
        "message": notice.message,
        "reason": notice.reason,
        "metadata": notice.metadata,
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
    })
}

fn truncate(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    let mut cut = max - 3;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &message[..cut])
}

/// Delivers notices: to the Kubernetes events API and, when configured, to notification-controller.
#[derive(Clone)]
pub(crate) struct Notifier {
    client: Client,
    instance: String,
    forward: Option<(String, HttpClient<HttpConnector, Full<Bytes>>)>,
}

impl Notifier {
    pub fn new(client: Client, instance: String, events_addr: Option<String>) -> Self {
        let forward = events_addr
            .filter(|addr| !addr.is_empty())
            .map(|addr| (addr, HttpClient::builder(TokioExecutor::new()).build_http()));
        Self {
            client,
            instance,
            forward,
        }
    }

    /// Emits a notice. Delivery failures are logged, never fatal: an event is not worth a
    /// failed reconcile.
    pub(crate) async fn emit(&self, ks: &Kustomization, notice: &Notice) {
        let now = Timestamp::now();
        let event = kube_event(ks, notice, &self.instance, now);
        let namespace = ks.namespace().unwrap_or_default();
        if let Err(error) = Api::<KubeEvent>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &event)
            .await
        {
            tracing::warn!(%error, reason = %notice.reason, "failed to record event");
        }
        if let Some((addr, http)) = &self.forward {
            let body = forward_payload(ks, notice, &self.instance, now).to_string();
            forward(http, addr, body).await;
        }
    }
}

/// POSTs one event with Flux's policy: 5 s timeout, retry connection errors and 5xx a few
/// times, treat 429 as "duplicate, drop".
async fn forward(http: &HttpClient<HttpConnector, Full<Bytes>>, addr: &str, body: String) {
    for attempt in 0..3u32 {
        let request = match hyper::Request::post(addr)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.clone())))
        {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(%error, addr, "invalid --events-addr");
                return;
            }
        };
        let retry = match tokio::time::timeout(Duration::from_secs(5), http.request(request)).await {
            Ok(Ok(response)) => {
                let status = response.status();
                let _ = response.into_body().collect().await;
                status.is_server_error()
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, addr, "event forwarding failed");
                true
            }
            Err(_) => true,
        };
        if !retry {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500 * 2u64.pow(attempt))).await;
    }
    tracing::warn!(addr, "dropping event: notification-controller did not accept it");
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let notice = Notice::info(
            "Progressing",
            "Service/apps/web created\nDeployment/apps/web created",
            meta,
        );
        let payload = forward_payload(&ks(), &notice, "kc-0", now());
        assert_eq!(
            payload,
            json!({
                "involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": "apps",
                    "uid": "u-1", "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "resourceVersion": "7"},
                "severity": "info",
                "timestamp": "2026-01-01T00:00:05Z",
                "message": "Service/apps/web created\nDeployment/apps/web created",
                "reason": "Progressing",
                "metadata": {"kustomize.toolkit.fluxcd.io/revision": "main@sha1:1f3c"},
                "reportingController": "kustomize-controller",
                "reportingInstance": "kc-0"
            })
        );
    }

    #[test]
    fn kube_event_is_a_warning_for_errors_with_annotations_and_a_capped_note() {
        let meta = BTreeMap::from([(REVISION_KEY.to_string(), "r".to_string())]);
        let notice = Notice::error("BuildFailed", "e".repeat(5000), meta.clone());
        let event = kube_event(&ks(), &notice, "kc-0", now());
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
