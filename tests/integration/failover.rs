//! Two replicas with leader election on the shared control plane: the leader SIGKILLed in the
//! middle of a large apply is replaced within the lease duration and the standby finishes it;
//! a leader paused (SIGSTOP) past its renew deadline and resumed writes nothing more and exits
//! with "leader election lost", as controller-runtime does, while the new leader's work stands.
//! Who wrote is read from each replica's own request counts (its /metrics) and from the objects.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::support::controller::{ControllerProcess, Scenario};
use crate::support::eventually;

const OBJECTS: usize = 300;
const REV1: &str = "main@sha1:f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1";
const REV2: &str = "main@sha1:f2f2f2f2f2f2f2f2f2f2f2f2f2f2f2f2f2f2f2f2";
const LEASE: &str = "kustomize-controller-leader-election";
/// Short timings so a takeover happens within seconds; the renew deadline is shorter than the
/// lease duration, as it must be, and long enough for a loaded CI machine's API server (4 s was
/// not: a leader lost its Lease mid-apply in a CI run).
const LEASE_DURATION: Duration = Duration::from_secs(10);
const ELECTION: [&str; 4] = [
    "--enable-leader-election",
    "--leader-election-lease-duration=10s",
    "--leader-election-renew-deadline=7s",
    "--leader-election-retry-period=1s",
];
const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

fn config_maps(count: usize, value: &str) -> String {
    (0..count)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:04}\ndata:\n  value: \"{value}\"\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Writes a replica sent, by resource, leaving out its Lease.
async fn writes(replica: &ControllerProcess) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for ((verb, resource), n) in replica.api_requests().await {
        if WRITES.contains(&verb.as_str()) && resource != "leases.coordination.k8s.io" {
            *out.entry(resource).or_default() += n;
        }
    }
    out
}

struct Election {
    s: Scenario,
}

impl Election {
    async fn start(prefix: &str) -> (Self, ControllerProcess, ControllerProcess) {
        let s = Scenario::new(prefix).await;
        let election = Self { s };
        let first = ControllerProcess::start_as(election.s.namespace(), "replica-1", &ELECTION);
        election.wait_holder("replica-1", Duration::from_secs(30)).await;
        let second = ControllerProcess::start_as(election.s.namespace(), "replica-2", &ELECTION);
        (election, first, second)
    }

    async fn holder(&self) -> Option<String> {
        Api::<Lease>::namespaced(self.s.client.clone(), self.s.namespace())
            .get_opt(LEASE)
            .await
            .ok()??
            .spec?
            .holder_identity
    }

    async fn wait_holder(&self, who: &str, limit: Duration) {
        eventually(&format!("{who} holds the Lease"), limit, || async {
            (self.holder().await.as_deref() == Some(who)).then_some(())
        })
        .await;
    }

    /// [`Election::wait_holder`] for `replica`, with its log when it does not take over.
    async fn wait_takeover(&self, who: &str, replica: &ControllerProcess, limit: Duration) {
        let took_over = tokio::time::timeout(limit, async {
            while self.holder().await.as_deref() != Some(who) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        assert!(
            took_over.is_ok(),
            "{who} did not take the Lease over within {limit:?} (held by {:?}); its log:\n{}",
            self.holder().await,
            replica.logs()
        );
    }

    /// Our ConfigMaps in the namespace, as name → (value, resourceVersion, uid).
    async fn config_maps(&self) -> BTreeMap<String, (String, String, String)> {
        Api::<ConfigMap>::namespaced(self.s.client.clone(), self.s.namespace())
            .list(&ListParams::default().labels("kustomize.toolkit.fluxcd.io/name=app"))
            .await
            .expect("list ConfigMaps")
            .items
            .into_iter()
            .map(|cm| {
                let value = cm.data.and_then(|d| d.get("value").cloned()).unwrap_or_default();
                let m = cm.metadata;
                (
                    m.name.unwrap_or_default(),
                    (
                        value,
                        m.resource_version.unwrap_or_default(),
                        m.uid.unwrap_or_default(),
                    ),
                )
            })
            .collect()
    }

    /// Waits until `replica` reports revision `revision` applied: longer than the shared
    /// helper waits, as hundreds of objects take a while on a loaded machine.
    async fn wait_applied(
        &self,
        replica: &ControllerProcess,
        revision: &str,
    ) -> kustomize_controller::api::Kustomization {
        let message = format!("Applied revision: {revision}");
        let applied = tokio::time::timeout(Duration::from_secs(240), async {
            loop {
                if let Some(ks) = self.s.get("app").await {
                    let ready = crate::support::controller::condition(&ks, "Ready");
                    if ready.is_some_and(|r| r.status == "True" && r.message.contains(&message)) {
                        return ks;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
        applied.unwrap_or_else(|_| panic!("{revision} not applied; log:\n{}", replica.logs()))
    }

    /// Waits until `replica` sent no write for two seconds; returns its writes.
    async fn quiet(&self, replica: &ControllerProcess) -> BTreeMap<String, f64> {
        let mut last = writes(replica).await;
        let quiet = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let now = writes(replica).await;
                if now == last {
                    return now;
                }
                last = now;
            }
        })
        .await;
        quiet.unwrap_or_else(|_| panic!("replica kept writing; log:\n{}", replica.logs()))
    }

    /// Waits until the leader has applied some but not all objects.
    async fn wait_mid_apply(&self, leader: &ControllerProcess) -> usize {
        let seen = tokio::time::timeout(Duration::from_secs(90), async {
            loop {
                let count = self.config_maps().await.len();
                if count >= OBJECTS / 10 {
                    return count;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let count = seen.unwrap_or_else(|_| panic!("the leader never applied; log:\n{}", leader.logs()));
        assert!(
            count < OBJECTS,
            "the fault lands mid-apply, not after it ({count} objects)"
        );
        count
    }
}

#[tokio::test]
async fn failover_a_killed_leader_is_replaced_within_the_lease_duration_and_the_apply_finishes() {
    let (e, first, second) = Election::start("kc-failover").await;
    e.s.publish_objects("repo", REV1, &config_maps(OBJECTS, "one"))
        .await;
    e.s.apply("app", json!({"timeout": "5m"})).await;
    let at_kill = e.wait_mid_apply(&first).await;
    assert_eq!(
        writes(&second).await,
        BTreeMap::new(),
        "the standby wrote nothing"
    );
    first.signal("KILL");
    let killed = Instant::now();
    drop(first);

    e.wait_holder("replica-2", Duration::from_secs(30)).await;
    let takeover = killed.elapsed();
    let ks = e.wait_applied(&second, REV1).await;
    let finished = killed.elapsed();
    eprintln!(
        "failover: killed at {at_kill}/{OBJECTS} objects; replica-2 took the Lease after {takeover:?}, \
         finished the apply after {finished:?}"
    );
    // It may take over once the Lease expires (whole seconds), and tries every retry period.
    assert!(
        takeover <= LEASE_DURATION + Duration::from_secs(5),
        "took over within the lease duration (plus a retry period and slack): {takeover:?}"
    );
    let live = e.config_maps().await;
    assert_eq!(live.len(), OBJECTS, "every object applied");
    assert!(live.values().all(|(value, _, _)| value == "one"));
    let inventory = ks.status.and_then(|s| s.inventory).unwrap_or_default().entries;
    assert_eq!(inventory.len(), OBJECTS, "the inventory lists every object once");
    let wrote = writes(&second).await;
    assert!(
        wrote.get("configmaps").copied().unwrap_or(0.0) > 0.0,
        "replica-2 did the rest: {wrote:?}"
    );
    e.s.delete().await;
}

#[tokio::test]
async fn failover_a_paused_leader_resumed_past_its_renew_deadline_writes_nothing_and_exits() {
    let (e, mut first, second) = Election::start("kc-pause").await;
    e.s.publish_objects("repo", REV1, &config_maps(OBJECTS, "one"))
        .await;
    e.s.apply("app", json!({"timeout": "5m"})).await;
    let at_pause = e.wait_mid_apply(&first).await;
    first.signal("STOP");
    let paused = Instant::now();

    // The standby takes over once the Lease expires and applies a newer revision.
    e.s.publish_objects("repo", REV2, &config_maps(OBJECTS, "two"))
        .await;
    e.wait_takeover("replica-2", &second, Duration::from_secs(30))
        .await;
    e.wait_applied(&second, REV2).await;
    // The new leader may run one more pass (its cache still showed the old leader's status):
    // the baseline is taken once it is quiet, so what changes after the resume is not its.
    let quiet = e.quiet(&second).await;
    let settled = e.config_maps().await;
    assert_eq!(settled.len(), OBJECTS);
    assert!(
        settled.values().all(|(value, _, _)| value == "two"),
        "replica-2 applied revision 2"
    );
    let before = e.s.get("app").await.unwrap();
    let status_before = before.metadata.resource_version.clone();

    // Resumed, the old leader is far past its renew deadline: it must not write its stale
    // revision-1 apply over revision 2, and must give up.
    first.signal("CONT");
    let resumed = Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(status) = first.exited() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the resumed leader kept running; log:\n{}", first.logs()));
    eprintln!(
        "pause: stopped at {at_pause}/{OBJECTS} objects for {:?}; exited {:?} after resuming ({status})",
        resumed - paused,
        resumed.elapsed()
    );
    assert!(!status.success(), "exits with an error: {status}");
    assert!(
        first.logs().contains("leader election lost"),
        "says why it stopped; log:\n{}",
        first.logs()
    );
    // Anything it sent would have landed by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        writes(&second).await,
        quiet,
        "replica-2 stayed quiet, so a change now is the resumed leader's"
    );
    assert_eq!(
        e.config_maps().await,
        settled,
        "no object was written after the resume"
    );
    let after = e.s.get("app").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        status_before,
        "the Kustomization (status) was not written after the resume: before {}\nafter {}\nreplica-2's log:\n{}",
        serde_json::to_string(&before.status).unwrap(),
        serde_json::to_string(&after.status).unwrap(),
        second.logs()
    );
    assert_eq!(e.holder().await.as_deref(), Some("replica-2"));
    e.s.delete().await;
}
