//! The I/O shell of the applier: read live objects, dry-run, diff, apply, per stage.
//!
//! Order of work for one apply:
//! 1. prepare (no writes): compile `spec.ignore`, resolve kinds (from discovery, or from a CRD
//!    in the same apply), normalize, check namespaces; any error stops here;
//! 2. fast path ([`super::fingerprint`]): objects whose desired and live fingerprints match the
//!    last successful run are reported unchanged after one LIST per kind;
//! 3. plan (no writes except the managed-fields cleanup): read the live object (on a full run
//!    from one owner-labelled LIST per kind, a GET only for objects not found there) and
//!    server-side dry-run every other object, concurrently; a terminal error in any object stops here, so an invalid
//!    object changes nothing; dry-runs that fail only because something in this apply does not
//!    exist yet are deferred;
//! 4. apply the drifted objects stage by stage; after the first two stages wait until what they
//!    wrote is kstatus Current (CRDs Established, namespaces there, classes accepted), refresh
//!    discovery after the first; objects deferred for something an earlier stage wrote are
//!    dry-run again at the start of their own stage;
//! 5. second pass: the deferred objects are dry-run and applied again, every
//!    `retry_interval`, until `wait_timeout`; only what still fails is reported.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use futures::{StreamExt, stream};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::Request;
use kube::{Client, Resource};
use serde_json::Value;
use tokio::time::Instant;

use super::diff::{IgnoreRules, diff_text, has_drifted, remove_pointers};
use super::fingerprint::{FingerprintStore, ObjectPrint, desired_print, live_print, run_key};
use super::managed::{cleanup_patch, migrate_api_version_patch, owned_by_other_applier};
use super::normalize::normalize;
use super::policy::{SsaPolicy, excluded, force_enabled, ssa_policy};
use super::secret::redact;
use super::stage::{Stage, group_of, order_key, stage_of};
use super::{Action, ApplyError, ChangeSet, DEFAULT_WAIT_TIMEOUT, FailureKind, ObjectError, Owner};
use crate::api::conditions::keys;
use crate::api::inventory::ObjectRef;
use crate::api::kustomization::IgnoreRule;
use crate::health::kstatus::{self, ObjectStatus};
use crate::kube_ext::{ResolveError, ResolvedKind, ResourceResolver};

/// Settings of the applier, from the controller's flags.
#[derive(Clone, Debug)]
pub struct ApplierOptions {
    /// Parallel dry-runs, applies and deletes per apply (Flux `--concurrent-ssa`, default 4).
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
            concurrency: 4,
            custom_stage_kinds: Vec::new(),
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            full_sync_every: Duration::from_secs(3600),
            override_managers: Vec::new(),
            retry_interval: Duration::from_secs(2),
            migrate_api_version: false,
        }
    }
}

/// One apply of a Kustomization's build output.
pub struct ApplyRequest<'a> {
    pub owner: Owner,
    /// The built manifests.
    pub objects: Vec<serde_json::Value>,
    /// `spec.force`: recreate objects on immutable-field changes.
    pub force: bool,
    /// `spec.ignore`.
    pub ignore: &'a [IgnoreRule],
    /// Source revision and build digest: with the force/ignore settings they key the fast path.
    pub revision: &'a str,
    pub digest: &'a str,
}

/// The server-side-apply resource manager. Shares the resolver's client; keeps the no-op
/// fingerprints of every Kustomization it applied in memory.
pub struct Applier {
    resolver: ResourceResolver,
    options: ApplierOptions,
    pub(super) prints: FingerprintStore,
}

/// The difference an apply would make to one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectDiff {
    pub object: ObjectRef,
    /// `Created`, `Configured`, `Unchanged` or `Skipped`.
    pub action: Action,
    /// Unified diff (live → desired), Secret values masked; empty when unchanged.
    pub diff: String,
}

/// A prepared object: normalized, resolved, placed.
#[derive(Clone)]
struct Desired {
    obj: Value,
    object: ObjectRef,
    api_version: String,
    kind: ResolvedKind,
    stage: Stage,
    print: String,
}

impl Desired {
    fn subject(&self) -> String {
        self.object.to_string()
    }
}

/// What the dry-run decided for one object.
enum Plan {
    Skip {
        live: Option<Value>,
    },
    Unchanged {
        live: Value,
    },
    Apply {
        live: Option<Value>,
        ignored: Vec<String>,
    },
    /// Immutable change with force: delete, then create.
    Recreate,
    /// Depends on something in this apply that does not exist yet.
    Deferred(ObjectError),
}

/// Facts about the whole apply that classify dry-run failures.
struct Batch {
    namespaces: HashSet<String>,
    /// `group/Kind` served by CRDs in this apply.
    pending_kinds: HashSet<String>,
    /// `namespace/name` of the ServiceAccounts in this apply.
    service_accounts: HashSet<String>,
}

impl Batch {
    fn of(desired: &[Desired]) -> Self {
        let core = |d: &&Desired, kind: &str| d.object.kind == kind && d.object.group.is_empty();
        Self {
            namespaces: desired
                .iter()
                .filter(|d| core(d, "Namespace"))
                .map(|d| d.object.name.clone())
                .collect(),
            pending_kinds: pending_kinds(desired),
            service_accounts: desired
                .iter()
                .filter(|d| core(d, "ServiceAccount"))
                .map(|d| format!("{}/{}", d.object.namespace, d.object.name))
                .collect(),
        }
    }
}

pub(super) fn api_url(kind: &ResolvedKind, namespace: &str) -> String {
    let ns = (kind.namespaced && !namespace.is_empty()).then_some(namespace);
    DynamicObject::url_path(&kind.resource, ns)
}

/// The Flux-style message of an API error: `<what> (<Reason>): <message>`.
pub(super) fn api_message(what: &str, err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.reason.is_empty() => {
            format!("{what} ({}): {}", status.reason, status.message)
        }
        kube::Error::Api(status) => format!("{what}: {}", status.message),
        other => format!("{what}: {other}"),
    }
}

fn status_of(err: &kube::Error) -> Option<&kube::core::Status> {
    match err {
        kube::Error::Api(status) => Some(status),
        _ => None,
    }
}

pub(super) fn is_not_found(err: &kube::Error) -> bool {
    status_of(err).is_some_and(|s| s.code == 404)
}

/// The failure kind of an API error that is not about the manifest.
fn transport_kind(err: &kube::Error) -> FailureKind {
    match status_of(err) {
        Some(s) if s.code == 409 => FailureKind::Conflict,
        Some(s) if matches!(s.code, 400 | 403 | 404 | 422) => FailureKind::Invalid,
        _ => FailureKind::Api,
    }
}

/// The field named by an immutable-field error: from the status causes, or the message. Only
/// errors that say "immutable" count (not every 409/422 as in Flux).
pub fn immutable_field(status: &kube::core::Status) -> Option<String> {
    let mentions = |m: &str| m.to_ascii_lowercase().contains("immutable");
    if let Some(cause) = status
        .details
        .as_ref()
        .and_then(|d| d.causes.iter().find(|c| mentions(&c.message)))
    {
        return Some(if cause.field.is_empty() {
            cause.message.clone()
        } else {
            cause.field.clone()
        });
    }
    if !mentions(&status.message) {
        return None;
    }
    // "<Kind> \"name\" is invalid: spec.selector: Invalid value: ...: field is immutable"
    let field = status
        .message
        .split(": ")
        .nth(1)
        .filter(|f| !f.contains(' '))
        .unwrap_or("(unknown field)");
    Some(field.to_string())
}

fn namespace_missing(status: &kube::core::Status) -> bool {
    status.code == 404 && status.details.as_ref().is_some_and(|d| d.kind == "namespaces")
}

/// The ServiceAccount (`namespace/name`) the ServiceAccount admission plugin could not find for
/// a Pod: "pods \"p\" is forbidden: error looking up service account ns/sa: serviceaccount
/// \"sa\" not found".
fn missing_service_account(status: &kube::core::Status) -> Option<&str> {
    if status.code != 403 || !status.message.ends_with("not found") {
        return None;
    }
    let (_, rest) = status.message.split_once("error looking up service account ")?;
    rest.split_once(':').map(|(sa, _)| sa)
}

/// True when a dry-run failed only because something this apply creates does not exist yet.
/// A namespace's `default` ServiceAccount counts as created by this apply: the
/// serviceaccount-controller adds it to every new namespace shortly after.
fn missing_dependency(status: &kube::core::Status, desired: &Desired, batch: &Batch) -> bool {
    let msg = status.message.to_ascii_lowercase();
    let kind_key = format!("{}/{}", desired.kind.resource.group, desired.kind.resource.kind);
    (namespace_missing(status) && batch.namespaces.contains(&desired.object.namespace))
        || (status.code == 404 && batch.pending_kinds.contains(&kind_key))
        || msg.contains("failed calling webhook")
        || missing_service_account(status)
            .is_some_and(|sa| sa.ends_with("/default") || batch.service_accounts.contains(sa))
}

impl Applier {
    pub fn new(resolver: ResourceResolver, options: ApplierOptions) -> Self {
        Self {
            resolver,
            options,
            prints: FingerprintStore::default(),
        }
    }

    pub fn options(&self) -> &ApplierOptions {
        &self.options
    }

    pub(super) fn resolver(&self) -> &ResourceResolver {
        &self.resolver
    }

    pub(super) fn client(&self) -> &Client {
        self.resolver.client()
    }

    /// Applies `req.objects` for `req.owner` (see the module doc for the order of work).
    pub async fn apply(&self, req: ApplyRequest<'_>) -> Result<ChangeSet, ApplyError> {
        let owner_key = req.owner.key();
        let result = self.apply_inner(&req).await;
        if result.is_err() {
            self.prints.forget(&owner_key);
        }
        result
    }

    async fn apply_inner(&self, req: &ApplyRequest<'_>) -> Result<ChangeSet, ApplyError> {
        let ignore = &compile_ignore(req)?;
        let mut desired = self.prepare(req).await.map_err(|errors| ApplyError {
            errors,
            changes: ChangeSet::default(),
        })?;
        desired.sort_by_key(|d| {
            let o = &d.object;
            (d.stage, order_key(&d.api_version, &o.kind, &o.namespace, &o.name))
        });
        let batch = Batch::of(&desired);
        let key = run_key(req.revision, req.digest, req.force, req.ignore);
        let owner_key = req.owner.key();
        let previous = self
            .prints
            .fast_path(&owner_key, &key, self.options.full_sync_every);
        let full = previous.is_none();

        // outcome per index: action and live print after this run
        let mut outcomes: BTreeMap<usize, (Action, Option<String>)> = BTreeMap::new();
        if let Some(previous) = &previous {
            for (i, outcome) in self.fast_path(&req.owner, &desired, previous).await {
                outcomes.insert(i, outcome);
            }
        }

        // plan everything else, concurrently; nothing is written unless all plans succeed. On a
        // full run the live objects we own come from one LIST per kind instead of a GET each.
        let todo: Vec<usize> = (0..desired.len()).filter(|i| !outcomes.contains_key(i)).collect();
        let mut prefetched = if full {
            self.list_owned(&req.owner, &desired, todo.iter().copied(), false)
                .await
        } else {
            HashMap::new()
        };
        let plans: Vec<(usize, Result<Plan, ObjectError>)> =
            stream::iter(todo.into_iter().map(|i| (i, prefetched.remove(&i))))
                .map(|(i, live)| {
                    let d = &desired[i];
                    let batch = &batch;
                    async move { (i, self.plan(d, req, ignore, batch, live).await) }
                })
                .buffered(self.options.concurrency.max(1))
                .collect()
                .await;
        let errors: Vec<ObjectError> = plans
            .iter()
            .filter_map(|(_, p)| p.as_ref().err().cloned())
            .collect();
        if !errors.is_empty() {
            return Err(ApplyError {
                errors,
                changes: ChangeSet::default(),
            });
        }
        let mut planned: BTreeMap<usize, Plan> = plans
            .into_iter()
            .map(|(i, p)| (i, p.expect("errors handled")))
            .collect();
        let mut deferred: Vec<(usize, ObjectError)> = Vec::new();
        let mut to_apply: Vec<(usize, Plan)> = Vec::new();
        for (i, plan) in std::mem::take(&mut planned) {
            match plan {
                Plan::Deferred(err) => deferred.push((i, err)),
                plan => match settled(&plan) {
                    Some(outcome) => {
                        outcomes.insert(i, outcome);
                    }
                    None => to_apply.push((i, plan)),
                },
            }
        }

        // apply stage by stage
        let mut changes = ChangeSet::default();
        let record =
            |changes: &mut ChangeSet, outcomes: &BTreeMap<usize, (Action, Option<String>)>, i: usize| {
                let d: &Desired = &desired[i];
                changes.push(d.object.clone(), &d.api_version, outcomes[&i].0);
            };
        let mut earlier_stage_wrote = false;
        for stage in [Stage::Definitions, Stage::Classes, Stage::Custom, Stage::Rest] {
            let mut in_stage: Vec<(usize, Plan)> = {
                let (now, later): (Vec<_>, Vec<_>) = to_apply
                    .into_iter()
                    .partition(|(i, _)| desired[*i].stage == stage);
                to_apply = later;
                now
            };
            // Objects of this stage deferred for something an earlier stage has now written
            // (a *Class whose CRD came in the first stage): dry-run them again, so they are
            // applied, and waited for, in their stage and not after everything else.
            if earlier_stage_wrote {
                let (retry, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut deferred)
                    .into_iter()
                    .partition(|(i, _)| desired[*i].stage == stage);
                deferred = keep;
                let mut failures = Vec::new();
                for (i, plan) in self.replan(&desired, retry, req, ignore, &batch).await {
                    match plan {
                        Err(e) => failures.push(e),
                        Ok(Plan::Deferred(e)) => deferred.push((i, e)),
                        Ok(plan) => match settled(&plan) {
                            Some(outcome) => {
                                outcomes.insert(i, outcome);
                            }
                            None => in_stage.push((i, plan)),
                        },
                    }
                }
                if !failures.is_empty() {
                    return Err(ApplyError {
                        errors: failures,
                        changes,
                    });
                }
                in_stage.sort_by_key(|(i, _)| *i);
            }
            let applied = self.execute_all(&desired, in_stage, req).await;
            let mut failures = Vec::new();
            for (i, result) in applied {
                match result {
                    Ok(outcome) => {
                        outcomes.insert(i, outcome);
                    }
                    Err(e) => failures.push(e),
                }
            }
            for i in (0..desired.len()).filter(|i| desired[*i].stage == stage && outcomes.contains_key(i)) {
                record(&mut changes, &outcomes, i);
            }
            if !failures.is_empty() {
                return Err(ApplyError {
                    errors: failures,
                    changes,
                });
            }
            let changed: Vec<&Desired> = (0..desired.len())
                .filter(|i| desired[*i].stage == stage)
                .filter(|i| matches!(outcomes.get(i), Some((Action::Created | Action::Configured, _))))
                .map(|i| &desired[i])
                .collect();
            earlier_stage_wrote |= !changed.is_empty();
            if stage.waited_for() && !changed.is_empty() {
                self.wait_until_current(&changed)
                    .await
                    .map_err(|errors| ApplyError {
                        errors,
                        changes: changes.clone(),
                    })?;
                if stage == Stage::Definitions {
                    self.resolver.invalidate();
                }
            }
        }

        // second pass for objects that needed something from this apply
        let deadline = Instant::now() + self.options.wait_timeout;
        while !deferred.is_empty() {
            let round = self
                .replan(&desired, std::mem::take(&mut deferred), req, ignore, &batch)
                .await;
            let mut failures = Vec::new();
            for (i, plan) in round {
                match plan {
                    Err(e) => failures.push(e),
                    Ok(Plan::Deferred(e)) => deferred.push((i, e)),
                    Ok(plan) => {
                        let outcome = match settled(&plan) {
                            Some(outcome) => Ok(outcome),
                            None => self.execute(&desired[i], plan, req).await,
                        };
                        match outcome {
                            Ok(outcome) => {
                                outcomes.insert(i, outcome);
                                record(&mut changes, &outcomes, i);
                            }
                            Err(e) => failures.push(e),
                        }
                    }
                }
            }
            if !failures.is_empty() {
                return Err(ApplyError {
                    errors: failures,
                    changes,
                });
            }
            if deferred.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let errors = deferred.into_iter().map(|(_, e)| e).collect();
                return Err(ApplyError { errors, changes });
            }
            tokio::time::sleep(self.options.retry_interval).await;
        }

        // change set in apply order (fast-path and unchanged objects included)
        let mut ordered = ChangeSet::default();
        for (i, d) in desired.iter().enumerate() {
            ordered.push(d.object.clone(), &d.api_version, outcomes[&i].0);
        }
        let prints = desired
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let (action, live) = outcomes[&i].clone();
                let action = if action == Action::Skipped {
                    Action::Skipped
                } else {
                    Action::Unchanged
                };
                (
                    d.object.id(),
                    ObjectPrint {
                        desired: d.print.clone(),
                        live,
                        action,
                    },
                )
            })
            .collect();
        self.prints.record(&owner_key, &key, prints, full);
        Ok(ordered)
    }

    /// What an apply would change, without writing anything (the `diff` command): per object
    /// the action an apply would report and a unified diff with Secret values masked.
    pub async fn diff(&self, req: ApplyRequest<'_>) -> Result<Vec<ObjectDiff>, ApplyError> {
        let ignore = &compile_ignore(&req)?;
        let desired = self.prepare(&req).await.map_err(|errors| ApplyError {
            errors,
            changes: ChangeSet::default(),
        })?;
        let batch = Batch::of(&desired);
        let results: Vec<Result<ObjectDiff, ObjectError>> = stream::iter(&desired)
            .map(|d| {
                let batch = &batch;
                async move {
                    let url = api_url(&d.kind, &d.object.namespace);
                    let err = |kind, message: String| ObjectError {
                        subject: d.subject(),
                        kind,
                        message: redact(&message, &[&d.obj]),
                    };
                    let live = get(self.client(), &url, &d.object.name)
                        .await
                        .map_err(|e| err(transport_kind(&e), api_message("query failed", &e)))?;
                    let (action, text) = if excluded(&d.obj) || live.as_ref().is_some_and(excluded) {
                        (Action::Skipped, String::new())
                    } else {
                        match server_side_apply(self.client(), &url, &d.object.name, &d.obj, true).await {
                            Ok(dry) => {
                                let ignored = ignore.paths_for(&dry);
                                let action = match &live {
                                    None => Action::Created,
                                    Some(_) if has_drifted(live.as_ref(), &dry, &ignored) => {
                                        Action::Configured
                                    }
                                    Some(_) => Action::Unchanged,
                                };
                                (action, diff_text(live.as_ref(), &dry, &ignored))
                            }
                            // the namespace or CRD comes with the same apply
                            Err(e)
                                if live.is_none()
                                    && status_of(&e).is_some_and(|s| {
                                        missing_dependency(s, d, batch) || s.code == 404
                                    }) =>
                            {
                                (Action::Created, diff_text(None, &d.obj, &[]))
                            }
                            Err(e) => return Err(err(transport_kind(&e), api_message("dry-run failed", &e))),
                        }
                    };
                    Ok(ObjectDiff {
                        object: d.object.clone(),
                        action,
                        diff: text,
                    })
                }
            })
            .buffered(self.options.concurrency.max(1))
            .collect()
            .await;
        let errors: Vec<ObjectError> = results.iter().filter_map(|r| r.as_ref().err().cloned()).collect();
        if !errors.is_empty() {
            return Err(ApplyError {
                errors,
                changes: ChangeSet::default(),
            });
        }
        Ok(results.into_iter().map(|r| r.expect("errors handled")).collect())
    }

    /// Resolves and normalizes every object; all errors at once, nothing sent.
    async fn prepare(&self, req: &ApplyRequest<'_>) -> Result<Vec<Desired>, Vec<ObjectError>> {
        let crds: Vec<&Value> = req
            .objects
            .iter()
            .filter(|o| o.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition"))
            .collect();
        let mut errors = Vec::new();
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for obj in &req.objects {
            let text = |p: &str| {
                obj.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let (api_version, kind, name, namespace) = (
                text("/apiVersion"),
                text("/kind"),
                text("/metadata/name"),
                text("/metadata/namespace"),
            );
            let provisional = ObjectRef::new(group_of(&api_version), &kind, &namespace, &name);
            let fail = |kind: FailureKind, message: String| ObjectError {
                subject: provisional.to_string(),
                kind,
                message,
            };
            if api_version.is_empty() || kind.is_empty() || name.is_empty() {
                errors.push(fail(
                    FailureKind::Invalid,
                    "normalization error: apiVersion, kind and metadata.name are required".into(),
                ));
                continue;
            }
            let resolved = match self.resolver.resolve(&api_version, &kind).await {
                Ok(r) => r,
                Err(ResolveError::UnknownKind { .. })
                    if crd_serving(&crds, &api_version, &kind).is_some() =>
                {
                    crd_serving(&crds, &api_version, &kind).expect("checked")
                }
                Err(e @ ResolveError::Discovery { .. }) => {
                    errors.push(fail(FailureKind::Api, e.to_string()));
                    continue;
                }
                Err(e) => {
                    errors.push(fail(FailureKind::Invalid, format!("dry-run failed: {e}")));
                    continue;
                }
            };
            let mut normalized = obj.clone();
            if let Err(e) = normalize(
                &mut normalized,
                &req.owner,
                resolved.namespaced,
                &provisional.to_string(),
            ) {
                let subject = provisional.to_string();
                let message = e
                    .to_string()
                    .strip_prefix(&format!("{subject} "))
                    .unwrap_or_default()
                    .to_string();
                errors.push(ObjectError {
                    subject,
                    kind: FailureKind::Invalid,
                    message,
                });
                continue;
            }
            let namespace = if resolved.namespaced {
                namespace
            } else {
                String::new()
            };
            let object = ObjectRef::new(group_of(&api_version), &kind, &namespace, &name);
            if !seen.insert(object.id()) {
                errors.push(ObjectError {
                    subject: object.to_string(),
                    kind: FailureKind::Invalid,
                    message: "is defined more than once in the build output".into(),
                });
                continue;
            }
            out.push(Desired {
                print: desired_print(&normalized),
                stage: stage_of(&api_version, &kind, &self.options.custom_stage_kinds),
                obj: normalized,
                object,
                api_version,
                kind: resolved,
            });
        }
        if errors.is_empty() { Ok(out) } else { Err(errors) }
    }

    /// Lists the live objects of `indices` that carry `owner`'s labels: one LIST per kind (per
    /// namespace when all its objects share one), metadata only or full objects. A failed list
    /// yields no entries for its objects, which then take the per-object path.
    async fn list_owned(
        &self,
        owner: &Owner,
        desired: &[Desired],
        indices: impl Iterator<Item = usize>,
        metadata_only: bool,
    ) -> HashMap<usize, Value> {
        let mut by_kind: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for i in indices {
            let kind = &desired[i].kind.resource;
            by_kind
                .entry(format!("{}/{}", kind.api_version, kind.plural))
                .or_default()
                .push(i);
        }
        let selector = format!(
            "{}={},{}={}",
            keys::NAME_LABEL,
            owner.name,
            keys::NAMESPACE_LABEL,
            owner.namespace
        );
        let lists = stream::iter(by_kind.into_values())
            .map(|indices| {
                let selector = &selector;
                async move {
                    let first = &desired[indices[0]];
                    let namespaces: HashSet<&str> = indices
                        .iter()
                        .map(|i| desired[*i].object.namespace.as_str())
                        .collect();
                    let ns = if namespaces.len() == 1 {
                        first.object.namespace.as_str()
                    } else {
                        ""
                    };
                    let url = api_url(&first.kind, ns);
                    (
                        indices,
                        list_objects(self.client(), &url, selector, metadata_only, &first.kind.resource)
                            .await,
                    )
                }
            })
            .buffer_unordered(self.options.concurrency.max(1))
            .collect::<Vec<_>>()
            .await;
        let mut out = HashMap::new();
        for (indices, listed) in lists {
            let Ok(mut listed) = listed else { continue };
            for i in indices {
                let d = &desired[i];
                if let Some(obj) = listed.remove(&(d.object.namespace.clone(), d.object.name.clone())) {
                    out.insert(i, obj);
                }
            }
        }
        out
    }

    /// Objects whose fingerprints match the last run, from one metadata LIST per kind.
    async fn fast_path(
        &self,
        owner: &Owner,
        desired: &[Desired],
        previous: &HashMap<String, ObjectPrint>,
    ) -> Vec<(usize, (Action, Option<String>))> {
        let candidates = (0..desired.len()).filter(|i| {
            previous
                .get(&desired[*i].object.id())
                .is_some_and(|p| p.desired == desired[*i].print)
        });
        let listed = self.list_owned(owner, desired, candidates, true).await;
        let mut out = Vec::new();
        for (i, obj) in listed {
            let live = Some(live_print(&obj["metadata"]));
            let prev = &previous[&desired[i].object.id()];
            if live == prev.live {
                out.push((i, (prev.action, live)));
            }
        }
        out
    }

    /// Reads the live object (unless `prefetched` from a list), then decides by dry-run.
    async fn plan(
        &self,
        d: &Desired,
        req: &ApplyRequest<'_>,
        ignore: &IgnoreRules,
        batch: &Batch,
        prefetched: Option<Value>,
    ) -> Result<Plan, ObjectError> {
        let subject = d.subject();
        let secrets_of = |live: Option<&Value>| -> Vec<Value> {
            std::iter::once(d.obj.clone()).chain(live.cloned()).collect()
        };
        let err = |kind: FailureKind, message: String, live: Option<&Value>| {
            let objs = secrets_of(live);
            let refs: Vec<&Value> = objs.iter().collect();
            ObjectError {
                subject: subject.clone(),
                kind,
                message: redact(&message, &refs),
            }
        };
        let url = api_url(&d.kind, &d.object.namespace);
        let client = self.client();
        let mut live = match prefetched {
            Some(live) => Some(live),
            None => match get(client, &url, &d.object.name).await {
                Ok(live) => live,
                Err(e) => return Err(err(transport_kind(&e), api_message("query failed", &e), None)),
            },
        };
        if excluded(&d.obj) || live.as_ref().is_some_and(excluded) {
            return Ok(Plan::Skip { live });
        }
        if ssa_policy(&d.obj) == SsaPolicy::IfNotPresent && live.is_some() {
            return Ok(Plan::Skip { live });
        }
        if let Some(current) = &live {
            self.check_ownership(d, current, &req.owner)
                .await
                .map_err(|m| err(FailureKind::Conflict, m, None))?;
        }
        // both patches mark the object for apply, as in Flux
        let mut patched = false;
        if self.options.migrate_api_version
            && let Some(patch) = live
                .as_ref()
                .and_then(|l| migrate_api_version_patch(l, &d.api_version))
        {
            let what = "metadata.managedFields apiVersion migration failed";
            live = Some(
                json_patch(client, &url, &d.object.name, &patch)
                    .await
                    .map_err(|e| err(FailureKind::Api, api_message(what, &e), live.as_ref()))?,
            );
            patched = true;
        }
        if let Some(patch) = live
            .as_ref()
            .and_then(|l| cleanup_patch(l, &d.obj, &self.options.override_managers))
        {
            let what = "metadata.managedFields cleanup failed";
            live = Some(
                json_patch(client, &url, &d.object.name, &patch)
                    .await
                    .map_err(|e| err(FailureKind::Api, api_message(what, &e), live.as_ref()))?,
            );
            patched = true;
        }
        self.dry_run_and_compare(d, req, ignore, batch, live.take(), patched)
            .await
            .map_err(|e| redact_error(e, &secrets_of(None)))
    }

    /// Plans deferred objects again, reading their live state afresh.
    async fn replan(
        &self,
        desired: &[Desired],
        deferred: Vec<(usize, ObjectError)>,
        req: &ApplyRequest<'_>,
        ignore: &IgnoreRules,
        batch: &Batch,
    ) -> Vec<(usize, Result<Plan, ObjectError>)> {
        stream::iter(deferred)
            .map(|(i, _)| async move { (i, self.plan(&desired[i], req, ignore, batch, None).await) })
            .buffered(self.options.concurrency.max(1))
            .collect()
            .await
    }

    async fn dry_run_and_compare(
        &self,
        d: &Desired,
        req: &ApplyRequest<'_>,
        ignore: &IgnoreRules,
        batch: &Batch,
        live: Option<Value>,
        patched: bool,
    ) -> Result<Plan, ObjectError> {
        let subject = d.subject();
        let err = |kind, message: String| ObjectError {
            subject: subject.clone(),
            kind,
            message,
        };
        let url = api_url(&d.kind, &d.object.namespace);
        let dry = match server_side_apply(self.client(), &url, &d.object.name, &d.obj, true).await {
            Ok(dry) => dry,
            Err(e) => {
                let Some(status) = status_of(&e) else {
                    return Err(err(FailureKind::Api, api_message("dry-run failed", &e)));
                };
                if missing_dependency(status, d, batch) {
                    return Ok(Plan::Deferred(err(
                        FailureKind::MissingDependency,
                        api_message("dry-run failed", &e),
                    )));
                }
                if let (Some(field), Some(live)) = (immutable_field(status), live.as_ref()) {
                    let forced = req.force || force_enabled(&d.obj) || force_enabled(live);
                    if !forced {
                        return Err(err(
                            FailureKind::Immutable,
                            format!(
                                "immutable field detected ({field}): {}; set spec.force or the annotation {}: enabled to recreate it",
                                status.message,
                                keys::FORCE_ANNOTATION
                            ),
                        ));
                    }
                    // recreate only when the new object is valid: a dry-run create that fails
                    // only because the name is taken
                    return match dry_run_create(self.client(), &url, &d.obj).await {
                        Err(e)
                            if status_of(&e)
                                .is_some_and(|s| s.code == 409 && s.reason == "AlreadyExists") =>
                        {
                            Ok(Plan::Recreate)
                        }
                        Err(e) => Err(err(transport_kind(&e), api_message("dry-run failed", &e))),
                        Ok(_) => Ok(Plan::Recreate),
                    };
                }
                // a namespace or ServiceAccount nobody in this apply creates may still come from
                // elsewhere (another Kustomization): worth a retry, not a fix of the manifest
                let kind = if namespace_missing(status) || missing_service_account(status).is_some() {
                    FailureKind::MissingDependency
                } else {
                    transport_kind(&e)
                };
                return Err(err(kind, api_message("dry-run failed", &e)));
            }
        };
        let ignored = ignore.paths_for(&dry);
        let mut live = live;
        // The dry-run merges into the stored object; when that moved since our read (another
        // controller wrote it, or our read came from an earlier LIST), compare with a fresh read
        // so that someone else's concurrent change is not mistaken for our drift.
        let rv = |o: &Value| o.pointer("/metadata/resourceVersion").cloned();
        if let Some(stale) = live
            .as_ref()
            .filter(|l| !patched && rv(&dry).is_some() && rv(l) != rv(&dry))
        {
            let fresh = get(self.client(), &url, &d.object.name)
                .await
                .map_err(|e| err(transport_kind(&e), api_message("query failed", &e)))?;
            live = fresh.or_else(|| Some(stale.clone()));
        }
        if let Some(current) = live
            .as_ref()
            .filter(|l| !patched && !has_drifted(Some(l), &dry, &ignored))
        {
            return Ok(Plan::Unchanged {
                live: current.clone(),
            });
        }
        Ok(Plan::Apply { live, ignored })
    }

    /// An object labelled for another Kustomization is a conflict while that Kustomization still
    /// lists it in its inventory; otherwise it is taken over (e.g. moved between Kustomizations).
    async fn check_ownership(&self, d: &Desired, live: &Value, owner: &Owner) -> Result<(), String> {
        let label = |k: &str| {
            live.pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let (name, namespace) = (label(keys::NAME_LABEL), label(keys::NAMESPACE_LABEL));
        if name.is_empty() || (name == owner.name && namespace == owner.namespace) {
            return Ok(());
        }
        let ks = ApiResource {
            group: "kustomize.toolkit.fluxcd.io".into(),
            version: "v1".into(),
            api_version: "kustomize.toolkit.fluxcd.io/v1".into(),
            kind: "Kustomization".into(),
            plural: "kustomizations".into(),
        };
        let url = DynamicObject::url_path(&ks, Some(namespace));
        let other = match get(self.client(), &url, name).await {
            Ok(Some(other)) => other,
            Ok(None) => return Ok(()),
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(api_message("ownership check failed", &e)),
        };
        let id = d.object.id();
        let listed = other
            .pointer("/status/inventory/entries")
            .and_then(Value::as_array)
            .is_some_and(|entries| {
                entries
                    .iter()
                    .any(|e| e.get("id").and_then(Value::as_str) == Some(id.as_str()))
            });
        if listed && other.pointer("/metadata/deletionTimestamp").is_none() {
            return Err(format!(
                "is already managed by Kustomization {namespace}/{name}: the object is in both Kustomizations; \
                 remove it from one of them"
            ));
        }
        Ok(())
    }

    async fn execute_all(
        &self,
        desired: &[Desired],
        plans: Vec<(usize, Plan)>,
        req: &ApplyRequest<'_>,
    ) -> Vec<(usize, Result<(Action, Option<String>), ObjectError>)> {
        stream::iter(plans)
            .map(|(i, plan)| async move { (i, self.execute(&desired[i], plan, req).await) })
            .buffered(self.options.concurrency.max(1))
            .collect()
            .await
    }

    /// Applies one planned object; returns its action and the live print after the write.
    async fn execute(
        &self,
        d: &Desired,
        plan: Plan,
        _req: &ApplyRequest<'_>,
    ) -> Result<(Action, Option<String>), ObjectError> {
        let subject = d.subject();
        let err = |kind, message: String| ObjectError {
            subject: subject.clone(),
            kind,
            message: redact(&message, &[&d.obj]),
        };
        let url = api_url(&d.kind, &d.object.namespace);
        let client = self.client();
        let (payload, action) = match plan {
            Plan::Apply {
                live: Some(live),
                ignored,
            } => (payload_with_ignored(&d.obj, &live, &ignored), Action::Configured),
            Plan::Apply { live: None, .. } => (d.obj.clone(), Action::Created),
            Plan::Recreate => {
                self.delete_and_wait(&url, &d.object.name)
                    .await
                    .map_err(|m| err(FailureKind::Api, format!("immutable field detected, {m}")))?;
                (d.obj.clone(), Action::Created)
            }
            Plan::Skip { .. } | Plan::Unchanged { .. } | Plan::Deferred(_) => {
                unreachable!("only writes are executed")
            }
        };
        let applied = server_side_apply(client, &url, &d.object.name, &payload, false)
            .await
            .map_err(|e| err(transport_kind(&e), api_message("apply failed", &e)))?;
        Ok((action, Some(live_print(&applied["metadata"]))))
    }

    async fn delete_and_wait(&self, url: &str, name: &str) -> Result<(), String> {
        match delete(self.client(), url, name, &DeleteParams::background()).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(api_message("failed to delete object", &e)),
        }
        let deadline = Instant::now() + self.options.wait_timeout;
        loop {
            match get(self.client(), url, name).await {
                Ok(None) => return Ok(()),
                Ok(Some(_)) if Instant::now() < deadline => {
                    tokio::time::sleep(self.options.retry_interval / 4).await
                }
                Ok(Some(_)) => {
                    return Err(format!(
                        "failed to wait for object to be deleted: still present after {:?}",
                        self.options.wait_timeout
                    ));
                }
                Err(e) => return Err(api_message("failed to wait for object to be deleted", &e)),
            }
        }
    }

    /// Waits until every object written in a waited-for stage is kstatus Current: CRDs
    /// Established, namespaces not terminating, a *Class accepted by its controller where it
    /// reports a status (Flux: 2 s interval, 60 s timeout). Objects still not Current are
    /// reported with their status.
    async fn wait_until_current(&self, objects: &[&Desired]) -> Result<(), Vec<ObjectError>> {
        let deadline = Instant::now() + self.options.wait_timeout;
        loop {
            let mut pending = Vec::new();
            for d in objects {
                let url = api_url(&d.kind, &d.object.namespace);
                let status = match get(self.client(), &url, &d.object.name).await {
                    Ok(Some(live)) => kstatus::compute(&live),
                    Ok(None) => ObjectStatus::new(kstatus::Status::NotFound, "not found"),
                    Err(e) => ObjectStatus::new(kstatus::Status::Unknown, api_message("query failed", &e)),
                };
                if status.status != kstatus::Status::Current {
                    pending.push((d, status));
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(pending
                    .into_iter()
                    .map(|(d, status)| ObjectError {
                        subject: d.subject(),
                        kind: FailureKind::Api,
                        message: format!(
                            "not ready after {:?} (applied in an earlier stage, waited for before the next): {}: {}",
                            self.options.wait_timeout, status.status, status.message
                        ),
                    })
                    .collect());
            }
            tokio::time::sleep(self.options.retry_interval).await;
        }
    }
}

/// `spec.ignore` compiled once for an apply or a diff: a bad rule fails it before anything is
/// read or written, reported against the Kustomization.
fn compile_ignore(req: &ApplyRequest<'_>) -> Result<IgnoreRules, ApplyError> {
    IgnoreRules::compile(req.ignore).map_err(|e| ApplyError {
        errors: vec![ObjectError {
            subject: format!("Kustomization/{}", req.owner.key()),
            kind: FailureKind::Invalid,
            message: e.to_string(),
        }],
        changes: ChangeSet::default(),
    })
}

fn redact_error(mut e: ObjectError, objects: &[Value]) -> ObjectError {
    let refs: Vec<&Value> = objects.iter().collect();
    e.message = redact(&e.message, &refs);
    e
}

/// Ignored paths of an object that is applied anyway: a field another Apply manager owns is
/// left to it (stripped); otherwise the live value is kept (adopted). Creates are unmodified.
fn payload_with_ignored(desired: &Value, live: &Value, ignored: &[String]) -> Value {
    let mut payload = desired.clone();
    let mut stripped = Vec::new();
    for path in ignored {
        let (want, have) = (desired.pointer(path), live.pointer(path));
        if want == have {
            continue;
        }
        if owned_by_other_applier(live, path) || have.is_none() {
            stripped.push(path.clone());
        } else if let (Some(slot), Some(have)) = (payload.pointer_mut(path), have) {
            *slot = have.clone();
        }
    }
    // after the adoptions, which name elements by their index in `desired`
    remove_pointers(&mut payload, &stripped);
    payload
}

/// `group/Kind` of every kind served by a CRD in the apply.
fn pending_kinds(desired: &[Desired]) -> HashSet<String> {
    desired
        .iter()
        .filter(|d| d.object.kind == "CustomResourceDefinition")
        .filter_map(|d| {
            let group = d.obj.pointer("/spec/group")?.as_str()?;
            let kind = d.obj.pointer("/spec/names/kind")?.as_str()?;
            Some(format!("{group}/{kind}"))
        })
        .collect()
}

/// The kind as served by a CRD of this apply, for custom resources applied with their CRD.
fn crd_serving(crds: &[&Value], api_version: &str, kind: &str) -> Option<ResolvedKind> {
    let (group, version) = api_version.split_once('/')?;
    crds.iter().find_map(|crd| {
        let spec = crd.get("spec")?;
        let served = spec
            .get("versions")?
            .as_array()?
            .iter()
            .any(|v| v["name"] == version && v["served"] != false);
        (spec["group"] == group && spec.pointer("/names/kind")?.as_str() == Some(kind) && served).then(|| {
            ResolvedKind {
                resource: ApiResource {
                    group: group.into(),
                    version: version.into(),
                    api_version: api_version.into(),
                    kind: kind.into(),
                    plural: spec
                        .pointer("/names/plural")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                },
                namespaced: spec["scope"] != "Cluster",
            }
        })
    })
}

pub(super) async fn get(client: &Client, url: &str, name: &str) -> Result<Option<Value>, kube::Error> {
    let req = Request::new(url)
        .get(name, &Default::default())
        .map_err(kube::Error::BuildRequest)?;
    match client.request::<Value>(req).await {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

async fn server_side_apply(
    client: &Client,
    url: &str,
    name: &str,
    body: &Value,
    dry_run: bool,
) -> Result<Value, kube::Error> {
    let mut params = PatchParams::apply(keys::APPLY_FIELD_MANAGER).force();
    if dry_run {
        params = params.dry_run();
    }
    let req = Request::new(url)
        .patch(name, &params, &Patch::Apply(body))
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Value>(req).await
}

async fn dry_run_create(client: &Client, url: &str, body: &Value) -> Result<Value, kube::Error> {
    let params = PostParams {
        dry_run: true,
        field_manager: Some(keys::APPLY_FIELD_MANAGER.into()),
    };
    let data = serde_json::to_vec(body).map_err(kube::Error::SerdeError)?;
    let req = Request::new(url)
        .create(&params, data)
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Value>(req).await
}

async fn json_patch(client: &Client, url: &str, name: &str, patch: &Value) -> Result<Value, kube::Error> {
    let patch: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(kube::Error::SerdeError)?;
    let params = PatchParams {
        field_manager: Some(keys::APPLY_FIELD_MANAGER.into()),
        ..Default::default()
    };
    let req = Request::new(url)
        .patch(name, &params, &Patch::<()>::Json(patch))
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Value>(req).await
}

pub(super) async fn delete(
    client: &Client,
    url: &str,
    name: &str,
    params: &DeleteParams,
) -> Result<(), kube::Error> {
    let req = Request::new(url)
        .delete(name, params)
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Value>(req).await.map(|_| ())
}

/// Live objects (or their metadata only) by (namespace, name), from one LIST. List items carry
/// no `apiVersion`/`kind`; they are filled in so items compare like single reads.
async fn list_objects(
    client: &Client,
    url: &str,
    selector: &str,
    metadata_only: bool,
    resource: &ApiResource,
) -> Result<HashMap<(String, String), Value>, kube::Error> {
    let params = ListParams::default().labels(selector);
    let req = if metadata_only {
        Request::new(url).list_metadata(&params)
    } else {
        Request::new(url).list(&params)
    };
    let list = client
        .request::<Value>(req.map_err(kube::Error::BuildRequest)?)
        .await?;
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Ok(items
        .into_iter()
        .filter_map(|mut item| {
            let meta = item.get("metadata")?;
            let ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let name = meta.get("name")?.as_str()?.to_string();
            let map = item.as_object_mut()?;
            map.insert("apiVersion".into(), resource.api_version.clone().into());
            map.insert("kind".into(), resource.kind.clone().into());
            Some(((ns, name), item))
        })
        .collect())
}

/// The outcome of a plan that writes nothing (skipped or unchanged), or None when it must
/// be executed.
fn settled(plan: &Plan) -> Option<(Action, Option<String>)> {
    match plan {
        Plan::Skip { live } => Some((Action::Skipped, live.as_ref().map(|l| live_print(&l["metadata"])))),
        Plan::Unchanged { live } => Some((Action::Unchanged, Some(live_print(&live["metadata"])))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use kube::core::response::{StatusCause, StatusDetails};
    use serde_json::json;

    fn status(code: u16, reason: &str, message: &str, causes: Vec<StatusCause>) -> Status {
        let mut s = Status::failure(message, reason).with_code(code);
        s.details = Some(StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        });
        s
    }

    // Message shapes from the API server (apimachinery field.Forbidden / ValidateImmutableField).
    #[test]
    fn only_errors_that_say_immutable_are_immutable() {
        let cause = StatusCause {
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: ...: field is immutable".into(),
            field: "spec.selector".into(),
        };
        let s = status(
            422,
            "Invalid",
            "Deployment.apps \"web\" is invalid: spec.selector: Invalid value: ...: field is immutable",
            vec![cause],
        );
        assert_eq!(immutable_field(&s).as_deref(), Some("spec.selector"));
        let s = status(
            422,
            "Invalid",
            "Job.batch \"j\" is invalid: spec.template: Invalid value: ...: field is immutable",
            vec![],
        );
        assert_eq!(immutable_field(&s).as_deref(), Some("spec.template"));
        let s = status(
            422,
            "Invalid",
            "ConfigMap \"c\" is invalid: metadata.name: Invalid value: \"A\": a lowercase RFC 1123 subdomain",
            vec![],
        );
        assert_eq!(immutable_field(&s), None);
        let s = status(409, "Conflict", "Apply failed with 1 conflict", vec![]);
        assert_eq!(immutable_field(&s), None);
    }

    fn desired(api_version: &str, kind: &str, ns: &str) -> Desired {
        let resolved = ResolvedKind {
            resource: ApiResource {
                group: group_of(api_version).into(),
                version: "v1".into(),
                api_version: api_version.into(),
                kind: kind.into(),
                plural: format!("{}s", kind.to_lowercase()),
            },
            namespaced: true,
        };
        Desired {
            obj: json!({}),
            object: ObjectRef::new(group_of(api_version), kind, ns, "x"),
            api_version: api_version.into(),
            kind: resolved,
            stage: Stage::Rest,
            print: String::new(),
        }
    }

    // Status shapes the API server returns (checked against kube-apiserver 1.35 in the
    // integration tests for the namespace, CRD and webhook cases).
    #[test]
    fn dependency_failures_are_deferred_only_when_this_apply_provides_the_dependency() {
        let batch = Batch {
            namespaces: ["apps".to_string()].into(),
            pending_kinds: ["example.com/Widget".to_string()].into(),
            service_accounts: ["x/builder".to_string()].into(),
        };
        let mut ns_missing = status(404, "NotFound", "namespaces \"apps\" not found", vec![]);
        ns_missing.details.as_mut().unwrap().kind = "namespaces".into();
        assert!(missing_dependency(
            &ns_missing,
            &desired("v1", "ConfigMap", "apps"),
            &batch
        ));
        assert!(!missing_dependency(
            &ns_missing,
            &desired("v1", "ConfigMap", "other"),
            &batch
        ));
        assert!(namespace_missing(&ns_missing));
        let no_kind = status(
            404,
            "NotFound",
            "the server could not find the requested resource",
            vec![],
        );
        assert!(missing_dependency(
            &no_kind,
            &desired("example.com/v1", "Widget", "apps"),
            &batch
        ));
        assert!(!missing_dependency(
            &no_kind,
            &desired("example.com/v1", "Gadget", "apps"),
            &batch
        ));
        let webhook = status(
            500,
            "InternalError",
            "Internal error occurred: failed calling webhook \"guard\": no endpoints",
            vec![],
        );
        assert!(missing_dependency(
            &webhook,
            &desired("v1", "ConfigMap", "x"),
            &batch
        ));
        // the ServiceAccount admission plugin's message, as kube-apiserver 1.35 returns it
        let sa_missing = |sa: &str| {
            let (ns, name) = sa.split_once('/').unwrap();
            status(
                403,
                "Forbidden",
                &format!(
                    "pods \"p\" is forbidden: error looking up service account {ns}/{name}: serviceaccount \"{name}\" not found"
                ),
                vec![],
            )
        };
        assert_eq!(
            missing_service_account(&sa_missing("x/builder")),
            Some("x/builder")
        );
        assert!(missing_dependency(
            &sa_missing("x/builder"),
            &desired("v1", "Pod", "x"),
            &batch
        ));
        // the serviceaccount-controller creates `default` in every namespace
        assert!(missing_dependency(
            &sa_missing("y/default"),
            &desired("v1", "Pod", "y"),
            &batch
        ));
        // a ServiceAccount this apply does not create fails now, as a missing dependency
        assert!(!missing_dependency(
            &sa_missing("x/other"),
            &desired("v1", "Pod", "x"),
            &batch
        ));
        assert!(!missing_dependency(
            &sa_missing("z/builder"),
            &desired("v1", "Pod", "z"),
            &batch
        ));
        let rbac_forbidden = status(
            403,
            "Forbidden",
            "pods \"p\" is forbidden: User \"u\" cannot patch resource \"pods\" in API group \"\" in the namespace \"x\"",
            vec![],
        );
        assert_eq!(missing_service_account(&rbac_forbidden), None);
        let invalid = status(
            422,
            "Invalid",
            "ConfigMap \"x\" is invalid: data: Invalid value",
            vec![],
        );
        assert!(!missing_dependency(
            &invalid,
            &desired("v1", "ConfigMap", "apps"),
            &batch
        ));
    }

    #[test]
    fn ignored_fields_are_stripped_when_another_applier_owns_them_else_adopted() {
        let desired = json!({"spec": {"replicas": 1, "paused": false}});
        let live = json!({"metadata": {"managedFields": [
            {"manager": "hpa", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {"replicas": 5, "paused": true}});
        let payload =
            payload_with_ignored(&desired, &live, &["/spec/replicas".into(), "/spec/paused".into()]);
        assert_eq!(payload, json!({"spec": {"paused": true}}));
    }

    #[test]
    fn custom_resources_resolve_from_a_crd_in_the_same_apply() {
        let crd = json!({"kind": "CustomResourceDefinition", "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"}, "versions": [{"name": "v1", "served": true}]}});
        let resolved = crd_serving(&[&crd], "example.com/v1", "Widget").unwrap();
        assert_eq!(resolved.resource.plural, "widgets");
        assert!(resolved.namespaced);
        assert!(crd_serving(&[&crd], "example.com/v2", "Widget").is_none());
        assert!(crd_serving(&[&crd], "example.com/v1", "Gadget").is_none());
    }
}
