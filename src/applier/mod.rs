//! The server-side-apply resource manager: stages, drift detection, apply, prune.
//!
//! Objects are plain `serde_json::Value`s. Pure steps (staging, normalization, planning
//! decisions, diff, inventory, prune planning, fingerprints) live in their own modules; the
//! I/O is in `planner` (the per-object plan apply and preview share), `apply`, `preview`,
//! `prune`, `settle` and `http` (the requests).
//!
//! Differences from Flux, on purpose (see the module docs for details):
//! - every object is validated (server-side dry-run) before anything is written, so an invalid
//!   object changes nothing; objects whose dry-run fails only because something in the same
//!   apply does not exist yet (namespace, CRD, ServiceAccount, webhook Service) are retried in a
//!   bounded second pass after the rest is applied;
//! - force recreates an object only on a genuine immutable-field error, and only after the new
//!   object validated as a create;
//! - an object moved between two Kustomizations of one source keeps its UID whichever
//!   reconciles first; one that both keep claiming is a conflict naming both, not a silent
//!   take-over (the `handover` module);
//! - a no-op reconcile costs one LIST per kind, none where a shared metadata watch of the kind
//!   is synced (the `watch` module), and a new revision changing m objects one LIST per kind
//!   (or none) and the m dry-runs and applies (the `fingerprint` module); a full run reads live
//!   objects with one LIST per kind too, and an object that LIST does not show is dry-run as a
//!   create without a GET (the answer tells whether it exists after all): a cold apply costs a
//!   dry-run and an apply per object where Flux sends a GET, a dry-run and an apply;
//! - dry-runs, writes and deletes within a stage run with bounded concurrency (16 by default;
//!   Flux dry-runs 4 at a time and applies and deletes one at a time).
//!
//! The [`Applier`] keeps the fast-path state in memory; share one instance (e.g. in an `Arc`)
//! across reconciles.

mod apply;
mod diff;
mod drift;
mod fingerprint;
pub(crate) mod handover;
mod http;
mod inspect;
pub mod inventory;
mod managed;
mod masking;
mod normalize;
mod plan;
mod policy;
mod preview;
mod prune;
mod settle;
mod stage;
mod typed_shape;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;

pub use drift::{DriftPolicy, DriftReport};
pub use preview::ObjectDiff;
pub use prune::PruneError;
pub use watch::LiveWatches;

pub(crate) use masking::mask;

use crate::api::conditions::reason;
use crate::api::inventory::ObjectRef;
use crate::api::kustomization::IgnoreRule;
use crate::error::StepError;
use crate::kube_ext::ResourceResolver;
use fingerprint::FingerprintStore;

/// Settings of the applier, from the controller's flags.
#[derive(Clone, Debug)]
pub struct ApplierOptions {
    /// Parallel dry-runs, applies and deletes per apply (`--concurrent-ssa`, default 16).
    pub concurrency: usize,
    /// `--custom-apply-stage-kinds`: `group/Kind` (`Kind` for the core group).
    pub custom_stage_kinds: Vec<String>,
    /// Bound of the first-stage wait, of the second pass for objects depending on others in the
    /// same apply, and of waiting for deletions when recreating (Flux: 60 s).
    pub wait_timeout: Duration,
    /// How often the no-op fast path is replaced by a full dry-run of every object.
    pub full_sync_every: Duration,
    /// `--override-manager`: further field managers taken over like `kubectl`.
    pub override_managers: Vec<String>,
    /// Poll interval of waits and of the second pass (Flux: 2 s).
    pub retry_interval: Duration,
    /// Flux's `MigrateAPIVersion` gate (default off): before the dry-run, rewrite the
    /// `apiVersion` of every managedFields entry of a live object to the desired version, so
    /// that fields recorded under a removed or older version stay owned and can be pruned.
    pub migrate_api_version: bool,
}

impl Default for ApplierOptions {
    fn default() -> Self {
        Self {
            concurrency: 16,
            custom_stage_kinds: Vec::new(),
            wait_timeout: Duration::from_secs(60),
            full_sync_every: Duration::from_secs(3600),
            override_managers: Vec::new(),
            retry_interval: Duration::from_secs(2),
            migrate_api_version: false,
        }
    }
}

/// One apply (or preview) of a Kustomization's build output.
pub struct ApplyRequest<'a> {
    pub owner: Owner,
    /// The built manifests.
    pub objects: Vec<serde_json::Value>,
    /// `spec.force`: recreate objects on immutable-field changes.
    pub force: bool,
    /// `spec.ignore`.
    pub ignore: &'a [IgnoreRule],
    /// The source revision, for handing objects over between Kustomizations of one source.
    pub revision: &'a str,
}

/// The server-side-apply resource manager. Shares the resolver's client; keeps the no-op
/// fingerprints of every Kustomization it applied in memory.
pub struct Applier {
    resolver: ResourceResolver,
    options: ApplierOptions,
    prints: FingerprintStore,
    /// The shared metadata watches of the cluster, when the fast path may read them.
    watches: Option<Arc<LiveWatches>>,
}

impl Applier {
    pub fn new(resolver: ResourceResolver, options: ApplierOptions) -> Self {
        Self {
            resolver,
            options,
            prints: FingerprintStore::default(),
            watches: None,
        }
    }

    /// The fast path reads live prints from `watches` (of the same cluster) where they are synced.
    pub fn with_live_watches(mut self, watches: Arc<LiveWatches>) -> Self {
        self.watches = Some(watches);
        self
    }

    pub(crate) fn options(&self) -> &ApplierOptions {
        &self.options
    }

    fn client(&self) -> &Client {
        self.resolver.client()
    }
}

/// The Kustomization that owns the applied objects; its name and namespace become the owner
/// labels `kustomize.toolkit.fluxcd.io/name` and `/namespace`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub name: String,
    pub namespace: String,
}

impl Owner {
    pub fn new(name: &str, namespace: &str) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
        }
    }

    /// `namespace/name`, the key of per-Kustomization state.
    pub(crate) fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What happened to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Created,
    Configured,
    Unchanged,
    Deleted,
    Skipped,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
            Action::Deleted => "deleted",
            Action::Skipped => "skipped",
        })
    }
}

/// How one object differs from what was applied: what `drift: warn` reports and the
/// fingerprints remember (beside [`Action`], so that neither imports the drift detection).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Drift {
    /// Deleted out of band.
    Missing,
    /// These fields (dotted paths) differ; none named when an immutable field differs.
    Changed(Vec<String>),
}

/// One line of a change set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeSetEntry {
    pub object: ObjectRef,
    /// `group/version` or `v1`.
    pub api_version: String,
    pub action: Action,
}

/// `Kind/namespace/name created` (`Kind/name` when cluster-scoped), Flux's text.
impl fmt::Display for ChangeSetEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.object, self.action)
    }
}

/// What an apply, prune or finalize did, in the order it was done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeSet {
    pub entries: Vec<ChangeSetEntry>,
}

impl ChangeSet {
    pub(crate) fn push(&mut self, object: ObjectRef, api_version: &str, action: Action) {
        self.entries.push(ChangeSetEntry {
            object,
            api_version: api_version.into(),
            action,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries with this action.
    pub fn with_action(&self, action: Action) -> impl Iterator<Item = &ChangeSetEntry> {
        self.entries.iter().filter(move |e| e.action == action)
    }

    /// The action recorded for an object, if any.
    pub fn action_of(&self, object: &ObjectRef) -> Option<Action> {
        self.entries
            .iter()
            .find(|e| &e.object == object)
            .map(|e| e.action)
    }

    /// The `output` of Flux's "server-side apply completed" log line: each object's action,
    /// or with `grouped` (Flux's GroupChangeLog gate, fewer distinct keys for log stores) the
    /// objects of each action. Keys sorted, as Go prints maps.
    pub(crate) fn log_output(&self, grouped: bool) -> serde_json::Value {
        let mut output = serde_json::Map::new();
        for entry in &self.entries {
            let (subject, action) = (entry.object.to_string(), entry.action.to_string());
            if grouped {
                let subjects = output.entry(action).or_insert_with(|| serde_json::json!([]));
                if let Some(list) = subjects.as_array_mut() {
                    list.push(subject.into());
                }
            } else {
                output.insert(subject, action.into());
            }
        }
        serde_json::Value::Object(output)
    }
}

/// One line per entry, as Flux logs and puts in events.
impl fmt::Display for ChangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, entry) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{entry}")?;
        }
        Ok(())
    }
}

/// Why one object could not be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The manifest itself is wrong (missing namespace, unknown kind, rejected by validation).
    Invalid,
    /// A change to an immutable field without force.
    Immutable,
    /// Another Kustomization owns the object.
    Conflict,
    /// Something it needs (namespace, CRD, ServiceAccount, webhook) still does not exist.
    MissingDependency,
    /// The API server or the network failed; retrying may help.
    Api,
}

/// An error about one object; the message never contains Secret values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectError {
    /// `Kind/namespace/name` (or `Kind/name`).
    pub subject: String,
    pub kind: FailureKind,
    pub message: String,
}

impl fmt::Display for ObjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.subject, self.message)
    }
}

/// An apply that did not complete. `changes` holds what was applied before it stopped, which
/// the controller appends to the condition message like Flux does.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{}", render_errors(errors, changes))]
pub struct ApplyError {
    pub errors: Vec<ObjectError>,
    pub changes: ChangeSet,
}

fn render_errors(errors: &[ObjectError], changes: &ChangeSet) -> String {
    let mut out = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    if !changes.is_empty() {
        out.push('\n');
        out.push_str(&changes.to_string());
    }
    out
}

/// Flux retries a failed apply after `spec.retryInterval`, whatever failed: a manifest fix
/// arrives as a new revision, a missing dependency or another owner may change any time.
impl StepError for ApplyError {
    fn reason(&self) -> &'static str {
        reason::RECONCILIATION_FAILED
    }

    /// As Flux words it: the error, then each change made before it stopped, every line
    /// ended (so the message ends with a line break).
    fn condition_message(&self, _requeue_dependency: std::time::Duration) -> String {
        format!("{self}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Retry;

    /// A change set of (object, apiVersion, action) entries, in this order.
    pub(super) fn change_set<'a>(
        entries: impl IntoIterator<Item = (ObjectRef, &'a str, Action)>,
    ) -> ChangeSet {
        let mut changes = ChangeSet::default();
        for (object, api_version, action) in entries {
            changes.push(object, api_version, action);
        }
        changes
    }

    // Before, no "server-side apply completed" line was logged, and the GroupChangeLog gate
    // was accepted without effect.
    #[test]
    fn the_apply_log_output_is_fluxs_map_by_object_or_grouped_by_action() {
        let cs = change_set([
            (
                ObjectRef::new("", "Namespace", "", "apps"),
                "v1",
                Action::Unchanged,
            ),
            (
                ObjectRef::new("", "ConfigMap", "apps", "b"),
                "v1",
                Action::Created,
            ),
            (
                ObjectRef::new("", "ConfigMap", "apps", "a"),
                "v1",
                Action::Created,
            ),
        ]);
        assert_eq!(
            cs.log_output(false).to_string(),
            r#"{"ConfigMap/apps/a":"created","ConfigMap/apps/b":"created","Namespace/apps":"unchanged"}"#
        );
        assert_eq!(
            cs.log_output(true).to_string(),
            r#"{"created":["ConfigMap/apps/b","ConfigMap/apps/a"],"unchanged":["Namespace/apps"]}"#
        );
    }

    #[test]
    fn change_set_lines_are_fluxs_text() {
        let cs = change_set([
            (ObjectRef::new("", "Namespace", "", "apps"), "v1", Action::Created),
            (
                ObjectRef::new("apps", "Deployment", "apps", "web"),
                "apps/v1",
                Action::Configured,
            ),
            (
                ObjectRef::new("", "ConfigMap", "apps", "cfg"),
                "v1",
                Action::Unchanged,
            ),
            (ObjectRef::new("", "Secret", "apps", "s"), "v1", Action::Deleted),
            (
                ObjectRef::new("", "Service", "apps", "svc"),
                "v1",
                Action::Skipped,
            ),
        ]);
        assert_eq!(
            cs.to_string(),
            "Namespace/apps created\nDeployment/apps/web configured\nConfigMap/apps/cfg unchanged\n\
             Secret/apps/s deleted\nService/apps/svc skipped"
        );
    }

    #[test]
    fn apply_error_appends_the_partial_change_set() {
        let changes = change_set([(ObjectRef::new("", "Namespace", "", "apps"), "v1", Action::Created)]);
        let err = ApplyError {
            errors: vec![ObjectError {
                subject: "ConfigMap/apps/x".into(),
                kind: FailureKind::Invalid,
                message: "dry-run failed (Invalid): bad".into(),
            }],
            changes,
        };
        assert_eq!(
            err.to_string(),
            "ConfigMap/apps/x dry-run failed (Invalid): bad\nNamespace/apps created"
        );
        assert_eq!(
            err.condition_message(std::time::Duration::ZERO),
            "ConfigMap/apps/x dry-run failed (Invalid): bad\nNamespace/apps created\n"
        );
        assert_eq!(err.reason(), "ReconciliationFailed");
        assert_eq!(err.retry(), Retry::RetryInterval);
    }
}
