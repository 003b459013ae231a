//! Applier benchmark (`make bench-apply`): N objects (half ConfigMaps, half Deployments with
//! zero replicas) in a fresh namespace of the control plane named by `KUBECONFIG`. Scenarios:
//! cold apply, no-op on the fast path, no-op with a full dry-run (a restarted applier: GET +
//! dry-run per object, Flux's algorithm, the peer measured in the same run), an unchanged new
//! revision on the fast path, 1 % out-of-band drift on the fast path, and 10 % prune with a new
//! revision. Prints API requests from the counting client
//! beside the requests Flux's algorithm needs (a GET and a dry-run per object, then a patch per
//! drifted object; without the status patches and events, which are the controller's), and
//! wall time.
//!
//! Usage: `cargo bench --bench apply -- [N ...]` (default 100 1000).

use std::time::{Duration, Instant};

use flux_runtime::client::{RequestCounts, counting_client};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use kustomize_controller::applier::inventory::{inventory_of, stale};
use kustomize_controller::applier::{Applier, ApplierOptions, ApplyRequest, Owner};
use kustomize_controller::kube_ext::ResourceResolver;
use serde_json::{Value, json};

fn objects(ns: &str, n: usize, skip_every: Option<usize>) -> Vec<Value> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n / 2 {
        if skip_every.is_some_and(|k| i % k == 0) {
            continue;
        }
        out.push(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}"), "namespace": ns},
            "data": {"index": i.to_string()}}));
        out.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": format!("web-{i}"), "namespace": ns},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": format!("web-{i}")}},
                "template": {"metadata": {"labels": {"app": format!("web-{i}")}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}}}));
    }
    out
}

struct Row {
    n: usize,
    scenario: &'static str,
    requests: u64,
    detail: String,
    flux_model: u64,
    wall: Duration,
}

fn measure(counts: &RequestCounts) -> (u64, String) {
    let snap = counts.snapshot();
    let mut by_verb = std::collections::BTreeMap::<String, u64>::new();
    for (k, v) in snap {
        *by_verb.entry(k.verb).or_default() += v;
    }
    let total = by_verb.values().sum();
    (
        total,
        by_verb
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .map(|a| a.parse().expect("N must be a number"))
        .collect();
    let sizes = if sizes.is_empty() { vec![100, 1000] } else { sizes };
    let config = Config::infer().await.expect("KUBECONFIG");
    let (client, counts) = counting_client(config.clone()).expect("client");
    let editor = Client::try_from(config).expect("client");
    let mut rows = Vec::new();
    for n in sizes {
        let ns = format!("bench-apply-{n}-{}", std::process::id());
        let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(editor.clone());
        let ns_obj = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns_obj)
            .await
            .expect("namespace");
        let applier = Applier::new(ResourceResolver::new(client.clone()), ApplierOptions::default());
        let owner = Owner::new("bench", &ns);
        let nf = n as u64;
        let mut run = async |applier: &Applier,
                             scenario: &'static str,
                             revision: &str,
                             objs: Vec<Value>,
                             flux_model: u64| {
            counts.reset();
            let start = Instant::now();
            let cs = applier
                .apply(ApplyRequest {
                    owner: owner.clone(),
                    objects: objs,
                    force: false,
                    ignore: &[],
                    revision,
                })
                .await
                .unwrap_or_else(|e| panic!("{scenario}: {e}"));
            let wall = start.elapsed();
            let (requests, detail) = measure(&counts);
            rows.push(Row {
                n,
                scenario,
                requests,
                detail,
                flux_model,
                wall,
            });
            cs
        };
        let cold = run(&applier, "cold apply", "rev1", objects(&ns, n, None), 3 * nf).await;
        // let the deployment controller annotate every Deployment (a write of its own that sends
        // the object through one dry-run on the next fast path), then record the settled state
        let deployments = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(editor.clone(), &ns);
        let settle_deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let list = deployments
                .list(&Default::default())
                .await
                .expect("list deployments");
            let settled = list.items.iter().all(|d| {
                let annotated = d
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("deployment.kubernetes.io/revision"));
                annotated && d.status.as_ref().and_then(|s| s.observed_generation) == d.metadata.generation
            });
            if settled || Instant::now() > settle_deadline {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        applier
            .apply(ApplyRequest {
                owner: owner.clone(),
                objects: objects(&ns, n, None),
                force: false,
                ignore: &[],
                revision: "rev1b",
            })
            .await
            .expect("settle");
        let _ = &cold;
        run(
            &applier,
            "no-op, fast path",
            "rev1b",
            objects(&ns, n, None),
            2 * nf,
        )
        .await;
        // a restarted controller has no fingerprints: a full dry-run, Flux's algorithm
        let restarted = Applier::new(ResourceResolver::new(client.clone()), ApplierOptions::default());
        run(
            &restarted,
            "no-op, full dry-run (peer)",
            "rev1c",
            objects(&ns, n, None),
            2 * nf,
        )
        .await;
        run(
            &applier,
            "no-op, new revision",
            "rev1c",
            objects(&ns, n, None),
            2 * nf,
        )
        .await;

        // 1 % drift: out-of-band edits of 1 % of the objects (ConfigMaps)
        let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(editor.clone(), &ns);
        for i in 0..(n / 100).max(1) {
            let patch = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"index": "edited"}});
            cms.patch(
                &format!("cm-{}", i * 50 % (n / 2)),
                &PatchParams::apply("someone").force(),
                &Patch::Apply(&patch),
            )
            .await
            .expect("edit");
        }
        run(
            &applier,
            "1% drift, fast path",
            "rev1c",
            objects(&ns, n, None),
            2 * nf + nf / 100,
        )
        .await;

        // 10 % prune on a new revision: apply the rest, then delete the stale objects
        let before = inventory_of(
            &applier
                .apply(ApplyRequest {
                    owner: owner.clone(),
                    objects: objects(&ns, n, None),
                    force: false,
                    ignore: &[],
                    revision: "rev1c",
                })
                .await
                .expect("inventory"),
        );
        counts.reset();
        let start = Instant::now();
        let after = applier
            .apply(ApplyRequest {
                owner: owner.clone(),
                objects: objects(&ns, n, Some(10)),
                force: false,
                ignore: &[],
                revision: "rev2",
            })
            .await
            .expect("prune apply");
        let stale_refs = stale(&before, &inventory_of(&after));
        applier.prune(&owner, &stale_refs).await.expect("prune");
        let (requests, detail) = measure(&counts);
        rows.push(Row {
            n,
            scenario: "10% prune, new revision",
            requests,
            detail,
            flux_model: 2 * (nf * 9 / 10) + 2 * (nf / 10),
            wall: start.elapsed(),
        });

        let _ = namespaces.delete(&ns, &DeleteParams::background()).await;
    }

    println!("| N | scenario | API requests | by verb | Flux model requests | wall time |");
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.2?} |",
            r.n, r.scenario, r.requests, r.detail, r.flux_model, r.wall
        );
    }
    for n in rows
        .iter()
        .map(|r| r.n)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let get = |s: &str| {
            rows.iter()
                .find(|r| r.n == n && r.scenario == s)
                .map(|r| r.wall.as_secs_f64())
        };
        if let (Some(fast), Some(full)) = (get("no-op, fast path"), get("no-op, full dry-run (peer)")) {
            println!(
                "N={n}: no-op fast path / full dry-run wall time = {:.3}",
                fast / full
            );
        }
    }
}
