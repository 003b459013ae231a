//! Events about the objects a controller reconciles: events.k8s.io Events carrying Flux's
//! reasons and metadata annotations, optionally forwarded to notification-controller as Flux's
//! event JSON. What is the kind's own (the step an event reports, a related object) it tells
//! through [`EventSubject`].
//!
//! The driver decides *whether* to emit (only when something changed); this module decides
//! *what* an event looks like and delivers it, a repeat as a count on the first (`correlator`).

mod correlator;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::{Client as HttpClient, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::identity::ControllerIdentity;
use correlator::{Correlator, REMEMBERED, Write};

/// Annotations of the object with this prefix are copied onto its events.
const EVENT_ANNOTATION_PREFIX: &str = "event.toolkit.fluxcd.io/";
/// The events API rejects longer notes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// Flux's severities; `Error` becomes a Warning event, `Trace` a Normal event that is
/// recorded but never forwarded to notification-controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Info,
    Error,
    Trace,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Error => "error",
            Self::Trace => "trace",
        }
    }

    fn event_type(self) -> &'static str {
        match self {
            Self::Info | Self::Trace => "Normal",
            Self::Error => "Warning",
        }
    }
}

/// What the kind of the objects tells about their events.
pub trait EventSubject: Resource<DynamicType = ()> {
    /// The step of the reconcile an event reports, as Flux's events name it (`action`), when
    /// the notice does not name it.
    fn event_action(&self, notice: &Notice) -> &'static str;
}

/// One event to emit about an object.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub severity: Severity,
    pub reason: String,
    pub message: String,
    pub metadata: BTreeMap<String, String>,
    /// The step it reports, when the reason does not tell it (`EventSubject::event_action`).
    pub action: Option<&'static str>,
    /// The object the event relates to (a Kustomization's source, once read), as Flux's
    /// recorder references it: kind, namespace, name, uid, apiVersion, resourceVersion.
    pub related: Option<ObjectReference>,
}

impl Notice {
    pub fn info(reason: &str, message: impl Into<String>, metadata: BTreeMap<String, String>) -> Self {
        Self::new(Severity::Info, reason, message, metadata)
    }

    pub fn error(reason: &str, message: impl Into<String>, metadata: BTreeMap<String, String>) -> Self {
        Self::new(Severity::Error, reason, message, metadata)
    }

    pub fn new(
        severity: Severity,
        reason: &str,
        message: impl Into<String>,
        metadata: BTreeMap<String, String>,
    ) -> Self {
        Self {
            severity,
            reason: reason.to_string(),
            message: message.into(),
            metadata,
            action: None,
            related: None,
        }
    }

    /// Flux's rule: every notice is recorded, only info and error ones are forwarded.
    pub fn is_forwarded(&self) -> bool {
        self.severity != Severity::Trace
    }

    /// The notice, reporting the step `action`.
    pub fn acting(self, action: &'static str) -> Self {
        Self {
            action: Some(action),
            ..self
        }
    }

    /// The notice, related to `related` (none: left as it was).
    pub fn related_to(self, related: Option<&ObjectReference>) -> Self {
        Self {
            related: related.cloned().or(self.related),
            ..self
        }
    }

    /// The step the notice reports about `object`.
    fn action_about<K: EventSubject>(&self, object: &K) -> &'static str {
        self.action.unwrap_or_else(|| object.event_action(self))
    }
}

/// The object's `event.toolkit.fluxcd.io/*` annotations, which Flux copies into the metadata
/// of its events.
pub fn annotations_of(object: &impl Resource) -> BTreeMap<String, String> {
    object
        .annotations()
        .iter()
        .filter(|(key, _)| key.starts_with(EVENT_ANNOTATION_PREFIX))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// The events.k8s.io Event for a notice, reported by `reporting_controller` (Flux's component
/// name). Pure, so its shape is tested.
pub fn kube_event<K: EventSubject>(
    object: &K,
    notice: &Notice,
    reporting_controller: &str,
    instance: &str,
    now: Timestamp,
) -> KubeEvent {
    let regarding = object.object_ref(&());
    KubeEvent {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", object.name_any(), now.as_nanosecond())),
            namespace: object.namespace(),
            annotations: (!notice.metadata.is_empty()).then(|| notice.metadata.clone()),
            ..ObjectMeta::default()
        },
        action: Some(notice.action_about(object).to_string()),
        related: notice.related.clone(),
        reason: Some(notice.reason.clone()),
        note: Some(crate::text::cap(&notice.message, MAX_NOTE_BYTES)),
        type_: Some(notice.severity.event_type().to_string()),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding),
        reporting_controller: Some(reporting_controller.to_string()),
        reporting_instance: Some(instance.to_string()),
        ..KubeEvent::default()
    }
}

/// The JSON body notification-controller expects (Flux's `eventv1.Event`). Metadata is
/// passed as given: Flux adds no `token` for Kustomizations, and the notice's messages name
/// objects, never Secret values.
pub fn forward_payload<K: EventSubject>(
    object: &K,
    notice: &Notice,
    reporting_controller: &str,
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
    } = object.object_ref(&());
    let resource_version = object.resource_version();
    let mut payload = json!({
        "involvedObject": {
            "kind": kind, "namespace": namespace, "name": name, "uid": uid,
            "apiVersion": api_version, "resourceVersion": resource_version,
        },
        "severity": notice.severity.as_str(),
        "timestamp": Timestamp::from_second(now.as_second()).unwrap_or(now).to_string(),
        "message": notice.message,
        "reason": notice.reason,
        "action": notice.action_about(object),
        "reportingController": reporting_controller,
        "reportingInstance": instance,
    });
    // Go's ObjectReference: empty fields left out.
    if let Some(related) = &notice.related {
        payload["relatedObject"] = json!(related);
    }
    // Go's `omitempty`: no metadata key when there is none.
    if !notice.metadata.is_empty() {
        payload["metadata"] = json!(notice.metadata);
    }
    payload
}

/// Delivers notices about objects of the kind `K`: to the Kubernetes events API and, when
/// configured, to notification-controller.
pub struct Notifier<K> {
    /// Flux's component name, the events' reporting controller.
    reporting_controller: &'static str,
    instance: String,
    /// Observes every event before it is queued, so a repeat knows the first one's name.
    correlator: Mutex<Correlator>,
    record: Recorder,
    forward: Option<Forwarder>,
    kind: PhantomData<fn(&K)>,
}

impl<K: EventSubject> Notifier<K> {
    /// The notifier of the controller `identity`, running as `instance`. Must be called inside
    /// the async runtime: it starts the delivery tasks.
    pub fn new(
        client: Client,
        identity: &ControllerIdentity,
        instance: String,
        events_addr: Option<String>,
    ) -> Self {
        let forward = events_addr
            .filter(|addr| !addr.is_empty())
            .map(|addr| Forwarder::start(addr, FORWARD_QUEUE));
        Self {
            reporting_controller: identity.component,
            instance,
            correlator: Mutex::new(Correlator::new(REMEMBERED)),
            record: Recorder::start(client, RECORD_QUEUE),
            forward,
            kind: PhantomData,
        }
    }

    /// Emits a notice: queues it for delivery, so an event costs a pass no round trip (as
    /// client-go's event broadcaster, which Flux uses). Delivery failures are logged, never
    /// fatal: an event is not worth a failed reconcile. Only the Kubernetes event is
    /// correlated: notification-controller gets every notice, as from Flux.
    pub fn emit(&self, object: &K, notice: &Notice) {
        let now = Timestamp::now();
        let (reporting, instance) = (self.reporting_controller, self.instance.as_str());
        let event = kube_event(object, notice, reporting, instance, now);
        let write = match self.correlator.lock() {
            Ok(mut correlator) => correlator.observe(event, now),
            // A panic while observing only cost the memory of repeats.
            Err(poisoned) => poisoned.into_inner().observe(event, now),
        };
        self.record.send(object.namespace().unwrap_or_default(), write);
        if let Some(forwarder) = self.forward.as_ref().filter(|_| notice.is_forwarded()) {
            forwarder.send(forward_payload(object, notice, reporting, instance, now).to_string());
        }
    }
}

/// Events waiting for the events API; more are dropped (and logged).
const RECORD_QUEUE: usize = 1024;
/// Events written at once: a burst of passes concluding together is not written one by one.
const RECORD_WRITERS: usize = 8;

/// Writes queued events to the events API from tasks of their own. An Event object's writes
/// (its creation, then its repeats) go through one task in order, so a repeat never reaches
/// the API server before the Event it raises.
#[derive(Clone)]
struct Recorder {
    lanes: Vec<tokio::sync::mpsc::Sender<(String, Write)>>,
}

impl Recorder {
    fn start(client: Client, capacity: usize) -> Self {
        let lanes = (0..RECORD_WRITERS)
            .map(|_| {
                let (lane, mut waiting) =
                    tokio::sync::mpsc::channel::<(String, Write)>(capacity.div_ceil(RECORD_WRITERS));
                let client = client.clone();
                tokio::spawn(async move {
                    while let Some((namespace, write)) = waiting.recv().await {
                        record(Api::namespaced(client.clone(), &namespace), write).await;
                    }
                });
                lane
            })
            .collect();
        Self { lanes }
    }

    fn send(&self, namespace: String, write: Write) {
        let mut hasher = DefaultHasher::new();
        (&namespace, write.name()).hash(&mut hasher);
        let lane = &self.lanes[(hasher.finish() % self.lanes.len() as u64) as usize];
        if let Err(error) = lane.try_send((namespace, write)) {
            tracing::warn!(reason = %error, "dropping event: the queue to the events API is full");
        }
    }
}

/// Creates an event, or raises the series of the Event a repeat counts on; when that one is
/// gone (events expire), the repeat is created in its place with its count.
async fn record(api: Api<KubeEvent>, write: Write) {
    let result = match &write {
        Write::Create(event) => api.create(&PostParams::default(), event).await.map(drop),
        Write::Repeat(event) => {
            let series = json!({"series": event.series});
            match api
                .patch(write.name(), &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    api.create(&PostParams::default(), event).await.map(drop)
                }
                other => other.map(drop),
            }
        }
    };
    if let Err(error) = result {
        let (Write::Create(event) | Write::Repeat(event)) = &write;
        tracing::warn!(%error, reason = ?event.reason, "failed to record event");
    }
}

/// Events waiting for notification-controller; more are dropped (and logged).
const FORWARD_QUEUE: usize = 256;

/// Sends event bodies to `--events-addr` from a task of its own, so that a slow or
/// black-holed receiver never holds a reconcile: a reconcile only queues the event.
#[derive(Clone)]
struct Forwarder {
    queue: tokio::sync::mpsc::Sender<String>,
}

impl Forwarder {
    /// Starts the delivery task for `addr`, with room for `capacity` waiting events.
    fn start(addr: String, capacity: usize) -> Self {
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
    fn send(&self, body: String) -> bool {
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

    #[test]
    fn trace_notices_are_normal_events_that_are_not_forwarded() {
        let trace = Notice::new(Severity::Trace, "Succeeded", "no change", BTreeMap::new());
        assert_eq!(trace.severity.event_type(), "Normal");
        assert!(!trace.is_forwarded());
        assert!(Notice::info("Succeeded", "x", BTreeMap::new()).is_forwarded());
        assert!(Notice::error("Failed", "x", BTreeMap::new()).is_forwarded());
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
}
