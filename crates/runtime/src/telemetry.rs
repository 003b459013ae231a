//! Logs, metrics and the probe/metrics HTTP server.
//!
//! Metric names users' dashboards depend on keep Flux's spelling
//! (`gotk_reconcile_duration_seconds`, `gotk_reconcile_condition`); the rest are ours.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::kube_ext::RequestCounts;

pub(crate) mod logs;
mod runtime;

pub(crate) use runtime::Outcome;

/// Log output format, as Flux's `--log-encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogEncoding {
    Json,
    Console,
}

/// The filter for Flux's `--log-level`: `trace`, `debug`, `info` or `error`; anything else is
/// `info`, as Flux ignores a level it does not know. Libraries log their warnings only.
pub(crate) fn log_filter(level: &str) -> String {
    let level = match level {
        "trace" | "debug" | "info" | "error" => level,
        _ => "info",
    };
    let libraries = if level == "error" { "error" } else { "warn" };
    format!("{level},kube={libraries},hyper={libraries},tower={libraries},rustls={libraries}")
}

/// Installs the global subscriber: Flux's line shape on stderr (see [`logs`]). `RUST_LOG`
/// overrides the filter.
pub(crate) fn init_logs(level: &str, encoding: LogEncoding) {
    use tracing_subscriber::layer::SubscriberExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_filter(level)));
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(logs::FluxLayer::new(encoding, std::io::stderr));
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Labels Flux puts on per-object reconcile metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ObjectLabels {
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    kind: String,
    name: String,
    namespace: String,
    #[prometheus(flatten)]
    condition: ConditionKey,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionKey {
    r#type: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
}

/// How a reconcile ended, for the reconciles counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReconcileResult {
    Success,
    Failure,
}

impl ReconcileResult {
    fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Failure => "failure",
        }
    }
}

/// Go's `prometheus.ExponentialBucketsRange`: `count` buckets from `min` to `max`, each the
/// previous times a constant factor (computed as Go computes it, so the bounds print alike).
pub(crate) fn exponential_buckets_range(min: f64, max: f64, count: u16) -> Vec<f64> {
    let factor = (max / min).powf(1.0 / f64::from(count - 1));
    let mut bucket = min;
    (0..count)
        .map(|_| {
            let current = bucket;
            bucket *= factor;
            current
        })
        .collect()
}

/// The controller's metrics, registered in one registry.
pub(crate) struct Metrics {
    registry: Registry,
    /// controller-runtime's reconcile and work queue metrics.
    pub runtime: runtime::RuntimeMetrics,
    reconcile_duration: Family<ObjectLabels, Histogram>,
    reconcile_condition: Family<ConditionLabels, Gauge>,
    reconciles: Family<ResultLabels, Counter>,
    applied_objects: Family<ActionLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let reconcile_duration = Family::<ObjectLabels, Histogram>::new_with_constructor(|| {
            // Flux's: 10 buckets from 10 ms to 30 minutes.
            Histogram::new(exponential_buckets_range(10e-3, 1800.0, 10))
        });
        registry.register(
            "gotk_reconcile_duration_seconds",
            "The duration in seconds of a gotk resource reconciliation",
            reconcile_duration.clone(),
        );
        let reconcile_condition = Family::default();
        registry.register(
            "gotk_reconcile_condition",
            "The current condition status of a GitOps Toolkit resource reconciliation",
            reconcile_condition.clone(),
        );
        let reconciles = Family::default();
        registry.register(
            "kustomize_controller_reconciles",
            "Reconciles by result",
            reconciles.clone(),
        );
        let applied_objects = Family::default();
        registry.register(
            "kustomize_controller_applied_objects",
            "Objects changed by apply and prune, by action",
            applied_objects.clone(),
        );
        let runtime = runtime::RuntimeMetrics::register(&mut registry);
        registry.register_collector(Box::new(AliveTasks));
        Self {
            registry,
            runtime,
            reconcile_duration,
            reconcile_condition,
            reconciles,
            applied_objects,
        }
    }
}

impl Metrics {
    /// Exposes the API requests counted by the client layer, by verb.
    pub(crate) fn register_api_requests(&mut self, counts: RequestCounts) {
        self.registry.register_collector(Box::new(ApiRequests(counts)));
    }

    pub(crate) fn record_reconcile(&self, object: &ObjectLabels, elapsed: Duration, result: ReconcileResult) {
        self.reconcile_duration
            .get_or_create(object)
            .observe(elapsed.as_secs_f64());
        self.reconciles
            .get_or_create(&ResultLabels {
                result: result.label().into(),
            })
            .inc();
    }

    /// Sets the Ready condition gauge: 1 for the current status, 0 for the others (as Flux).
    /// `None` means the object is gone: only the `Deleted` series is 1.
    pub(crate) fn record_ready(&self, object: &ObjectLabels, status: Option<&str>) {
        for candidate in ["True", "False", "Unknown", "Deleted"] {
            let labels = ConditionLabels {
                kind: object.kind.clone(),
                name: object.name.clone(),
                namespace: object.namespace.clone(),
                condition: ConditionKey {
                    r#type: "Ready".into(),
                    status: candidate.into(),
                },
            };
            let current = status.unwrap_or("Deleted") == candidate;
            self.reconcile_condition
                .get_or_create(&labels)
                .set(i64::from(current));
        }
    }

    /// Counts applied or pruned objects by action (`created`, `configured`, `deleted`, ...).
    pub(crate) fn record_action(&self, action: &str, count: u64) {
        self.applied_objects
            .get_or_create(&ActionLabels {
                action: action.into(),
            })
            .inc_by(count);
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// `kustomize_controller_api_requests_total{verb,resource}` and client-go's
/// `rest_client_requests_total{code,host,method}`, read from the counting client layer at
/// scrape time. `resource` is the plural with its group (`deployments.apps`), empty for
/// discovery.
#[derive(Debug)]
struct ApiRequests(RequestCounts);

impl Collector for ApiRequests {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            "kustomize_controller_api_requests",
            "Kubernetes API requests made by the controller, by verb and resource",
            None,
            MetricType::Counter,
        )?;
        for (key, count) in self.0.snapshot() {
            let labels = [
                ("verb".to_string(), key.verb),
                ("resource".to_string(), key.resource),
            ];
            metric
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&count, None)?;
        }
        // client-go's, which Flux's dashboards read.
        let mut metric = encoder.encode_descriptor(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            None,
            MetricType::Counter,
        )?;
        for (key, count) in self.0.responses() {
            let labels = [
                ("code".to_string(), key.code),
                ("host".to_string(), key.host),
                ("method".to_string(), key.method),
            ];
            metric
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&count, None)?;
        }
        Ok(())
    }
}

/// `kustomize_controller_tokio_alive_tasks`: the tasks alive in the runtime at scrape time,
/// so a leak of spawned tasks shows as growth over a long run.
#[derive(Debug)]
struct AliveTasks;

impl Collector for AliveTasks {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A scrape outside a runtime (none in the controller) has nothing to count.
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Ok(());
        };
        let metric = encoder.encode_descriptor(
            "kustomize_controller_tokio_alive_tasks",
            "Tokio tasks alive in the controller's runtime",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(handle.metrics().num_alive_tasks() as i64).encode(metric)
    }
}

/// Whether the process is ready to serve (`/readyz`).
#[derive(Clone, Default)]
pub(crate) struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Parses Go-style listen addresses: `:8080` means all interfaces.
pub(crate) fn parse_listen_addr(addr: &str) -> Result<SocketAddr, std::net::AddrParseError> {
    if let Some(port) = addr.strip_prefix(':') {
        format!("0.0.0.0:{port}").parse()
    } else {
        addr.parse()
    }
}

/// Serves `/metrics` (when `metrics` is set), `/healthz` and `/readyz` on one listener.
pub(crate) async fn serve(listener: TcpListener, metrics: Option<Arc<Metrics>>, readiness: Readiness) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        let readiness = readiness.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let response = route(&request, metrics.as_deref(), &readiness);
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn route(
    request: &Request<Incoming>,
    metrics: Option<&Metrics>,
    readiness: &Readiness,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String, content_type: &str| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = content_type.parse() {
            response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    };
    match (request.uri().path(), metrics) {
        ("/metrics", Some(metrics)) => text(
            StatusCode::OK,
            metrics.encode(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        ("/healthz", _) => text(StatusCode::OK, "ok".into(), "text/plain"),
        ("/readyz", _) if readiness.get() => text(StatusCode::OK, "ok".into(), "text/plain"),
        ("/readyz", _) => text(StatusCode::SERVICE_UNAVAILABLE, "not ready".into(), "text/plain"),
        _ => text(StatusCode::NOT_FOUND, "not found".into(), "text/plain"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_addresses_listen_on_all_interfaces() {
        assert_eq!(
            parse_listen_addr(":8080").unwrap(),
            "0.0.0.0:8080".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("127.0.0.1:9440").unwrap(),
            "127.0.0.1:9440".parse().unwrap()
        );
        assert!(parse_listen_addr("8080").is_err());
    }

    #[tokio::test]
    async fn alive_tasks_gauge_counts_the_runtimes_tasks() {
        let metrics = Metrics::default();
        let gauge = |text: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix("kustomize_controller_tokio_alive_tasks "))
                .map(str::to_string)
        };
        assert_eq!(gauge(&metrics.encode()), Some("0".into()));
        let (stop, stopped) = tokio::sync::watch::channel(());
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                let mut stopped = stopped.clone();
                tokio::spawn(async move { stopped.changed().await })
            })
            .collect();
        assert_eq!(gauge(&metrics.encode()), Some("3".into()));
        drop(stop);
        for task in tasks {
            let _ = task.await;
        }
        assert_eq!(gauge(&metrics.encode()), Some("0".into()));
    }

    #[test]
    fn metrics_use_fluxs_names_and_labels() {
        let metrics = Metrics::default();
        let object = ObjectLabels {
            kind: "Kustomization".into(),
            name: "apps".into(),
            namespace: "flux-system".into(),
        };
        metrics.record_reconcile(&object, Duration::from_millis(300), ReconcileResult::Success);
        metrics.record_ready(&object, Some("True"));
        metrics.record_action("created", 2);
        let text = metrics.encode();
        // Flux's buckets: 0.01 s times (1800 / 0.01)^(1/9) per step, up to 30 minutes (as Go
        // multiplies, the last bound is 1799.9999999999984).
        // The bound as printed, to 15 significant digits, and the count of that bucket.
        let bucket = |le: &str| -> Option<&str> {
            let prefix = format!(r#"gotk_reconcile_duration_seconds_bucket{{le="{le}"#);
            text.lines().find(|l| l.starts_with(&prefix))?.rsplit(' ').next()
        };
        assert_eq!(bucket("0.01\""), Some("0"), "{text}");
        assert_eq!(bucket("0.147176453809388"), Some("0"), "{text}");
        assert_eq!(bucket("0.564621617328617"), Some("1"), "{text}");
        assert_eq!(bucket("1799.99999999999"), Some("1"), "{text}");
        assert_eq!(
            text.matches("gotk_reconcile_duration_seconds_bucket").count(),
            11,
            "10 bounds and +Inf"
        );
        assert!(
            text.contains(r#"gotk_reconcile_condition{kind="Kustomization",name="apps",namespace="flux-system",type="Ready",status="True"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"gotk_reconcile_condition{kind="Kustomization",name="apps",namespace="flux-system",type="Ready",status="False"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"kustomize_controller_reconciles_total{result="success"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"kustomize_controller_applied_objects_total{action="created"} 2"#),
            "{text}"
        );
    }
}
