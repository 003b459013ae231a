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

/// The step of the reconcile an event reports, as Flux's events name it (`action`).
pub(crate) fn action(ks: &Kustomization, notice: &Notice) -> &'static str {
    use crate::api::conditions::reason;
    if ks.metadata.deletion_timestamp.is_some() {
        return "Finalize";
    }
    match notice.reason.as_str() {
        reason::PROGRESSING => "Apply",
        reason::DEPENDENCY_NOT_READY => "CheckDependencies",
        reason::HEALTH_CHECK_FAILED | reason::HEALTH_CHECK_CANCELED => "HealthCheck",
        reason::ARTIFACT_FAILED => "ResolveSource",
        _ => "Reconcile",
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
        action: Some(action(ks, notice).to_string()),
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

/// The source a Kustomization reads, as the event's `relatedObject`: what the spec names (the
/// source's uid and resourceVersion are not at hand where events are sent).
fn related_object(ks: &Kustomization) -> serde_json::Value {
    let source = &ks.spec.source_ref;
    let api_version = source
        .api_version
        .clone()
        .unwrap_or_else(|| source.kind.api_resource().api_version);
    json!({
        "kind": source.kind.as_str(),
        "namespace": source.namespace.clone().or_else(|| ks.namespace()),
        "name": source.name,
        "apiVersion": api_version,
    })
}

/// The JSON body notification-controller expects (Flux's `eventv1.Event`). Metadata is
/// passed as given: Flux adds no `token` for Kustomizations, and the notice's messages name
/// objects, never Secret values.
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
    let mut payload = json!({
        "involvedObject": {
            "kind": kind, "namespace": namespace, "name": name, "uid": uid,
            "apiVersion": api_version, "resourceVersion": resource_version,
        },
        "relatedObject": related_object(ks),
        "severity": notice.severity.as_str(),
        "timestamp": Timestamp::from_second(now.as_second()).unwrap_or(now).to_string(),
        "message": notice.message,
        "reason": notice.reason,
        "action": action(ks, notice),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
    });
    // Go's `omitempty`: no metadata key when there is none.
    if !notice.metadata.is_empty() {
        payload["metadata"] = json!(notice.metadata);
    }
    payload
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
    instance: String,
    record: Recorder,
    forward: Option<Forwarder>,
}

impl Notifier {
    /// Must be called inside the async runtime: it starts the delivery tasks.
    pub fn new(client: Client, instance: String, events_addr: Option<String>) -> Self {
        let forward = events_addr
            .filter(|addr| !addr.is_empty())
            .map(|addr| Forwarder::start(addr, FORWARD_QUEUE));
        Self {
            instance,
            record: Recorder::start(client, RECORD_QUEUE),
            forward,
        }
    }

    /// Emits a notice: queues it for delivery, so an event costs a pass no round trip (as
    /// client-go's event broadcaster, which Flux uses). Delivery failures are logged, never
    /// fatal: an event is not worth a failed reconcile.
    pub(crate) fn emit(&self, ks: &Kustomization, notice: &Notice) {
        let now = Timestamp::now();
        self.record.send(
            ks.namespace().unwrap_or_default(),
            kube_event(ks, notice, &self.instance, now),
        );
        if let Some(forwarder) = &self.forward {
            forwarder.send(forward_payload(ks, notice, &self.instance, now).to_string());
        }
    }
}

/// Events waiting for the events API; more are dropped (and logged).
const RECORD_QUEUE: usize = 1024;
/// Events written at once: a burst of passes concluding together is not written one by one.
const RECORD_WRITERS: usize = 8;

/// Writes queued events to the events API from a task of its own.
#[derive(Clone)]
struct Recorder {
    queue: tokio::sync::mpsc::Sender<(String, KubeEvent)>,
}

impl Recorder {
    fn start(client: Client, capacity: usize) -> Self {
        let (queue, waiting) = tokio::sync::mpsc::channel::<(String, KubeEvent)>(capacity);
        let waiting = futures::stream::unfold(waiting, |mut waiting| async {
            waiting.recv().await.map(|event| (event, waiting))
        });
        tokio::spawn(futures::StreamExt::for_each_concurrent(
            waiting,
            RECORD_WRITERS,
            move |(namespace, event)| {
                let api = Api::<KubeEvent>::namespaced(client.clone(), &namespace);
                async move {
                    if let Err(error) = api.create(&PostParams::default(), &event).await {
                        tracing::warn!(%error, reason = ?event.reason, "failed to record event");
                    }
                }
            },
        ));
        Self { queue }
    }

    fn send(&self, namespace: String, event: KubeEvent) {
        if let Err(error) = self.queue.try_send((namespace, event)) {
            tracing::warn!(reason = %error, "dropping event: the queue to the events API is full");
        }
    }
}

/// Events waiting for notification-controller; more are dropped (and logged).
const FORWARD_QUEUE: usize = 256;

/// Sends event bodies to `--events-addr` from a task of its own, so that a slow or
/// black-holed receiver never holds a reconcile: a reconcile only queues the event.
#[derive(Clone)]
pub(crate) struct Forwarder {
    queue: tokio::sync::mpsc::Sender<String>,
}

impl Forwarder {
    /// Starts the delivery task for `addr`, with room for `capacity` waiting events.
    pub(crate) fn start(addr: String, capacity: usize) -> Self {
        let (queue, mut waiting) = tokio::sync::mpsc::channel::<String>(capacity);
        tokio::spawn(async move {
            let http = HttpClient::builder(TokioExecutor::new()).build_http();
            while let Some(body) = waiting.recv().await {
                forward(&http, &addr, body).await;
            }
        });
        Self { queue }
    }

    /// Queues one event body; returns false (and logs) when the queue is full and it is dropped.
    pub(crate) fn send(&self, body: String) -> bool {
        match self.queue.try_send(body) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(reason = %error, "dropping event: the queue to notification-controller is full");
                false
            }
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
                "relatedObject": {"kind": "GitRepository", "namespace": "flux-system", "name": "repo",
                    "apiVersion": "source.toolkit.fluxcd.io/v1"},
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
            (ks(), "HealthCheckFailed", "HealthCheck"),
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
            "kc-0",
            now(),
        );
        assert!(payload.get("metadata").is_none(), "{payload}");
    }

    /// A receiver that accepts connections and never answers.
    async fn black_hole() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}/", listener.local_addr().unwrap());
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                held.push(stream);
            }
        });
        (addr, accepted)
    }

    #[tokio::test]
    async fn a_black_holed_receiver_never_holds_the_sender_and_overflow_is_dropped() {
        let (addr, accepted) = black_hole().await;
        let forwarder = Forwarder::start(addr, 4);
        // `send` is not async: queuing cannot wait on the receiver. With the first event stuck
        // on the black hole, at most the queue's room plus the one in flight is kept.
        let kept = (0..10)
            .filter(|i| forwarder.send(format!("{{\"n\":{i}}}")))
            .count();
        assert!((4..=5).contains(&kept), "kept {kept} of 10");
        // Delivery goes on meanwhile, on its own task.
        while accepted.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
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
