//! Control-plane outages, on a control plane of the test's own (e2e/cluster.sh with its own
//! E2E_STATE; the shared one is never touched): the API server stopped for 15 s, and etcd
//! stopped for E2E_ETCD_OUTAGE_SECS (default 30) while the controller reconciles 20
//! Kustomizations. The controller must ride both out: it does not exit, retries with backoff
//! rather than in a hot loop, picks up a new revision once the control plane is back (its
//! watches recovered), emits no flood of repeated events, and neither prunes nor recreates
//! anything (UIDs unchanged).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::support::artifacts::ArtifactServer;
use crate::support::controller::{
    ControllerProcess, all_applied, apply_kustomization, events_by_object, publish,
};
use crate::support::flux::install_source_controller_crds;
use crate::support::install_crd;
use crate::support::own_plane::OwnControlPlane;

const KUSTOMIZATIONS: usize = 20;
const NAMESPACE: &str = "outage";
const REVISIONS: [&str; 3] = [
    "main@sha1:a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1",
    "main@sha1:a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2",
    "main@sha1:a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3",
];
/// Ready again after the control plane is back, new revision applied, within this bound. Each
/// watch's reconnects back off up to a minute (30 s plus as much of jitter); the first one after
/// the control plane is back lists at once. The machine running the tests is shared.
const RECOVERY_LIMIT: Duration = Duration::from_secs(120);

/// Every Kustomization's spec.retryInterval: a failed pass is retried after it (or after a
/// backoff from 750 ms, which doubles past it within a few passes).
const RETRY_INTERVAL_SECS: u64 = 5;
/// Every Kustomization's spec.interval: short enough that every Kustomization reconciles during
/// an outage.
const INTERVAL_SECS: u64 = 15;
/// The most requests one failed reconcile pass sends (read the source, write the status,
/// emit an event), generously.
const REQUESTS_PER_PASS: f64 = 5.0;
/// How long the API server stays down (its restart takes some seconds more).
const API_SERVER_OUTAGE: Duration = Duration::from_secs(15);
/// How long after its apply the event about a new revision may take to be written.
const EVENTS_LIMIT: Duration = Duration::from_secs(30);
/// The annotation naming the revision an event is about.
const REVISION_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/revision";
/// How much of the controller log a failure shows.
const LOG_TAIL_LINES: usize = 60;

fn outage_duration() -> Duration {
    let secs = std::env::var("E2E_ETCD_OUTAGE_SECS").map_or(30, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("E2E_ETCD_OUTAGE_SECS must be a number of seconds, not {v:?}"))
    });
    Duration::from_secs(secs)
}

type Event = (String, String, String);

fn without_revisions(events: BTreeMap<String, Vec<(Event, String)>>) -> BTreeMap<String, Vec<Event>> {
    events
        .into_iter()
        .map(|(ks, events)| (ks, events.into_iter().map(|(event, _)| event).collect()))
        .collect()
}

fn name(i: usize) -> String {
    format!("k{i:02}")
}

/// Two ConfigMaps whose value is `value`; each Kustomization prefixes their names.
fn objects(value: &str) -> String {
    ["a", "b"]
        .map(|n| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {n}\ndata:\n  value: \"{value}\"\n")
        })
        .join("---\n")
}

/// A snapshot of what the controller left in the namespace.
#[derive(Debug, PartialEq)]
struct World {
    /// ConfigMap name → uid.
    config_maps: BTreeMap<String, String>,
    /// Kustomization name → uid.
    kustomizations: BTreeMap<String, String>,
}

/// Fields drop in order: the controller stops before its control plane goes away.
struct Outage {
    controller: ControllerProcess,
    server: ArtifactServer,
    client: Client,
    plane: OwnControlPlane,
}

impl Outage {
    async fn start() -> Self {
        let plane = OwnControlPlane::up("kc-outage");
        let client = plane.client().await;
        install_crd(&client, &kustomize_controller::api::kustomization::crd()).await;
        install_source_controller_crds(&client).await;
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        let server = ArtifactServer::start().await;
        let controller = ControllerProcess::start_with_kubeconfig(NAMESPACE, &plane.kubeconfig(), &[]);
        let outage = Self {
            controller,
            server,
            client,
            plane,
        };
        outage.publish(0).await;
        for i in 0..KUSTOMIZATIONS {
            let spec = json!({
                "interval": format!("{INTERVAL_SECS}s"), "retryInterval": format!("{RETRY_INTERVAL_SECS}s"), "prune": true, "timeout": "30s",
                "targetNamespace": NAMESPACE, "namePrefix": format!("{}-", name(i)),
                "sourceRef": {"kind": "GitRepository", "name": "repo"},
            });
            apply_kustomization(&outage.client, NAMESPACE, &name(i), spec).await;
        }
        outage.wait_all_applied(0, Duration::from_secs(180)).await;
        outage
    }

    async fn publish(&self, revision: usize) {
        let files = [
            (
                "kustomization.yaml",
                crate::support::controller::OBJECTS_KUSTOMIZATION,
            ),
            ("objects.yaml", &objects(&format!("v{revision}"))),
        ];
        publish(
            &self.client,
            &self.server,
            NAMESPACE,
            "repo",
            REVISIONS[revision],
            &files,
        )
        .await;
    }

    async fn wait_all_applied(&self, revision: usize, limit: Duration) {
        let applied = all_applied(
            &self.client,
            NAMESPACE,
            KUSTOMIZATIONS,
            REVISIONS[revision],
            limit,
        )
        .await;
        assert!(
            applied,
            "{}\nnot all Kustomizations applied {} within {limit:?} (above: the controller log's end)",
            self.log_tail(),
            REVISIONS[revision],
        );
    }

    /// The controller log's last lines: a failure's reason comes after them, so that it is the
    /// end of what a CI run prints.
    fn log_tail(&self) -> String {
        let logs = self.controller.logs();
        let lines: Vec<&str> = logs.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    async fn world(&self) -> World {
        let uids = |items: Vec<(Option<String>, Option<String>)>| {
            items
                .into_iter()
                .map(|(n, u)| (n.unwrap_or_default(), u.unwrap_or_default()))
                .filter(|(n, _)| n != "kube-root-ca.crt")
                .collect()
        };
        let cms = Api::<ConfigMap>::namespaced(self.client.clone(), NAMESPACE)
            .list_metadata(&ListParams::default())
            .await
            .expect("list ConfigMaps");
        let kss = Api::<kustomize_controller::api::Kustomization>::namespaced(self.client.clone(), NAMESPACE)
            .list_metadata(&ListParams::default())
            .await
            .expect("list Kustomizations");
        World {
            config_maps: uids(
                cms.items
                    .into_iter()
                    .map(|m| (m.metadata.name, m.metadata.uid))
                    .collect(),
            ),
            kustomizations: uids(
                kss.items
                    .into_iter()
                    .map(|m| (m.metadata.name, m.metadata.uid))
                    .collect(),
            ),
        }
    }

    /// (type, reason, note) of the events about each Kustomization.
    async fn events(&self) -> BTreeMap<String, Vec<Event>> {
        without_revisions(self.events_with_revisions().await)
    }

    /// Each event about each Kustomization, with the revision it carries.
    async fn events_with_revisions(&self) -> BTreeMap<String, Vec<(Event, String)>> {
        let mut by_object = events_by_object(&self.client, NAMESPACE).await;
        (0..KUSTOMIZATIONS)
            .map(|i| {
                let events = by_object.remove(&name(i)).unwrap_or_default();
                let events = events
                    .into_iter()
                    .map(|(t, r, n, annotations)| {
                        let revision = annotations[REVISION_ANNOTATION]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                        ((t, r, n), revision)
                    })
                    .collect();
                (name(i), events)
            })
            .collect()
    }

    /// The events once every Kustomization's event about `revision` is written and no other
    /// came for a second. The controller writes events from a queue after the status, several
    /// at a time, so a list taken when the status shows the revision may miss the last of them.
    async fn events_settled(&self, revision: usize) -> BTreeMap<String, Vec<Event>> {
        let deadline = Instant::now() + EVENTS_LIMIT;
        let untold_in = |events: &BTreeMap<String, Vec<(_, String)>>| {
            events
                .iter()
                .filter(|(_, events)| !events.iter().any(|(_, r)| r == REVISIONS[revision]))
                .map(|(ks, _)| ks.clone())
                .collect::<Vec<_>>()
        };
        let mut last = self.events_with_revisions().await;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = self.events_with_revisions().await;
            let untold = untold_in(&now);
            if untold.is_empty() && now == last {
                return without_revisions(now);
            }
            let missing = if untold.is_empty() {
                "events still being written".to_string()
            } else {
                format!("{untold:?}: no event about revision {}", REVISIONS[revision])
            };
            assert!(
                Instant::now() < deadline,
                "{}\n{missing} {EVENTS_LIMIT:?} after its apply (above: the controller log's end)",
                self.log_tail(),
            );
            last = now;
        }
    }

    async fn requests_sent(&self) -> BTreeMap<(String, String), f64> {
        self.controller.api_requests().await
    }

    /// Takes a component down for `down` (restarted at once for zero), then publishes revision
    /// `revision` and waits until every Kustomization applied it. Checks the controller rode
    /// the outage out and returns what it measured.
    async fn ride_out(&mut self, component: &str, down: Duration, revision: usize) -> String {
        let world = self.world().await;
        let events = self.events().await;
        let requests = self.requests_sent().await;
        let stopped = Instant::now();
        self.plane.cluster(&["stop", component]);
        tokio::time::sleep(down).await;
        self.plane.cluster(&["start", component]);
        // Until the component serves again, counted from the stop.
        let mut sent = self.requests_sent().await;
        for (key, before) in &requests {
            *sent.entry(key.clone()).or_default() -= before;
        }
        sent.retain(|_, n| *n > 0.0);
        let outage_requests: f64 = sent.values().sum();
        let outage = stopped.elapsed();
        let back = Instant::now();
        assert!(
            self.controller.exited().is_none(),
            "{}\nthe controller exited during the {component} outage (above: its log's end)",
            self.log_tail()
        );
        // The new revision shows the watches recovered: the source change comes in by a watch.
        self.publish(revision).await;
        let published = back.elapsed();
        self.wait_all_applied(revision, RECOVERY_LIMIT).await;
        let recovery = back.elapsed();
        assert!(
            self.controller.exited().is_none(),
            "the controller is still running"
        );

        assert_eq!(
            self.world().await,
            world,
            "nothing pruned or recreated: the same UIDs"
        );
        // Flux's events: one per change, plus one "Reconciliation finished" per successful
        // pass (Flux sends it on every success: commit-status notifications rely on it), so
        // at most one per interval since the outage began and one for the new revision. Of the
        // others, each Kustomization applied one new revision, so at most that event, one
        // about the failure, and one about the recovery when a pass succeeded again before the
        // new revision reached it; never one repeated.
        let after = self.events_settled(revision).await;
        let passes_since_stop = stopped.elapsed().as_secs() / INTERVAL_SECS + 2;
        let mut new_reasons = BTreeMap::<&str, usize>::new();
        for (ks, old) in &events {
            let new: Vec<_> = after[ks].iter().filter(|e| !old.contains(e)).collect();
            for (_, reason, _) in &new {
                *new_reasons.entry(reason).or_default() += 1;
            }
            let (finished, changes): (Vec<&&Event>, Vec<&&Event>) = new
                .iter()
                .partition(|(_, _, message)| message.starts_with("Reconciliation finished in "));
            assert!(
                changes.len() <= 3 && finished.len() as u64 <= passes_since_stop,
                "{ks}: no event flood after the {component} outage (at most 3 about changes and \
                 {passes_since_stop} about finished passes): {new:?}"
            );
            let unique: std::collections::BTreeSet<_> = new.iter().collect();
            assert_eq!(unique.len(), new.len(), "{ks}: no event repeated: {new:?}");
        }
        // Watches reconnect with a backoff that doubles from about a second: within T seconds at
        // most log2(T) + 2 attempts per watch, each a list and a watch. (Without the watchers'
        // backoff this bound still held here: these outages close few watches. The bound on all
        // requests below is the one that a retry without backoff broke, 7348 against 775.)
        // A failed pass lists its one kind (ConfigMaps) at most once, before it writes its
        // status once: those lists are the passes', not the watches'.
        let watched = requests.keys().filter(|(verb, _)| verb == "watch").count() as f64;
        let status_writes = sent
            .get(&(
                "patch".to_string(),
                "kustomizations.kustomize.toolkit.fluxcd.io".to_string(),
            ))
            .copied()
            .unwrap_or_default();
        let listed: f64 = sent
            .iter()
            .filter(|((verb, _), _)| verb == "list" || verb == "watch")
            .map(|(_, n)| n)
            .sum();
        let reconnects = (listed - status_writes).max(0.0);
        let limit = watched * 2.0 * (outage.as_secs_f64().log2() + 2.0);
        eprintln!(
            "outage: {component}: requests during the outage {sent:?}; {watched} watches, {reconnects} reconnects"
        );
        assert!(
            reconnects <= limit,
            "{reconnects} list/watch requests for {watched} watches in {outage:?} during the {component} \
             outage: reconnects do not back off (at most {limit:.0})"
        );
        // Reconcile passes that fail are retried after retryInterval or a backoff: at most
        // T / retryInterval + 2 passes per Kustomization. A pass retried at once makes hundreds.
        let passes = KUSTOMIZATIONS as f64 * (outage.as_secs_f64() / RETRY_INTERVAL_SECS as f64 + 2.0);
        let request_limit = limit + passes * REQUESTS_PER_PASS;
        assert!(
            outage_requests <= request_limit,
            "{outage_requests} requests in {outage:?} during the {component} outage: reconcile retries do \
             not back off (at most {request_limit:.0})"
        );
        let rate = outage_requests / outage.as_secs_f64();
        let new_events: usize = new_reasons.values().sum();
        format!(
            "{component} down {outage:.1?}: {outage_requests} requests ({rate:.1}/s); all {KUSTOMIZATIONS} \
             applied the next revision {recovery:.1?} after it was back (published after {published:.1?}); \
             {new_events} new events {new_reasons:?}"
        )
    }
}

#[tokio::test]
async fn outage_api_server_restart_and_etcd_outage_are_ridden_out() {
    let mut outage = Outage::start().await;
    // Down long enough that requests are refused for a while: with etcd down the API server
    // holds requests and watches open, so only this outage makes the controller retry.
    let restart = outage.ride_out("apiserver", API_SERVER_OUTAGE, 1).await;
    eprintln!("outage: {restart}");
    let etcd = outage.ride_out("etcd", outage_duration(), 2).await;
    eprintln!("outage: {etcd}");
}
