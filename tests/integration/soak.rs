//! The soak: 300 Kustomizations on intervals of 10–30 s, run for `SOAK_MINUTES` (default 30)
//! on a control plane of the test's own while new revisions, out-of-band edits and deletions
//! keep arriving. At the end the controller must look as it did after warm-up: resident memory
//! within a generous bound of the warmed-up value, no more tokio tasks, every Kustomization
//! Ready at its latest revision with its objects as built, and a quiet interval costing the
//! API server what it cost before the churn.
//!
//! Long by design, so it is ignored in the default run: `make chaos` runs it with
//! `cargo test --test integration -- --include-ignored soak`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kustomize_controller::api::Kustomization;
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::json;

use crate::support::artifacts::{self, ArtifactServer, Reply, test_archive};
use crate::support::controller::{ControllerProcess, OBJECTS_KUSTOMIZATION, apply_kustomization};
use crate::support::own_plane::OwnControlPlane;
use crate::support::{TestNamespace, install_crd};

const KUSTOMIZATIONS: usize = 300;
/// The longest interval: a quiet window spans two of them, so every Kustomization runs in it.
const MAX_INTERVAL_S: u64 = 30;
const QUIET_WINDOW: Duration = Duration::from_secs(2 * MAX_INTERVAL_S);
/// The resources the controller reads and writes for these Kustomizations; the window's
/// request count is theirs (leases and the control plane's own work are background).
const CONTROLLER_RESOURCES: [&str; 4] = ["kustomizations", "configmaps", "gitrepositories", "events"];
const DRIFT_MANAGER: &str = "soak-drift";

/// xorshift64*: the test's randomness, from a seed it prints so a failed run can be repeated
/// (`SOAK_SEED`).
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn revision(&mut self) -> String {
        let hex: String = (0..3).map(|_| format!("{:016x}", self.next())).collect();
        format!("main@sha1:{}", &hex[..40])
    }
}

fn name(i: usize) -> String {
    format!("k{i:03}")
}

/// Each Kustomization owns two ConfigMaps whose data depends on its revision.
fn config_maps_of(i: usize) -> [String; 2] {
    [format!("{}-a", name(i)), format!("{}-b", name(i))]
}

fn objects_yaml(i: usize, revision: &str) -> String {
    config_maps_of(i)
        .iter()
        .map(|cm| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {cm}\ndata:\n  value: \"{revision}\"\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// `VmRSS` of `pid` in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("the controller (pid {pid}) is gone: {e}"));
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kb / 1024.0
}

/// `apiserver_request_total` summed by resource.
async fn served_by_resource(client: &Client) -> BTreeMap<String, f64> {
    let request = hyper::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client
        .request_text(request)
        .await
        .expect("the API server's /metrics");
    let mut out = BTreeMap::new();
    for (labels, value) in text
        .lines()
        .filter_map(|l| l.strip_prefix("apiserver_request_total{"))
        .filter_map(|l| l.rsplit_once("} "))
    {
        let resource = labels
            .split(',')
            .find_map(|l| l.strip_prefix("resource=\""))
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or("")
            .to_string();
        *out.entry(resource).or_default() += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// What one quiet window cost and how the controller looked at its end.
#[derive(Debug)]
struct Quiet {
    /// API server requests on [`CONTROLLER_RESOURCES`] during the window, in all and by
    /// resource.
    requests: f64,
    by_resource: BTreeMap<String, f64>,
    /// Every API server request during the window, background included.
    all_requests: f64,
    tasks: f64,
    rss_mib: f64,
}

struct Soak {
    client: Client,
    server: ArtifactServer,
    namespace: String,
    /// The latest revision published for each Kustomization.
    revisions: Vec<String>,
    random: Random,
    peak_rss: f64,
}

impl Soak {
    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn kustomizations(&self) -> Api<Kustomization> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Serves revision `revision` of Kustomization `i`'s tree and sets it on its GitRepository.
    async fn publish(&mut self, i: usize, revision: String) {
        let objects = objects_yaml(i, &revision);
        let bytes = test_archive::tar_gz(&[
            test_archive::file("kustomization.yaml", OBJECTS_KUSTOMIZATION),
            test_archive::file("objects.yaml", &objects),
        ]);
        let path = format!("/{}/{}.tar.gz", name(i), revision.replace([':', '@'], "-"));
        let url = self.server.route(&path, Reply::Serve(bytes.clone()));
        let artifact = artifacts::artifact_json(&url, &revision, &bytes);
        artifacts::publish_artifact(
            &self.client,
            SourceKind::GitRepository,
            &self.namespace,
            &name(i),
            artifact,
        )
        .await;
        self.revisions[i] = revision;
    }

    async fn apply(&mut self, i: usize) {
        let interval = 10 + self.random.below(21);
        let spec = json!({
            "interval": format!("{interval}s"), "prune": true, "timeout": "1m",
            "targetNamespace": self.namespace,
            "sourceRef": {"kind": "GitRepository", "name": name(i)},
        });
        apply_kustomization(&self.client, &self.namespace, &name(i), spec).await;
    }

    /// The Kustomizations not yet Ready at their latest revision, and the ConfigMaps that
    /// differ from their latest build (missing or edited), by name.
    async fn unsettled(&self) -> (Vec<String>, Vec<String>) {
        let list = self
            .kustomizations()
            .list(&ListParams::default())
            .await
            .expect("list Kustomizations");
        let by_name: BTreeMap<_, _> = list
            .items
            .into_iter()
            .map(|k| (k.metadata.name.clone().unwrap_or_default(), k))
            .collect();
        let stuck = (0..KUSTOMIZATIONS)
            .filter(|&i| {
                let settled = by_name
                    .get(&name(i))
                    .and_then(|k| k.status.as_ref())
                    .is_some_and(|s| {
                        s.last_applied_revision.as_deref() == Some(self.revisions[i].as_str())
                            && s.conditions.iter().any(|c| {
                                c.type_ == "Ready"
                                    && c.status == "True"
                                    && c.message == format!("Applied revision: {}", self.revisions[i])
                            })
                    });
                !settled
            })
            .map(name)
            .collect();
        let cms = self
            .config_maps()
            .list(&ListParams::default())
            .await
            .expect("list ConfigMaps");
        let values: BTreeMap<_, _> = cms
            .items
            .into_iter()
            .map(|cm| {
                let value = cm.data.and_then(|d| d.get("value").cloned());
                (cm.metadata.name.unwrap_or_default(), value)
            })
            .collect();
        let drifted = (0..KUSTOMIZATIONS)
            .flat_map(|i| config_maps_of(i).map(|cm| (i, cm)))
            .filter(|(i, cm)| {
                values.get(cm).cloned().flatten().as_deref() != Some(self.revisions[*i].as_str())
            })
            .map(|(_, cm)| cm)
            .collect();
        (stuck, drifted)
    }

    /// Waits until every Kustomization is Ready at its latest revision and every ConfigMap is
    /// as built; fails naming what is stuck.
    async fn settle(&mut self, controller: &ControllerProcess, what: &str, limit: Duration) {
        let started = Instant::now();
        loop {
            let (stuck, drifted) = self.unsettled().await;
            self.sample_rss(controller);
            if stuck.is_empty() && drifted.is_empty() {
                eprintln!("soak: {what}: settled in {:.0?}", started.elapsed());
                return;
            }
            if started.elapsed() > limit {
                let first = stuck.first().cloned().unwrap_or_default();
                let status = self
                    .kustomizations()
                    .get_opt(&first)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|k| k.status);
                panic!(
                    "{what}: not settled after {limit:?}: {} Kustomizations stuck {stuck:?}, {} ConfigMaps not as built {drifted:?}; {first}: {status:?}",
                    stuck.len(),
                    drifted.len()
                );
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    fn sample_rss(&mut self, controller: &ControllerProcess) -> f64 {
        let rss = rss_mib(controller.pid());
        self.peak_rss = self.peak_rss.max(rss);
        rss
    }

    /// A window of [`QUIET_WINDOW`] in which the test sends nothing but the two reads of the
    /// API server's counters.
    async fn quiet(&mut self, controller: &ControllerProcess) -> Quiet {
        let before = served_by_resource(&self.client).await;
        tokio::time::sleep(QUIET_WINDOW).await;
        let after = served_by_resource(&self.client).await;
        let by_resource: BTreeMap<String, f64> = after
            .iter()
            .map(|(resource, n)| (resource.clone(), n - before.get(resource).copied().unwrap_or(0.0)))
            .filter(|(_, n)| *n > 0.0)
            .collect();
        let delta = |keep: &dyn Fn(&str) -> bool| -> f64 {
            by_resource
                .iter()
                .filter(|(resource, _)| keep(resource))
                .map(|(_, n)| n)
                .sum()
        };
        let tasks = controller
            .metric("kustomize_controller_tokio_alive_tasks ")
            .await
            .expect("the controller's tokio task gauge");
        Quiet {
            requests: delta(&|r| CONTROLLER_RESOURCES.contains(&r)),
            all_requests: delta(&|_| true),
            by_resource,
            tasks,
            rss_mib: self.sample_rss(controller),
        }
    }

    /// One disturbance: a new revision, an out-of-band edit of a ConfigMap, a deleted
    /// ConfigMap, or a Kustomization deleted (its objects pruned) and created again.
    async fn disturb(&mut self, counts: &mut BTreeMap<&'static str, usize>) {
        let i = self.random.below(KUSTOMIZATIONS);
        let cm = config_maps_of(i)[self.random.below(2)].clone();
        let what = match self.random.below(10) {
            0..=3 => {
                let revision = self.random.revision();
                self.publish(i, revision).await;
                "new revision"
            }
            4..=6 => {
                let patch = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"value": "drifted"}});
                let params = PatchParams::apply(DRIFT_MANAGER).force();
                if self
                    .config_maps()
                    .patch(&cm, &params, &Patch::Apply(patch))
                    .await
                    .is_err()
                {
                    return; // deleted a moment ago: nothing to edit
                }
                "out-of-band edit"
            }
            7..=8 => {
                if self
                    .config_maps()
                    .delete(&cm, &DeleteParams::default())
                    .await
                    .is_err()
                {
                    return;
                }
                "ConfigMap deleted"
            }
            _ => {
                let api = self.kustomizations();
                api.delete(&name(i), &DeleteParams::default())
                    .await
                    .expect("delete Kustomization");
                let deadline = Instant::now() + Duration::from_secs(120);
                while api.get_opt(&name(i)).await.expect("get Kustomization").is_some() {
                    assert!(
                        Instant::now() < deadline,
                        "Kustomization {} not finalized in 2m",
                        name(i)
                    );
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                self.apply(i).await;
                "Kustomization recreated"
            }
        };
        *counts.entry(what).or_default() += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs SOAK_MINUTES (default 30): `make chaos` runs it with `-- --include-ignored soak`"]
async fn soak_300_kustomizations_stay_flat() {
    let minutes: u64 =
        std::env::var("SOAK_MINUTES").map_or(30, |v| v.parse().expect("SOAK_MINUTES is a number"));
    let seed: u64 = std::env::var("SOAK_SEED").map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        },
        |v| v.parse().expect("SOAK_SEED is a number"),
    );
    eprintln!("soak: {KUSTOMIZATIONS} Kustomizations for {minutes} min, SOAK_SEED={seed}");

    let plane = OwnControlPlane::up("kc-soak");
    let client = plane.client().await;
    install_crd(&client, &kustomize_controller::api::kustomization::crd()).await;
    crate::support::flux::install_source_controller_crds(&client).await;
    let ns = TestNamespace::new(&client, "soak").await;
    let mut soak = Soak {
        client: client.clone(),
        server: ArtifactServer::start().await,
        namespace: ns.name.clone(),
        revisions: vec![String::new(); KUSTOMIZATIONS],
        random: Random(seed),
        peak_rss: 0.0,
    };

    let controller = ControllerProcess::start_with_kubeconfig(&soak.namespace, &plane.kubeconfig(), &[]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start_rss = soak.sample_rss(&controller);

    for i in 0..KUSTOMIZATIONS {
        let revision = soak.random.revision();
        soak.publish(i, revision).await;
        soak.apply(i).await;
    }
    soak.settle(&controller, "first apply", Duration::from_secs(15 * 60))
        .await;
    // Warm-up: every Kustomization has run its no-op interval at least once.
    tokio::time::sleep(Duration::from_secs(MAX_INTERVAL_S)).await;
    let warm = soak.quiet(&controller).await;
    eprintln!("soak: warmed up: {warm:?}");

    let mut counts = BTreeMap::new();
    let started = Instant::now();
    let mut next_report = Duration::from_secs(60);
    while started.elapsed() < Duration::from_secs(minutes * 60) {
        soak.disturb(&mut counts).await;
        let rss = soak.sample_rss(&controller);
        if started.elapsed() >= next_report {
            let tasks = controller.metric("kustomize_controller_tokio_alive_tasks ").await;
            eprintln!(
                "soak: {:>3} min: RSS {rss:.1} MiB (peak {:.1}), tasks {tasks:?}, disturbances {counts:?}",
                started.elapsed().as_secs() / 60,
                soak.peak_rss
            );
            next_report += Duration::from_secs(60);
        }
        tokio::time::sleep(Duration::from_millis(500 + soak.random.below(1500) as u64)).await;
    }

    soak.settle(&controller, "after the churn", Duration::from_secs(5 * 60))
        .await;
    tokio::time::sleep(Duration::from_secs(MAX_INTERVAL_S)).await;
    let end = soak.quiet(&controller).await;
    let (stuck, drifted) = soak.unsettled().await;
    let own = controller.api_requests().await;
    eprintln!(
        "soak: RSS start {start_rss:.1} MiB, after warm-up {:.1}, end {:.1}, peak {:.1}",
        warm.rss_mib, end.rss_mib, soak.peak_rss
    );
    eprintln!(
        "soak: tokio tasks after warm-up {}, end {}",
        warm.tasks, end.tasks
    );
    eprintln!(
        "soak: API server requests per {QUIET_WINDOW:?} quiet window on {CONTROLLER_RESOURCES:?}: warm {} / end {} (all resources: {} / {})",
        warm.requests, end.requests, warm.all_requests, end.all_requests
    );
    eprintln!(
        "soak: quiet window by resource: warm {:?} / end {:?}",
        warm.by_resource, end.by_resource
    );
    eprintln!("soak: disturbances {counts:?}; controller's own request counts {own:?}");

    assert!(
        stuck.is_empty() && drifted.is_empty(),
        "after the quiet window: stuck {stuck:?}, not as built {drifted:?}"
    );
    let rss_bound = warm.rss_mib + (warm.rss_mib / 2.0).max(32.0);
    assert!(
        end.rss_mib <= rss_bound,
        "RSS grew from {:.1} MiB after warm-up to {:.1} MiB (bound {rss_bound:.1})",
        warm.rss_mib,
        end.rss_mib
    );
    let task_bound = warm.tasks + (warm.tasks / 10.0).max(10.0);
    assert!(
        end.tasks <= task_bound,
        "tokio tasks grew from {} after warm-up to {} (bound {task_bound})",
        warm.tasks,
        end.tasks
    );
    let request_bound = warm.requests * 1.25 + 20.0;
    assert!(
        end.requests <= request_bound,
        "a quiet window cost {} requests after the churn, {} after warm-up (bound {request_bound})",
        end.requests,
        warm.requests
    );
    drop(controller);
    ns.delete().await;
}
