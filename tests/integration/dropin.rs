//! Dropped in where Flux's kustomize-controller runs: started with Flux's own Deployment
//! arguments, it takes Flux's leader Lease, reconciles, answers Flux's probes, logs lines
//! `flux logs` reads, exposes Flux's metrics and forwards Flux's event payload to a receiver
//! that decodes with Flux's own types. The Go peers come from e2e/fluxpeer/build.sh.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use kustomize_controller::api::Kustomization;
use serde_json::json;
use sha2::Digest;

use crate::support::controller::{Scenario, condition};
use crate::support::eventually;
use crate::support::flux_deployment::{flux_deployment, fluxpeer_bin, start_as_flux};
use crate::support::receiver::EventReceiver;

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";
/// A Secret value that must never reach an event or a log line.
const SECRET_VALUE: &str = "hunter2-do-not-log";
const SHARD_LABEL: &str = "e2e.dropin/shard";

fn objects(config_value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  value: \"{config_value}\"\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  password: {SECRET_VALUE}\n"
    )
}

/// A Kustomization carrying the shard label the controller under test selects.
async fn apply_labelled(s: &Scenario, name: &str, shard: &str) {
    let object = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": s.namespace(), "labels": {SHARD_LABEL: shard}},
        "spec": s.spec(json!({})),
    });
    Api::<Kustomization>::namespaced(s.client.clone(), s.namespace())
        .patch(
            name,
            &PatchParams::apply("e2e-tests").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap();
}

/// Runs the `flux logs` line checker over `log` with its filter arguments; returns the lines
/// it kept, or panics with its complaint when a line does not decode as flux's log entry.
fn flux_logs(log: &Path, filter: &[&str]) -> Vec<String> {
    let output = Command::new(fluxpeer_bin().join("logcheck"))
        .args(filter)
        .stdin(std::fs::File::open(log).unwrap())
        .output()
        .expect("run logcheck (built by e2e/fluxpeer/build.sh)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "logcheck refused our log: {stderr}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn started_with_fluxs_deployment_it_leads_reconciles_logs_and_forwards_events() {
    let s = Scenario::new("dropin").await;
    let n = s.namespace().to_string();
    let dir = tempfile::tempdir().unwrap();
    let receiver = EventReceiver::start(dir.path());
    let deployment = flux_deployment();
    // Flux's Deployment, as read from the module: the test depends on what it says.
    assert!(
        deployment.args.contains(&"--watch-all-namespaces".to_string()),
        "{:?}",
        deployment.args
    );
    assert!(
        deployment.args.contains(&"--log-encoding=json".to_string()),
        "{:?}",
        deployment.args
    );
    assert_eq!(deployment.namespace_env, ["RUNTIME_NAMESPACE"]);
    // The ports our listen addresses stand in for.
    assert_eq!(
        deployment.ports,
        [("http-prom".to_string(), 8080), ("healthz".to_string(), 9440)]
    );

    let selector = format!("{SHARD_LABEL}={n}");
    let pod = format!("kustomize-controller-{n}");
    let controller = start_as_flux(
        &n,
        &pod,
        &[
            format!("--watch-label-selector={selector}"),
            format!("--events-addr={}", receiver.addr),
        ],
    );

    s.publish_objects("repo", REV1, &objects("one")).await;
    apply_labelled(&s, "app", &n).await;
    s.wait_applied(&controller, "app", REV1).await;

    // Flux's Lease name for a sharded controller: the base name and sha256(selector)[:8].
    let digest = hex::encode(sha2::Sha256::digest(selector.as_bytes()));
    let lease_name = format!("kustomize-controller-leader-election-{}", &digest[..8]);
    let lease = Api::<Lease>::namespaced(s.client.clone(), &n)
        .get(&lease_name)
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|l| l.holder_identity).as_deref(),
        Some(pod.as_str())
    );
    // Flux's metrics beside ours, scraped from the running controller.
    let text = controller.metrics_text().await.unwrap_or_default();
    for series in [
        r#"controller_runtime_reconcile_total{controller="kustomization",result="requeue_after"} "#,
        r#"controller_runtime_reconcile_errors_total{controller="kustomization"} "#,
        r#"controller_runtime_reconcile_time_seconds_bucket{le="60.0",controller="kustomization"} "#,
        // Flux's default --concurrent, as its Deployment does not set it.
        r#"controller_runtime_max_concurrent_reconciles{controller="kustomization"} 4"#,
        r#"controller_runtime_active_workers{controller="kustomization"} "#,
        r#"workqueue_work_duration_seconds_count{name="kustomization",controller="kustomization"} "#,
        r#"workqueue_longest_running_processor_seconds{name="kustomization",controller="kustomization"} "#,
        r#"gotk_reconcile_duration_seconds_bucket{le="1799.99"#,
        "kustomize_controller_reconciles_total",
        r#"rest_client_requests_total{code="200",host="#,
        r#"rest_client_requests_total{code="201",host="#,
    ] {
        assert!(text.contains(series), "{series} not in /metrics:\n{text}");
    }
    for path in &deployment.probes {
        let status = controller.probe(path).await.unwrap_or_default();
        assert!(status.contains(" 200 "), "{path}: {status}");
    }

    // A change, then a failure.
    s.publish_objects(
        "repo",
        REV2,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [broken\n",
    )
    .await;
    s.wait_ready(&controller, "app", "False", "").await;
    let events = eventually(
        "a change and a failure event",
        Duration::from_secs(60),
        || async {
            let events = receiver.accepted();
            let change = events
                .iter()
                .any(|e| e["severity"] == "info" && e["action"] == "Apply");
            let failure = events.iter().any(|e| e["severity"] == "error");
            (change && failure).then_some(events)
        },
    )
    .await;
    assert_eq!(receiver.rejected(), "", "the receiver refused some of our events");
    let change = events.iter().find(|e| e["action"] == "Apply").unwrap();
    assert_eq!(change["involvedObject"]["kind"], "Kustomization");
    assert_eq!(change["involvedObject"]["name"], "app");
    assert_eq!(change["involvedObject"]["namespace"], n.as_str());
    assert_eq!(change["reportingController"], "kustomize-controller");
    assert_eq!(change["reportingInstance"], pod.as_str());
    assert_eq!(change["metadata"]["kustomize.toolkit.fluxcd.io/revision"], REV1);
    let message = change["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("Secret/{n}/creds created")),
        "{message}"
    );
    let failure = events.iter().find(|e| e["severity"] == "error").unwrap();
    assert_eq!(failure["reason"], "BuildFailed", "{failure}");
    assert_eq!(
        failure["metadata"]["kustomize.toolkit.fluxcd.io/revision"], REV2,
        "{failure}"
    );
    let all = serde_json::to_string(&events).unwrap();
    assert!(
        !all.contains(SECRET_VALUE),
        "a Secret value reached an event: {all}"
    );

    // Every line decodes as flux's log entry; `flux logs --kind --name --namespace` keeps
    // our reconcile lines.
    let logs = controller.logs();
    assert!(!logs.contains(SECRET_VALUE), "a Secret value reached the log");
    let kept = flux_logs(
        &controller.log,
        &["--kind=Kustomization", "--name=app", &format!("--namespace={n}")],
    );
    assert!(
        kept.iter().any(
            |l| l.contains(&format!("Kustomization/app.{n} - ")) && l.contains("Reconciliation finished")
        ),
        "{kept:#?}\n{logs}"
    );
    assert!(
        kept.iter().any(|l| l.contains(" error Kustomization/app.")),
        "{kept:#?}"
    );
    let other = flux_logs(
        &controller.log,
        &[
            "--kind=Kustomization",
            "--name=other",
            &format!("--namespace={n}"),
        ],
    );
    assert!(other.is_empty(), "{other:#?}");

    s.delete().await;
}

/// A listener that accepts connections and never answers, as a dropped route does.
async fn black_hole() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}/", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn a_black_holed_events_addr_does_not_hold_reconciles() {
    let s = Scenario::new("dropin-bh").await;
    let (addr, accepted) = black_hole().await;
    let controller = s.start_controller(&[&format!("--events-addr={addr}"), "--concurrent=1"]);
    s.publish_objects("repo", REV1, &objects("one")).await;
    let names = ["a", "b", "c", "d"];
    for name in names {
        s.apply(name, json!({"namePrefix": format!("{name}-")})).await;
    }
    // Each first apply sends two events (the change set and the success), after its status
    // is written. Sent inline, the one worker would hold each reconcile until its events had
    // been tried against the black hole, every attempt a connection, before the next
    // Kustomization could even start: the last one Ready would come after at least three
    // attempts for each event of the others. Queued, all are Ready while the first event is
    // still waiting for an answer.
    let all_applied = || async {
        for name in names {
            let ks = s.get(name).await?;
            let ready = condition(&ks, "Ready")?;
            (ready.status == "True" && ready.message.contains(REV1)).then_some(())?;
        }
        Some(())
    };
    eventually(
        "all Kustomizations applied",
        Duration::from_secs(300),
        all_applied,
    )
    .await;
    let connections = accepted.load(Ordering::SeqCst);
    assert!(
        connections < 2 * names.len(),
        "{connections} connections to the black hole before all {} were applied:\n{}",
        names.len(),
        controller.logs()
    );
    s.delete().await;
}
