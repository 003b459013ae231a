//! Logs and metrics of a controller.
//!
//! Metric names users' dashboards depend on keep Flux's spelling
//! (`gotk_reconcile_duration_seconds`, `gotk_reconcile_condition`); the rest are ours, named
//! after the controller ([`ControllerIdentity::metrics_prefix`]).

use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::client::RequestCounts;
use crate::identity::ControllerIdentity;

mod controller_runtime;
pub mod logs;

pub use controller_runtime::{Outcome, RuntimeMetrics, Worker};

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
pub fn init_logs(level: &str, encoding: LogEncoding) {
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
pub struct ObjectLabels {
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
pub enum ReconcileResult {
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
pub struct Metrics {
    registry: Registry,
    /// The prefix of the metrics that are the controller's own.
    prefix: &'static str,
    /// controller-runtime's reconcile and work queue metrics.
    pub runtime: RuntimeMetrics,
    reconcile_duration: Family<ObjectLabels, Histogram>,
    reconcile_condition: Family<ConditionLabels, Gauge>,
    reconciles: Family<ResultLabels, Counter>,
    applied_objects: Family<ActionLabels, Counter>,
}

impl Metrics {
    /// The metrics of the controller `identity`, none recorded yet.
    pub fn new(identity: &ControllerIdentity) -> Self {
        let prefix = identity.metrics_prefix;
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
            format!("{prefix}_reconciles"),
            "Reconciles by result",
            reconciles.clone(),
        );
        let applied_objects = Family::default();
        registry.register(
            format!("{prefix}_applied_objects"),
            "Objects changed by apply and prune, by action",
            applied_objects.clone(),
        );
        let runtime = RuntimeMetrics::register(&mut registry, identity.controller);
        registry.register_collector(Box::new(AliveTasks { prefix }));
        Self {
            registry,
            prefix,
            runtime,
            reconcile_duration,
            reconcile_condition,
            reconciles,
            applied_objects,
        }
    }

    /// Exposes the API requests counted by the client layer, by verb.
    pub fn register_api_requests(&mut self, counts: RequestCounts) {
        self.registry.register_collector(Box::new(ApiRequests {
            prefix: self.prefix,
            counts,
        }));
    }

    pub fn record_reconcile(&self, object: &ObjectLabels, elapsed: Duration, result: ReconcileResult) {
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
    pub fn record_ready(&self, object: &ObjectLabels, status: Option<&str>) {
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
    pub fn record_action(&self, action: &str, count: u64) {
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

/// `<prefix>_api_requests_total{verb,resource}` and client-go's
/// `rest_client_requests_total{code,host,method}`, read from the counting client layer at
/// scrape time. `resource` is the plural with its group (`deployments.apps`), empty for
/// discovery.
#[derive(Debug)]
struct ApiRequests {
    prefix: &'static str,
    counts: RequestCounts,
}

impl Collector for ApiRequests {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let name = format!("{}_api_requests", self.prefix);
        let mut metric = encoder.encode_descriptor(
            &name,
            "Kubernetes API requests made by the controller, by verb and resource",
            None,
            MetricType::Counter,
        )?;
        for (key, count) in self.counts.snapshot() {
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
        for (key, count) in self.counts.responses() {
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

/// `<prefix>_tokio_alive_tasks`: the tasks alive in the runtime at scrape time, so a leak of
/// spawned tasks shows as growth over a long run.
#[derive(Debug)]
struct AliveTasks {
    prefix: &'static str,
}

impl Collector for AliveTasks {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A scrape outside a runtime (none in the controller) has nothing to count.
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Ok(());
        };
        let name = format!("{}_tokio_alive_tasks", self.prefix);
        let metric = encoder.encode_descriptor(
            &name,
            "Tokio tasks alive in the controller's runtime",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(handle.metrics().num_alive_tasks() as i64).encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::testing::{IMAGE_REPOSITORY, KUSTOMIZATION};

    #[tokio::test]
    async fn alive_tasks_gauge_counts_the_runtimes_tasks() {
        let metrics = Metrics::new(&KUSTOMIZATION);
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
        let metrics = Metrics::new(&KUSTOMIZATION);
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

    #[test]
    fn another_controller_has_metrics_of_its_own_names() {
        let metrics = Metrics::new(&IMAGE_REPOSITORY);
        metrics.runtime.start().finish(Outcome::Success);
        metrics.record_action("created", 1);
        let text = metrics.encode();
        for line in [
            r#"controller_runtime_reconcile_total{controller="imagerepository",result="success"} 1"#,
            r#"image_reflector_controller_applied_objects_total{action="created"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("kustomiz"), "{text}");
    }
}
