//! The differential suite: every scenario reconciled by the real Flux kustomize-controller
//! (built by e2e/fluxkc/build.sh) and by ours, each in a namespace of its own on the same
//! control plane, both fed by the real source-controller from the same Git repository. The
//! two end states are compared after masking what must differ (namespaces, uids, times):
//! each Kustomization's metadata and status, the objects in its namespace with their field
//! managers, the Kubernetes events and the notification payloads. A difference fails the
//! suite unless the table in `intended.rs` lists it.
//!
//! One process of each controller serves the whole suite (each selects its Kustomizations by
//! label) and the scenarios run concurrently; a scenario is a list of steps, each an action
//! (a Git commit, a Kustomization applied or deleted, objects created) and a wait until
//! both controllers have settled, followed by a snapshot of both namespaces.

mod compare;
mod harness;
mod intended;
mod mask;
mod scenarios;

use std::collections::BTreeMap;

use compare::{Difference, Verdict};

#[tokio::test]
async fn flux_and_ours_end_in_the_same_state() {
    let mut suite = harness::Suite::start().await;
    let scenarios = scenarios::all(&suite.keys);
    let names: Vec<&str> = scenarios.iter().map(|s| s.name).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "scenario names repeat: {names:?}");

    let runs = futures::future::join_all(scenarios.iter().map(|s| suite.run(s))).await;
    // Events and notifications of the last steps may still be on their way.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let mut differences: BTreeMap<&str, Vec<Difference>> = BTreeMap::new();
    for run in &runs {
        let (flux, ours) = suite.observed(run);
        differences.insert(run.name, compare::diff(&flux, &ours));
    }
    let verdict = Verdict::judge(&differences, intended::TABLE);
    println!("{}", verdict.report());
    suite.stop();
    // A failed run leaves its namespaces behind for inspection.
    assert!(verdict.passed(), "{}", verdict.failures(&suite.logs()));
    suite.delete(&runs).await;
}
