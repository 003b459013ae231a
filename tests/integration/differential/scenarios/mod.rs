//! The scenarios: a Git tree, objects made first, and steps. Trees are shared by both sides,
//! so they never name a namespace; `{ns}` in a Kustomization's spec or a setup object is the
//! side's namespace.

mod features;
mod kinds;
mod lifecycle;
mod oci;

use serde_json::Value;

use super::harness::Keys;
use crate::support::config_map;

pub(super) type Files = Vec<(String, String)>;

pub(super) struct Scenario {
    pub(super) name: &'static str,
    /// The first commit.
    pub(super) files: Files,
    /// Objects created in each side's namespace before the first step.
    pub(super) setup: Vec<Value>,
    pub(super) steps: Vec<Step>,
}

pub(super) struct Step {
    pub(super) action: Action,
    /// Which Kustomizations to wait for, and for what, before the snapshot.
    pub(super) wait: Vec<(&'static str, Expect)>,
}

pub(super) enum Action {
    /// Kustomizations applied (server-side, by the suite), each spec merged over the defaults
    /// (`null` removes a default).
    Apply(Vec<(&'static str, Value)>),
    /// A new commit with exactly these files; both sources fetch it before the wait.
    Commit(Files),
    /// A new commit with exactly these files, pushed as an OCI artifact (the commit its
    /// origin); OCIRepository `oci` fetches it before the wait.
    Push(Files),
    Delete(&'static str),
    /// Objects applied by the suite in each side's namespace.
    Objects(Vec<Value>),
}

pub(super) enum Expect {
    /// Ready decided for the current generation and the source's newest revision attempted.
    Revision,
    /// Ready decided for the current generation (whatever the revision).
    Done,
    Gone,
    /// Suspended while Ready: both controllers record the new generation in
    /// status.observedGeneration (Flux's deferred status write does) and do nothing else.
    Suspended,
    /// Nothing to wait for: a few seconds for the controllers to (not) act.
    Quiet,
}

pub(super) fn all(keys: &Keys) -> Vec<Scenario> {
    let mut all = lifecycle::scenarios();
    all.extend(features::scenarios(keys));
    all.extend(oci::scenarios());
    all.extend(kinds::scenarios());
    all
}

/// One step.
fn step(action: Action, wait: Vec<(&'static str, Expect)>) -> Step {
    Step { action, wait }
}

/// Kustomization `name` applied with `spec` and awaited at the newest revision.
fn apply(name: &'static str, spec: Value) -> Step {
    step(Action::Apply(vec![(name, spec)]), vec![(name, Expect::Revision)])
}

fn files(list: &[(&str, &str)]) -> Files {
    list.iter().map(|(p, c)| (p.to_string(), c.to_string())).collect()
}

/// A tree of `kustomization.yaml` listing `objects.yaml`, which holds `objects`.
fn tree(objects: &[String]) -> Files {
    files(&[
        ("kustomization.yaml", "resources: [objects.yaml]\n"),
        ("objects.yaml", &objects.join("---\n")),
    ])
}

/// A Deployment the fake kubelet runs; `behavior` steers its pods (`fail`, `never-ready`).
fn deployment(name: &str, behavior: Option<&str>) -> String {
    let annotations = behavior.map_or(String::new(), |b| {
        format!("\n      annotations: {{fake-kubelet.e2e/behavior: {b}}}")
    });
    // Failing pods fail the rollout soon; healthy ones get time on a loaded machine.
    let deadline = if behavior == Some("fail") { 3 } else { 120 };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  progressDeadlineSeconds: {deadline}\n  \
         selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}{annotations}\n    \
         spec:\n      containers:\n      - {{name: app, image: \"registry.invalid/app:1\"}}\n"
    )
}
