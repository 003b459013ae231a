//! Flux's sharding: instances with `--watch-label-selector` on `sharding.fluxcd.io/key`, each
//! electing its own leader, share one control plane. Every Kustomization is reconciled by
//! exactly one of them; relabeling one moves it to another shard without a second apply by the
//! old one, nothing pruned and the inventory kept. The install component that sets this up
//! (config/components/sharding) builds with the real kustomize.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kustomize_controller::controller::options::RunOptions;
use serde_json::{Value, json};

use crate::support::controller::{ControllerProcess, Scenario, all_applied, apply_labelled_kustomization};
use crate::support::eventually;

const KUSTOMIZATIONS: usize = 300;
const REV1: &str = "main@sha1:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";
const KEY: &str = "sharding.fluxcd.io/key";
const DEFAULT_SHARD: &str = "sharding.fluxcd.io/key notin (shard1,shard2)";

fn name(i: usize) -> String {
    format!("k{i:03}")
}

/// The shard label of Kustomization `i`: thirds go to shard1, shard2 and the default shard,
/// which also takes the keys no instance names (shard3).
fn shard_label(i: usize) -> Option<&'static str> {
    match (i % 3, i % 2) {
        (0, _) => Some("shard1"),
        (1, _) => Some("shard2"),
        (_, 0) => Some("shard3"),
        _ => None,
    }
}

/// Which instance (0: shard1, 1: shard2, 2: default) a label belongs to.
fn instance_of(label: Option<&str>) -> usize {
    match label {
        Some("shard1") => 0,
        Some("shard2") => 1,
        _ => 2,
    }
}

/// Reconciles per Kustomization name in an instance's log: distinct reconcile IDs.
fn reconciles(log: &str) -> BTreeMap<String, usize> {
    let mut ids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in log.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(name), Some(id)) = (
            entry["Kustomization"]["name"].as_str(),
            entry["reconcileID"].as_str(),
        ) else {
            continue;
        };
        ids.entry(name.to_string()).or_default().insert(id.to_string());
    }
    ids.into_iter().map(|(name, ids)| (name, ids.len())).collect()
}

/// `controller_runtime_reconcile_total` over every result.
async fn reconcile_total(instance: &ControllerProcess) -> f64 {
    let text = instance.metrics_text().await.expect("metrics");
    text.lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn label(s: &Scenario, name: &str, shard: Option<&str>) {
    let labels = shard.map_or_else(|| json!({}), |key| json!({KEY: key}));
    let spec = s.spec(json!({"namePrefix": format!("{name}-")}));
    apply_labelled_kustomization(&s.client, s.namespace(), name, labels, spec).await;
}

#[tokio::test]
async fn sharding_each_kustomization_is_reconciled_by_one_shard_and_relabeling_moves_it() {
    let s = Scenario::new("kc-shard").await;
    let n = s.namespace();
    let selectors = [
        format!("{KEY}=shard1"),
        format!("{KEY}=shard2"),
        DEFAULT_SHARD.to_string(),
    ];
    let instances: Vec<_> = selectors
        .iter()
        .enumerate()
        .map(|(i, selector)| {
            let selector = format!("--watch-label-selector={selector}");
            let args = ["--enable-leader-election", selector.as_str(), "--concurrent=8"];
            ControllerProcess::start_as(n, &format!("instance-{i}"), &args)
        })
        .collect();
    let objects = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  value: one\n";
    s.publish_objects("repo", REV1, objects).await;
    for i in 0..KUSTOMIZATIONS {
        label(&s, &name(i), shard_label(i)).await;
    }

    let started = std::time::Instant::now();
    let all_ready = all_applied(&s.client, n, KUSTOMIZATIONS, REV1, Duration::from_secs(300)).await;
    assert!(
        all_ready,
        "not all applied; instance logs (tails):\n{}",
        instances
            .iter()
            .map(|i| i.logs().lines().rev().take(20).collect::<Vec<_>>().join("\n"))
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    eprintln!(
        "sharding: {KUSTOMIZATIONS} Kustomizations applied by 3 shards {:?} after the last was created",
        started.elapsed()
    );

    // Each instance elected itself on a Lease of its own.
    let leases = Api::<Lease>::namespaced(s.client.clone(), n)
        .list(&ListParams::default())
        .await
        .unwrap();
    let holders: BTreeMap<_, _> = leases
        .items
        .iter()
        .map(|l| {
            (
                l.metadata.name.clone().unwrap(),
                l.spec.as_ref().and_then(|s| s.holder_identity.clone()),
            )
        })
        .collect();
    let distinct_holders: BTreeSet<_> = holders.values().flatten().collect();
    assert_eq!(
        (holders.len(), distinct_holders.len()),
        (3, 3),
        "one Lease per shard: {holders:?}"
    );

    // Exactly one instance reconciled each Kustomization: the one its label names.
    let handled: Vec<_> = instances.iter().map(|i| reconciles(&i.logs())).collect();
    for i in 0..KUSTOMIZATIONS {
        let by: Vec<_> = (0..3).filter(|&k| handled[k].contains_key(&name(i))).collect();
        assert_eq!(
            by,
            vec![instance_of(shard_label(i))],
            "{} ({:?}) reconciled by instances {by:?}",
            name(i),
            shard_label(i)
        );
    }
    for (k, instance) in instances.iter().enumerate() {
        let share = (0..KUSTOMIZATIONS)
            .filter(|&i| instance_of(shard_label(i)) == k)
            .count();
        let total = reconcile_total(instance).await;
        eprintln!(
            "sharding: instance {k} ({}) reconciled {total} times for its {share} Kustomizations",
            selectors[k]
        );
        assert_eq!(handled[k].len(), share, "instance {k} handled its share");
        assert!(
            total >= share as f64,
            "instance {k}'s metric counts its reconciles: {total} < {share}"
        );
    }

    // Relabel k000 from shard1 to shard2: shard2 takes it over, shard1 lets it go untouched.
    let moved = name(0);
    let cms = Api::<ConfigMap>::namespaced(s.client.clone(), n);
    let cm_name = format!("{moved}-cm");
    let uid_before = cms.get(&cm_name).await.unwrap().metadata.uid;
    let inventory_before = s.get(&moved).await.unwrap().status.and_then(|st| st.inventory);
    let shard1_before = reconciles(&instances[0].logs()).get(&moved).copied();
    label(&s, &moved, Some("shard2")).await;
    eventually(
        "shard2 reconciles the moved Kustomization",
        Duration::from_secs(60),
        || async {
            reconciles(&instances[1].logs())
                .contains_key(&moved)
                .then_some(())
        },
    )
    .await;
    let ks = s.wait_applied(&instances[1], &moved, REV1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        reconciles(&instances[0].logs()).get(&moved).copied(),
        shard1_before,
        "the old shard did not reconcile it again (no prune, no second apply)"
    );
    assert!(
        ks.metadata.deletion_timestamp.is_none(),
        "the Kustomization was not finalized"
    );
    assert_eq!(
        cms.get(&cm_name).await.unwrap().metadata.uid,
        uid_before,
        "its ConfigMap was not recreated"
    );
    assert_eq!(
        s.get(&moved).await.unwrap().status.and_then(|st| st.inventory),
        inventory_before,
        "its inventory was kept"
    );
    s.delete().await;
}

/// The sharded install: `config/` with `components/sharding`, built by the real kustomize.
#[test]
fn sharding_component_builds_with_kustomize_into_three_disjoint_shards() {
    let bin = std::env::var("E2E_BIN").expect(
        "E2E_BIN is not set: run the tests with `make test` (e2e/controlplane/build.sh builds kustomize)",
    );
    let work = std::env::temp_dir().join(format!("kc-sharding-{}", crate::support::unique_suffix()));
    let config = work.join("config");
    std::fs::create_dir_all(&work).unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("config"))
        .arg(&work)
        .status();
    assert!(copied.unwrap().success(), "copy config/");
    let top = config.join("kustomization.yaml");
    let text = std::fs::read_to_string(&top).unwrap();
    std::fs::write(&top, format!("{text}components:\n  - components/sharding\n")).unwrap();
    let output = std::process::Command::new(format!("{bin}/kustomize"))
        .arg("build")
        .arg(&config)
        .output()
        .expect("run kustomize");
    assert!(
        output.status.success(),
        "kustomize build: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let objects: Vec<Value> = serde_yaml::Deserializer::from_slice(&output.stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();

    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        options: RunOptions,
    }
    let deployments: BTreeMap<String, (Value, RunOptions)> = objects
        .iter()
        // The image-reflector-controller beside them is not sharded here.
        .filter(|o| o["kind"] == "Deployment" && o["metadata"]["name"] != "image-reflector-controller")
        .map(|d| {
            let args: Vec<&str> = d["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            let run = Run::try_parse_from(args.iter().copied())
                .unwrap_or_else(|e| panic!("the controller refuses the arguments {args:?}: {e}"));
            (
                d["metadata"]["name"].as_str().unwrap().to_string(),
                (d.clone(), run.options),
            )
        })
        .collect();
    let selectors: BTreeMap<&str, &str> = deployments
        .iter()
        .map(|(name, (_, options))| (name.as_str(), options.runtime.watch_label_selector.as_str()))
        .collect();
    assert_eq!(
        selectors,
        BTreeMap::from([
            ("kustomize-controller", DEFAULT_SHARD),
            ("kustomize-controller-shard1", "sharding.fluxcd.io/key=shard1"),
            ("kustomize-controller-shard2", "sharding.fluxcd.io/key=shard2"),
        ])
    );
    for (name, (d, options)) in &deployments {
        assert_eq!(d["metadata"]["namespace"], "flux-system", "{name}");
        assert!(
            options.runtime.enable_leader_election,
            "{name} elects a leader of its own shard"
        );
        // No Deployment's selector picks another one's pods.
        let selector = &d["spec"]["selector"]["matchLabels"];
        for (other, (o, _)) in &deployments {
            let labels = &o["spec"]["template"]["metadata"]["labels"];
            let matches = selector.as_object().unwrap().iter().all(|(k, v)| &labels[k] == v);
            assert_eq!(
                matches,
                name == other,
                "{name}'s selector {selector} vs {other}'s pods {labels}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}
