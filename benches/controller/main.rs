//! Our controller beside Flux's kustomize-controller, one after the other, on the same workloads,
//! sources and CRDs (`make bench-controller`). For each workload and each controller it restarts
//! the control plane afresh (when `E2E_STATE` names it), starts the controller on a new
//! namespace, drives the workload and prints one
//! table: wall time, API requests as the API server counts them, CPU seconds and peak RSS of the
//! controller process, and the ratios.
//!
//! Requests are the sum of the API server's `apiserver_request_total` over the phase, less the
//! requests this program made (counted as it makes them), less the background rate measured
//! before any controller runs, and without the requests on resources neither kustomize-controller
//! touches (ReplicaSets, Pods, EndpointSlices, Leases, Nodes, Deployment status): those are
//! kube-controller-manager's and the fake kubelet's reaction to the rollouts.
//!
//! Sources are GitRepository objects (source-controller's CRD) whose status this program writes,
//! with artifacts it serves over HTTP; no source-controller runs.
//!
//! Environment: `KUBECONFIG`; `E2E_STATE`, the control plane's state directory (its pid files
//! give the control plane's CPU per phase); `FLUX_KC_BIN`, the directory `e2e/fluxkc/build.sh` prints (Flux's
//! binary and crds/); `BENCH_CONTROLLER`, our binary (default target/release/kustomize-controller);
//! `BENCH_SCALE`, a factor on every workload size for quick runs (default 1); `BENCH_ONLY`, the
//! workloads to run, comma-separated among `single`, `wait` and `fleet` (default all);
//! `BENCH_PEERS`, `flux` or `ours` to run one controller alone (to profile it); `BENCH_LOG_LEVEL`,
//! the controllers' log level (default error); `BENCH_BREAKDOWN`, print each phase's requests
//! by verb and resource.
//! The namespaces are left behind for inspection: run it on a control plane of its own.

mod process;
mod source;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use process::{Binaries, Controller, NOT_SELECTED, Peer, control_plane_cpu, flags, usage};
use source::{ArtifactServer, artifact_files, config_map, deployment, fleet_app, now};

/// Resources only the control plane's own controllers write while a rollout happens.
const CONTROL_PLANE_RESOURCES: &[&str] = &["replicasets", "pods", "endpointslices", "leases", "nodes"];

/// The bench's client: every request it makes is counted so it can be taken out of the API
/// server's count.
struct Bench {
    /// Replaced with each fresh control plane.
    client: std::sync::Mutex<Client>,
    own: AtomicU64,
    background_per_sec: f64,
    artifacts: ArtifactServer,
    binaries: Binaries,
    logs: PathBuf,
    run: String,
}

fn kustomizations() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

fn git_repositories() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "GitRepository"),
        "gitrepositories",
    )
}

fn config_maps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

/// What one phase cost one controller.
struct Sample {
    wall: Duration,
    requests: f64,
    cpu: f64,
    /// CPU seconds of the control plane's processes over the phase.
    plane_cpu: f64,
    peak_rss_kib: u64,
}

impl Bench {
    fn client(&self) -> Client {
        self.client.lock().expect("bench client lock").clone()
    }

    /// Starts each controller's run of a workload on a control plane of its own, fresh, with
    /// the CRDs applied: on one shared plane the controller that runs second pays for the
    /// first one's thousands of objects (the same binary measured 5.9 s on a fresh plane and
    /// 8.3 s after Flux's run). Only when `E2E_STATE` names the plane to restart.
    async fn fresh_plane(&self) {
        let Ok(state) = std::env::var("E2E_STATE") else {
            return;
        };
        let cluster = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/cluster.sh");
        for verb in ["down", "up"] {
            let status = std::process::Command::new(cluster)
                .arg(verb)
                .env("E2E_STATE", &state)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("e2e/cluster.sh");
            assert!(status.success(), "e2e/cluster.sh {verb} failed");
        }
        let client = Client::try_default().await.expect("KUBECONFIG");
        apply_crds(&client, &self.binaries.flux_dir.join("crds")).await;
        *self.client.lock().expect("bench client lock") = client;
    }

    fn count(&self, n: u64) {
        self.own.fetch_add(n, Ordering::SeqCst);
    }

    fn api(&self, ns: &str, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(), ns, resource)
    }

    /// The API server's request counts so far, without the control plane's own resources.
    /// Reading /metrics is not itself counted there.
    async fn served(&self) -> BTreeMap<String, f64> {
        let request = hyper::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = self
            .client()
            .request_text(request)
            .await
            .expect("the API server's /metrics");
        served_requests(&text)
    }

    async fn apply_all(&self, api: &Api<DynamicObject>, objects: Vec<Value>) {
        self.count(objects.len() as u64);
        let params = PatchParams::apply("bench").force();
        futures::stream::iter(objects)
            .map(|o| {
                let params = params.clone();
                async move {
                    let name = o["metadata"]["name"].as_str().unwrap().to_string();
                    api.patch(&name, &params, &Patch::Apply(o)).await.map(|_| ())
                }
            })
            .buffer_unordered(8)
            .try_collect::<Vec<_>>()
            .await
            .expect("apply");
    }

    /// Points each named source at its artifact.
    async fn set_artifacts(&self, ns: &str, artifacts: Vec<(String, Value)>) {
        let api = self.api(ns, &git_repositories());
        self.count(artifacts.len() as u64);
        futures::stream::iter(artifacts)
            .map(|(name, artifact)| {
                let api = api.clone();
                async move {
                    let ready = json!({"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": "stored artifact", "lastTransitionTime": now(), "observedGeneration": 1});
                    let status = json!({"status": {"artifact": artifact, "conditions": [ready], "observedGeneration": 1}});
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await.map(|_| ())
                }
            })
            .buffer_unordered(8)
            .try_collect::<Vec<_>>()
            .await
            .expect("source status");
    }

    /// Waits until every named Kustomization satisfies `done`, the controller dies, or time is up.
    async fn wait(
        &self,
        ns: &str,
        names: usize,
        controller: &mut Controller,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Result<(), String> {
        let api = self.api(ns, &kustomizations());
        let started = Instant::now();
        // Listing a thousand Kustomizations loads the API server too: poll those less often.
        let pause = Duration::from_millis(match names {
            1 => 100,
            2..=100 => 500,
            _ => 2000,
        });
        loop {
            self.count(1);
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let items: Vec<Value> = list
                .items
                .into_iter()
                .map(|o| serde_json::to_value(o).unwrap())
                .collect();
            let finished = items.iter().filter(|ks| done(ks)).count();
            if finished == names {
                return Ok(());
            }
            if let Some(why) = controller.exited() {
                return Err(why);
            }
            if started.elapsed() > limit {
                let stuck = items
                    .iter()
                    .find(|ks| !done(ks))
                    .map_or("none created".into(), |ks| {
                        format!("{}: {}", ks["metadata"]["name"], ready_message(ks))
                    });
                return Err(format!(
                    "{finished}/{names} done after {}s; e.g. {stuck}; log tail: {}",
                    limit.as_secs(),
                    controller.log_tail()
                ));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Runs `phase` and measures what it cost the controller.
    async fn measure<F: std::future::Future<Output = Result<(), String>>>(
        &self,
        pid: u32,
        phase: F,
    ) -> Result<Sample, String> {
        let own_before = self.own.load(Ordering::SeqCst);
        let before_by_kind = self.served().await;
        let (cpu_before, _) = usage(pid);
        let plane_before = control_plane_cpu();
        let started = Instant::now();
        phase.await?;
        let wall = started.elapsed();
        let own = (self.own.load(Ordering::SeqCst) - own_before) as f64;
        let after_by_kind = self.served().await;
        let (cpu_after, peak_rss_kib) = usage(pid);
        let plane_cpu = control_plane_cpu() - plane_before;
        print_breakdown(&before_by_kind, &after_by_kind);
        let (before, after): (f64, f64) = (before_by_kind.values().sum(), after_by_kind.values().sum());
        let requests = after - before - own - self.background_per_sec * wall.as_secs_f64();
        Ok(Sample {
            wall,
            requests: requests.max(0.0),
            cpu: cpu_after - cpu_before,
            plane_cpu,
            peak_rss_kib,
        })
    }

    async fn namespace(&self, workload: &str, peer: Peer) -> String {
        let ns = format!("bench-{}-{workload}-{}", self.run, peer.name());
        let api: Api<DynamicObject> = Api::all_with(
            self.client(),
            &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
        );
        self.count(1);
        api.patch(
            &ns,
            &PatchParams::apply("bench"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
        )
        .await
        .unwrap();
        ns
    }

    /// Creates sources (with their artifacts) for `apps`, each app the objects of one Kustomization.
    async fn sources(&self, ns: &str, apps: &[(String, Vec<String>)], revision: &str) {
        let repos: Vec<Value> = apps
            .iter()
            .map(|(name, _)| {
                json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"interval": "60m", "url": format!("https://git.invalid/{name}")}})
            })
            .collect();
        self.apply_all(&self.api(ns, &git_repositories()), repos).await;
        let artifacts = apps
            .iter()
            .map(|(name, objects)| {
                let path = format!("{ns}/{name}/{revision}.tar.gz");
                (
                    name.clone(),
                    self.artifacts
                        .publish(&path, &format!("main@sha1:{revision}"), &artifact_files(objects)),
                )
            })
            .collect();
        self.set_artifacts(ns, artifacts).await;
    }

    async fn create_kustomizations(&self, ns: &str, names: impl Iterator<Item = String>, wait: bool) {
        let objects = names
            .map(|name| {
                json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"interval": "60m", "retryInterval": "30s", "prune": true, "wait": wait, "timeout": "5m",
                        "path": "./", "targetNamespace": ns,
                        "sourceRef": {"kind": "GitRepository", "name": name}}})
            })
            .collect();
        self.apply_all(&self.api(ns, &kustomizations()), objects).await;
    }
}

/// `apiserver_request_total` by verb and resource, without the series of the control plane's
/// own resources.
fn served_requests(metrics: &str) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    let series = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("apiserver_request_total{"))
        .filter_map(|l| l.rsplit_once("} "));
    for (labels, value) in series {
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or("")
                .to_string()
        };
        let (resource, subresource) = (label("resource"), label("subresource"));
        if CONTROL_PLANE_RESOURCES.contains(&resource.as_str())
            || (resource == "deployments" && subresource == "status")
        {
            continue;
        }
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let key = format!(
            "{} {resource}{}{subresource}",
            label("verb"),
            if subresource.is_empty() { "" } else { "/" }
        );
        *counts.entry(key).or_default() += value;
    }
    counts
}

/// With `BENCH_BREAKDOWN` set, prints a phase's requests by verb and resource (the bench's own
/// requests included), most first.
fn print_breakdown(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) {
    if std::env::var_os("BENCH_BREAKDOWN").is_none() {
        return;
    }
    let mut deltas: Vec<(f64, &String)> = after
        .iter()
        .map(|(key, n)| (n - before.get(key).copied().unwrap_or(0.0), key))
        .filter(|(d, _)| *d > 0.0)
        .collect();
    deltas.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (delta, key) in deltas {
        eprintln!("    {delta:>8.0}  {key}");
    }
}

fn condition<'a>(ks: &'a Value, kind: &str) -> Option<&'a Value> {
    ks["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn ready_message(ks: &Value) -> String {
    condition(ks, "Ready").map_or("no Ready condition".into(), |c| {
        format!("Ready={} {}", c["status"], c["message"])
    })
}

/// Ready at the current generation, with `revision` applied.
fn ready_at(ks: &Value, revision: &str) -> bool {
    condition(ks, "Ready").is_some_and(|c| c["status"] == "True")
        && ks["status"]["observedGeneration"] == ks["metadata"]["generation"]
        && ks["status"]["lastAppliedRevision"] == format!("main@sha1:{revision}")
}

/// One row of the table: a phase's samples for both controllers.
struct Row {
    workload: String,
    flux: Result<Sample, String>,
    ours: Result<Sample, String>,
}

/// One Kustomization of `n` ConfigMaps: cold apply, requested no-op, 1 % drift, a new revision
/// changing 1 %, a new revision dropping 10 %, quiet intervals, an out-of-band edit.
async fn single(bench: &Bench, peer: Peer, n: usize) -> Vec<(String, Result<Sample, String>)> {
    let labels = [
        format!("1 x {n} ConfigMaps: cold apply"),
        "  requested no-op reconcile".into(),
        "  1 % drift corrected".into(),
        "  new revision changing 1 %".into(),
        "  new revision dropping 10 % (prune)".into(),
        format!("  quiet: {} s at interval 10s", QUIET.as_secs()),
        "  an edit restored (ours: drift: correct; Flux: at its interval)".into(),
    ];
    if !peer.selected() {
        return labels
            .into_iter()
            .map(|l| (l, Err(NOT_SELECTED.to_string())))
            .collect();
    }
    bench.fresh_plane().await;
    let ns = bench.namespace("single", peer).await;
    let all: Vec<String> = (0..n)
        .map(|i| config_map(&format!("cm-{i}"), &i.to_string()))
        .collect();
    bench.sources(&ns, &[("app".into(), all)], "1111").await;
    let mut controller = Controller::start(&bench.binaries, peer, &ns, &bench.logs);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let limit = Duration::from_secs(600);
    let mut rows = Vec::new();
    let cold = bench
        .measure(controller.pid(), async {
            bench
                .create_kustomizations(&ns, std::iter::once("app".to_string()), false)
                .await;
            bench
                .wait(&ns, 1, &mut controller, limit, |ks| ready_at(ks, "1111"))
                .await
        })
        .await;
    let failed = cold.is_err();
    rows.push((labels[0].clone(), cold));
    if failed {
        controller.stop();
        return rows;
    }
    let api = bench.api(&ns, &kustomizations());
    let patch_app = |patch: Value| {
        let api = api.clone();
        async move {
            bench.count(1);
            api.patch("app", &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    };
    let request = |at: &'static str| {
        patch_app(json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": at}}}))
    };
    let handled = |at: &'static str| {
        move |ks: &Value| {
            ks["status"]["lastHandledReconcileAt"] == at && ready_message(ks).starts_with("Ready=\"True\"")
        }
    };
    let noop = bench
        .measure(controller.pid(), async {
            request("noop").await?;
            bench.wait(&ns, 1, &mut controller, limit, handled("noop")).await
        })
        .await;
    rows.push((labels[1].clone(), noop));

    let cms = bench.api(&ns, &config_maps());
    let drifted: Vec<String> = (0..n).step_by(100).map(|i| format!("cm-{i}")).collect();
    for name in &drifted {
        bench.count(1);
        let patch = json!({"data": {"value": "drifted"}});
        cms.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }
    let drift = bench
        .measure(controller.pid(), async {
            request("drift").await?;
            bench.wait(&ns, 1, &mut controller, limit, handled("drift")).await
        })
        .await;
    let mut left = Vec::new();
    for name in &drifted {
        bench.count(1);
        let cm = cms.get(name).await.unwrap();
        if cm.data["data"]["value"] == "drifted" {
            left.push(name.clone());
        }
    }
    rows.push((
        labels[2].clone(),
        drift.and_then(|s| {
            if left.is_empty() {
                Ok(s)
            } else {
                Err(format!("drift left in place on {}", left.join(", ")))
            }
        }),
    ));

    // every hundredth ConfigMap gets a new value (at least one)
    let pick = 50.min(n - 1);
    let changed = |i: usize| {
        if i % 100 == pick {
            format!("{i}-changed")
        } else {
            i.to_string()
        }
    };
    let one_percent: Vec<String> = (0..n)
        .map(|i| config_map(&format!("cm-{i}"), &changed(i)))
        .collect();
    let artifact = bench.artifacts.publish(
        &format!("{ns}/app/1515.tar.gz"),
        "main@sha1:1515",
        &artifact_files(&one_percent),
    );
    let revision = bench
        .measure(controller.pid(), async {
            bench.set_artifacts(&ns, vec![("app".into(), artifact)]).await;
            bench
                .wait(&ns, 1, &mut controller, limit, |ks| ready_at(ks, "1515"))
                .await
        })
        .await;
    let probe = format!("cm-{pick}");
    bench.count(1);
    let value = cms.get(&probe).await.map(|cm| cm.data["data"]["value"].clone());
    let expected = changed(pick);
    rows.push((
        labels[3].clone(),
        revision.and_then(|s| match value {
            Ok(v) if v == expected.as_str() => Ok(s),
            other => Err(format!("{probe} is {other:?}, expected {expected}")),
        }),
    ));

    let kept: Vec<String> = (0..n)
        .filter(|i| i % 10 != 0)
        .map(|i| config_map(&format!("cm-{i}"), &i.to_string()))
        .collect();
    let artifact = bench.artifacts.publish(
        &format!("{ns}/app/2222.tar.gz"),
        "main@sha1:2222",
        &artifact_files(&kept),
    );
    let revision = bench
        .measure(controller.pid(), async {
            bench.set_artifacts(&ns, vec![("app".into(), artifact)]).await;
            bench
                .wait(&ns, 1, &mut controller, limit, |ks| ready_at(ks, "2222"))
                .await
        })
        .await;
    bench.count(1);
    let remaining = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with("cm-")))
        .count();
    rows.push((
        labels[4].clone(),
        revision.and_then(|s| {
            if remaining == kept.len() {
                Ok(s)
            } else {
                Err(format!("{remaining} ConfigMaps left, expected {}", kept.len()))
            }
        }),
    ));

    // Quiet intervals: the interval shortened to 10 s (a spec change: one pass runs for it
    // first), then nothing changes for a while.
    let quiet = async {
        patch_app(json!({"spec": {"interval": "10s"}})).await?;
        let observed = |ks: &Value| {
            ks["status"]["observedGeneration"] == ks["metadata"]["generation"]
                && ready_message(ks).starts_with("Ready=\"True\"")
        };
        bench.wait(&ns, 1, &mut controller, limit, observed).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        bench
            .measure(controller.pid(), async {
                tokio::time::sleep(QUIET).await;
                Ok(())
            })
            .await
    }
    .await;
    rows.push((labels[5].clone(), quiet));

    // An out-of-band edit of one object (what `kubectl edit` does), with the annotation that
    // has ours correct it at once; Flux ignores the annotation and corrects it at its interval.
    let restored = async {
        patch_app(json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/drift": "correct"}}}))
            .await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        bench
            .measure(controller.pid(), async {
                bench.count(1);
                let patch = json!({"data": {"value": "edited"}});
                cms.patch("cm-1", &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map_err(|e| e.to_string())?;
                let started = Instant::now();
                loop {
                    bench.count(1);
                    let cm = cms.get("cm-1").await.map_err(|e| e.to_string())?;
                    if cm.data["data"]["value"] == "1" {
                        return Ok(());
                    }
                    if started.elapsed() > limit {
                        return Err(format!("cm-1 still edited after {limit:?}"));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await
    }
    .await;
    rows.push((labels[6].clone(), restored));
    controller.stop();
    rows
}

/// How long the quiet phase lasts: two and a half intervals of 10 s.
const QUIET: Duration = Duration::from_secs(25);

/// One Kustomization with `wait: true` per app, each with its own source, from nothing to all
/// Ready.
async fn many(
    bench: &Bench,
    peer: Peer,
    workload: &str,
    apps: Vec<(String, Vec<String>)>,
) -> Result<Sample, String> {
    if !peer.selected() {
        return Err(NOT_SELECTED.into());
    }
    bench.fresh_plane().await;
    let ns = bench.namespace(workload, peer).await;
    bench.sources(&ns, &apps, "1111").await;
    let mut controller = Controller::start(&bench.binaries, peer, &ns, &bench.logs);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let count = apps.len();
    let sample = bench
        .measure(controller.pid(), async {
            bench
                .create_kustomizations(&ns, apps.into_iter().map(|(name, _)| name), true)
                .await;
            bench
                .wait(&ns, count, &mut controller, Duration::from_secs(1200), |ks| {
                    ready_at(ks, "1111")
                })
                .await
        })
        .await;
    controller.stop();
    sample
}

/// Both controllers, in turn, on `apps` in namespaces of their own.
async fn many_row(bench: &Bench, workload: String, short: &str, apps: Vec<(String, Vec<String>)>) -> Row {
    let flux = many(bench, Peer::Flux, short, apps.clone()).await;
    let ours = many(bench, Peer::Ours, short, apps).await;
    Row { workload, flux, ours }
}

async fn apply_crds(client: &Client, dir: &std::path::Path) {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&()),
    );
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let crd: Value = serde_yaml::from_str(&text).unwrap();
        let name = crd["metadata"]["name"].as_str().unwrap().to_string();
        api.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(crd))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
}

/// `k` Kustomizations of 9 ConfigMaps and a Deployment each, `wait: true`.
async fn wait_row(bench: &Bench, k: usize) -> Row {
    let apps = (0..k)
        .map(|a| {
            let name = format!("app{a}");
            let mut objects: Vec<String> = (0..9)
                .map(|i| config_map(&format!("{name}-cm{i}"), &i.to_string()))
                .collect();
            objects.push(deployment(&name, 1));
            (name, objects)
        })
        .collect();
    let workload = format!("{k} x (9 ConfigMaps + 1 Deployment), wait: true, to all Ready");
    many_row(bench, workload, "wait", apps).await
}

/// `f` Kustomizations of the flux-benchmark application each, `wait: true`.
async fn fleet_row(bench: &Bench, f: usize) -> Row {
    let fleet = (0..f)
        .map(|a| {
            let name = format!("app{a}");
            (name.clone(), fleet_app(&name))
        })
        .collect();
    let workload = format!("{f} x (ServiceAccount, Service, Deployment at 0, Ingress), wait: true");
    many_row(bench, workload, "fleet", fleet).await
}

/// What `BENCH_ONLY` may name.
const WORKLOADS: &[&str] = &["single", "wait", "fleet"];

fn scaled(n: usize, scale: f64) -> usize {
    ((n as f64 * scale).round() as usize).max(1)
}

const HEADER: &str = "| workload | Flux wall | ours wall | faster | Flux requests | ours requests | fewer | Flux CPU | ours CPU | control plane CPU (Flux / ours) | Flux peak RSS | ours peak RSS |\n|---|---|---|---|---|---|---|---|---|---|---|---|";

/// One table line; a failed phase shows its reason instead of numbers.
fn line(row: &Row) -> String {
    let secs = |s: &Sample| format!("{:.1} s", s.wall.as_secs_f64());
    let ratio = |a: f64, b: f64| format!("{:.1}x", a / b);
    let mib = |s: &Sample| format!("{:.0} MiB", s.peak_rss_kib as f64 / 1024.0);
    match (&row.flux, &row.ours) {
        (Ok(f), Ok(o)) => format!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {} | {:.1} s | {:.1} s | {:.1} s / {:.1} s | {} | {} |",
            row.workload,
            secs(f),
            secs(o),
            ratio(f.wall.as_secs_f64(), o.wall.as_secs_f64()),
            f.requests,
            o.requests,
            ratio(f.requests, o.requests.max(1.0)),
            f.cpu,
            o.cpu,
            f.plane_cpu,
            o.plane_cpu,
            mib(f),
            mib(o)
        ),
        (flux, ours) => {
            let cell = |r: &Result<Sample, String>| match r {
                Ok(s) => format!(
                    "{}, {:.0} requests, {:.1} s CPU, {:.1} s control plane CPU, {} peak RSS",
                    secs(s),
                    s.requests,
                    s.cpu,
                    s.plane_cpu,
                    mib(s)
                ),
                Err(e) => format!("FAILED: {e}"),
            };
            format!(
                "| {} | flux: {} | ours: {} | | | | | | | | | |",
                row.workload,
                cell(flux),
                cell(ours)
            )
        }
    }
}

#[tokio::main]
async fn main() {
    let flux_dir = PathBuf::from(
        std::env::var("FLUX_KC_BIN")
            .expect("FLUX_KC_BIN is unset: `make bench-controller` sets it from e2e/fluxkc/build.sh"),
    );
    let ours = PathBuf::from(
        std::env::var("BENCH_CONTROLLER").unwrap_or_else(|_| "target/release/kustomize-controller".into()),
    );
    let scale: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .map_or(1.0, |s| s.parse().expect("BENCH_SCALE is a number"));
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let selected = |workload: &str| only.is_empty() || only.split(',').any(|w| w.trim() == workload);
    for w in only.split(',').filter(|w| !w.trim().is_empty()) {
        assert!(
            WORKLOADS.contains(&w.trim()),
            "BENCH_ONLY names {w}; the workloads are {}",
            WORKLOADS.join(", ")
        );
    }
    let client = Client::try_default().await.expect("KUBECONFIG");
    apply_crds(&client, &flux_dir.join("crds")).await;
    let mut bench = Bench {
        client: std::sync::Mutex::new(client.clone()),
        own: AtomicU64::new(0),
        background_per_sec: 0.0,
        artifacts: ArtifactServer::start().await,
        binaries: Binaries { flux_dir, ours },
        logs: std::env::temp_dir().join(format!("bench-controller-{}", std::process::id())),
        run: std::process::id().to_string(),
    };
    std::fs::create_dir_all(&bench.logs).unwrap();
    let quiet = Duration::from_secs(10);
    let own_before = bench.own.load(Ordering::SeqCst);
    let before: f64 = bench.served().await.values().sum();
    tokio::time::sleep(quiet).await;
    let own = (bench.own.load(Ordering::SeqCst) - own_before) as f64;
    let after: f64 = bench.served().await.values().sum();
    bench.background_per_sec = ((after - before - own) / quiet.as_secs_f64()).max(0.0);
    eprintln!(
        "background: {:.1} requests/s; controller logs in {}",
        bench.background_per_sec,
        bench.logs.display()
    );

    let mut rows = Vec::new();
    if selected("single") {
        let n = scaled(1000, scale);
        let flux = single(&bench, Peer::Flux, n).await;
        let mut ours = single(&bench, Peer::Ours, n).await.into_iter();
        for (workload, flux) in flux {
            let ours = ours
                .next()
                .map_or_else(|| Err("not run after an earlier failure".to_string()), |(_, s)| s);
            rows.push(Row { workload, flux, ours });
            eprintln!("{}", line(rows.last().unwrap()));
        }
    }
    if selected("wait") {
        rows.push(wait_row(&bench, scaled(100, scale)).await);
        eprintln!("{}", line(rows.last().unwrap()));
    }
    if selected("fleet") {
        rows.push(fleet_row(&bench, scaled(1000, scale)).await);
    }

    println!("{HEADER}");
    for row in &rows {
        println!("{}", line(row));
    }
    println!(
        "Flux kustomize-controller from {}, ours {}; flags {}; requests from apiserver_request_total less this program's and {:.1}/s background",
        bench.binaries.flux_dir.display(),
        bench.binaries.ours.display(),
        flags().join(" "),
        bench.background_per_sec
    );
    let failed = rows.iter().any(|r| {
        [&r.flux, &r.ours]
            .iter()
            .any(|s| s.as_ref().is_err_and(|e| e != NOT_SELECTED))
    });
    if failed {
        std::process::exit(1);
    }
}
