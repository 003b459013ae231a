//! controller-runtime's metrics, which Flux's dashboards and alerts read beside `gotk_*`:
//! `controller_runtime_reconcile_{total,errors_total,time_seconds}`,
//! `controller_runtime_{active_workers,max_concurrent_reconciles}` and the work queue's
//! `workqueue_{work_duration_seconds,unfinished_work_seconds,
//! longest_running_processor_seconds,retries_total}`, each labelled with the controller's
//! name (`kustomization`), as controller-runtime labels them.
//!
//! kube-runtime keeps its queue to itself, so the queue's `depth`, `adds_total` and
//! `queue_duration_seconds` are not exposed: a number that only looks like them would mislead.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets.
const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25,
    1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0,
    50.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    controller: String,
}

fn controller_labels(name: &str) -> ControllerLabels {
    ControllerLabels {
        controller: name.into(),
    }
}

/// controller-runtime names a controller's work queue after the controller.
fn queue_labels(name: &str) -> QueueLabels {
    QueueLabels {
        name: name.into(),
        controller: name.into(),
    }
}

/// How a reconcile ended, in controller-runtime's `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Returned an error.
    Error,
    /// Succeeded and asked to run again after a while (Flux's interval).
    RequeueAfter,
    /// Succeeded and waits for a change.
    Success,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::RequeueAfter => "requeue_after",
            Self::Success => "success",
        }
    }
}

/// Reconciles running now, by controller and when they started; shared by the controllers of
/// one process so that each gauge is one family.
#[derive(Clone, Debug, Default)]
struct InFlight {
    started: Arc<Mutex<BTreeMap<&'static str, HashMap<u64, Instant>>>>,
    next: Arc<AtomicU64>,
}

impl InFlight {
    fn elapsed(&self) -> Vec<(&'static str, Vec<Duration>)> {
        let now = Instant::now();
        let started = self.started.lock().expect("in-flight lock");
        started
            .iter()
            .map(|(controller, running)| {
                (
                    *controller,
                    running.values().map(|s| now.duration_since(*s)).collect(),
                )
            })
            .collect()
    }
}

impl Collector for InFlight {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let elapsed = self.elapsed();
        type Gauge = fn(&'static str, &[Duration]) -> (Vec<(String, String)>, f64);
        let gauges: [(&str, &str, Gauge); 3] = [
            (
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                |controller, running| controller_gauge(controller, running.len() as f64),
            ),
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration.",
                |controller, running| {
                    queue_gauge(controller, running.iter().map(Duration::as_secs_f64).sum())
                },
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                |controller, running| {
                    queue_gauge(
                        controller,
                        running.iter().max().map_or(0.0, Duration::as_secs_f64),
                    )
                },
            ),
        ];
        for (name, help, gauge) in gauges {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (controller, running) in &elapsed {
                let (labels, value) = gauge(controller, running);
                ConstGauge::new(value).encode(metric.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

fn controller_gauge(name: &str, value: f64) -> (Vec<(String, String)>, f64) {
    (vec![("controller".into(), name.into())], value)
}

fn queue_gauge(name: &str, value: f64) -> (Vec<(String, String)>, f64) {
    (
        vec![("name".into(), name.into()), ("controller".into(), name.into())],
        value,
    )
}

/// controller-runtime's metrics of one controller.
#[derive(Debug)]
pub struct RuntimeMetrics {
    /// The controller's name, the metrics' label.
    controller: &'static str,
    total: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    time: Family<ControllerLabels, Histogram>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    work_duration: Family<QueueLabels, Histogram>,
    retries: Family<QueueLabels, Counter>,
    in_flight: InFlight,
}

impl RuntimeMetrics {
    /// Registers the metrics of the controller `controller` (controller-runtime's name).
    pub(crate) fn register(registry: &mut Registry, controller: &'static str) -> Self {
        let metrics = Self {
            controller,
            total: Family::default(),
            errors: Family::default(),
            time: Family::new_with_constructor(|| Histogram::new(RECONCILE_TIME_BUCKETS)),
            max_concurrent: Family::default(),
            // The work queue's: 10 ns times powers of ten, 12 buckets.
            work_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(10e-9, 10.0, 12))
            }),
            retries: Family::default(),
            in_flight: InFlight::default(),
        };
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            metrics.total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            metrics.errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            metrics.time.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            metrics.max_concurrent.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            metrics.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            metrics.retries.clone(),
        );
        registry.register_collector(Box::new(metrics.in_flight.clone()));
        metrics.initialize();
        metrics
    }

    /// The metrics of another controller of the same process, in the same families (a family
    /// registered twice would be exposed twice).
    pub fn for_controller(&self, controller: &'static str) -> Self {
        let metrics = Self {
            controller,
            total: self.total.clone(),
            errors: self.errors.clone(),
            time: self.time.clone(),
            max_concurrent: self.max_concurrent.clone(),
            work_duration: self.work_duration.clone(),
            retries: self.retries.clone(),
            in_flight: self.in_flight.clone(),
        };
        metrics.initialize();
        metrics
    }

    /// Present from the start, as controller-runtime initializes them.
    fn initialize(&self) {
        for outcome in [Outcome::Error, Outcome::RequeueAfter, Outcome::Success] {
            let _ = self.total.get_or_create(&self.result(outcome));
        }
        let _ = self.errors.get_or_create(&controller_labels(self.controller));
        let _ = self.retries.get_or_create(&queue_labels(self.controller));
        self.in_flight
            .started
            .lock()
            .expect("in-flight lock")
            .entry(self.controller)
            .or_default();
    }

    /// `--concurrent`.
    pub fn set_max_concurrent(&self, workers: u16) {
        self.max_concurrent
            .get_or_create(&controller_labels(self.controller))
            .set(i64::from(workers));
    }

    /// A failed reconcile handed back to the queue to be retried.
    pub fn record_retry(&self) {
        self.retries.get_or_create(&queue_labels(self.controller)).inc();
    }

    /// Marks a reconcile as running until [`Worker::finish`].
    pub fn start(&self) -> Worker<'_> {
        let id = self.in_flight.next.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        self.in_flight
            .started
            .lock()
            .expect("in-flight lock")
            .entry(self.controller)
            .or_default()
            .insert(id, started);
        Worker {
            metrics: self,
            id,
            started,
        }
    }

    fn result(&self, outcome: Outcome) -> ResultLabels {
        ResultLabels {
            controller: self.controller.into(),
            result: outcome.label().into(),
        }
    }
}

/// One running reconcile, counted as an active worker until it finishes (or is dropped).
pub struct Worker<'a> {
    metrics: &'a RuntimeMetrics,
    id: u64,
    started: Instant,
}

impl Worker<'_> {
    pub fn finish(self, outcome: Outcome) {
        let m = self.metrics;
        let elapsed = self.started.elapsed().as_secs_f64();
        m.total.get_or_create(&m.result(outcome)).inc();
        if outcome == Outcome::Error {
            m.errors.get_or_create(&controller_labels(m.controller)).inc();
        }
        m.time
            .get_or_create(&controller_labels(m.controller))
            .observe(elapsed);
        m.work_duration
            .get_or_create(&queue_labels(m.controller))
            .observe(elapsed);
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        let mut started = self.metrics.in_flight.started.lock().expect("in-flight lock");
        if let Some(running) = started.get_mut(self.metrics.controller) {
            running.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::testing::KUSTOMIZATION;

    #[test]
    fn reconciles_are_counted_as_controller_runtime_counts_them() {
        let mut registry = Registry::default();
        let metrics = RuntimeMetrics::register(&mut registry, KUSTOMIZATION.controller);
        metrics.set_max_concurrent(4);
        metrics.start().finish(Outcome::RequeueAfter);
        metrics.start().finish(Outcome::Error);
        metrics.record_retry();
        let running = metrics.start();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"controller_runtime_reconcile_total{controller="kustomization",result="requeue_after"} 1"#,
            r#"controller_runtime_reconcile_total{controller="kustomization",result="error"} 1"#,
            r#"controller_runtime_reconcile_total{controller="kustomization",result="success"} 0"#,
            r#"controller_runtime_reconcile_errors_total{controller="kustomization"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_bucket{le="60.0",controller="kustomization"} 2"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="kustomization"} 2"#,
            r#"controller_runtime_max_concurrent_reconciles{controller="kustomization"} 4"#,
            r#"controller_runtime_active_workers{controller="kustomization"} 1"#,
            r#"workqueue_retries_total{name="kustomization",controller="kustomization"} 1"#,
            r#"workqueue_work_duration_seconds_count{name="kustomization",controller="kustomization"} 2"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(text.contains("workqueue_longest_running_processor_seconds{name=\"kustomization\",controller=\"kustomization\"}"), "{text}");
        drop(running);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"controller_runtime_active_workers{controller="kustomization"} 0"#),
            "{text}"
        );
    }

    #[test]
    fn a_second_controller_shares_the_families() {
        let mut registry = Registry::default();
        let first = RuntimeMetrics::register(&mut registry, "imagerepository");
        let second = first.for_controller("imagepolicy");
        second.record_retry();
        let _running = second.start();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"workqueue_retries_total{name="imagepolicy",controller="imagepolicy"} 1"#,
            r#"workqueue_retries_total{name="imagerepository",controller="imagerepository"} 0"#,
            r#"controller_runtime_active_workers{controller="imagepolicy"} 1"#,
            r#"controller_runtime_active_workers{controller="imagerepository"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert_eq!(
            text.matches("# TYPE controller_runtime_active_workers").count(),
            1,
            "{text}"
        );
        assert_eq!(text.matches("# TYPE workqueue_retries").count(), 1, "{text}");
    }
}
