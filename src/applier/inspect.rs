//! The one per-object planner apply and preview share: prepare the desired objects, read the
//! live one, skip what is excluded or `IfNotPresent`, refuse what another Kustomization still
//! lists, clean up managed fields, dry-run, compare.
//!
//! The managed-fields cleanup and the apiVersion migration are patches of the live object that
//! mark it for apply. An apply sends them; a preview ([`Mode::Preview`]) does not, and reaches the
//! same plan (a write) all the same, so the two cannot disagree.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::{StreamExt, stream};
use kube::Resource;
use kustomize::gvk::split_api_version;
use serde_json::Value;

use super::diff::{IgnoreRules, has_drifted};
use super::fingerprint::{ObjectPrint, desired_print, live_print};
use super::handover::{self, Claim};
use super::http::{
    api_message, api_url, dry_run_create, get, json_patch, list_objects, server_side_apply, status_of,
};
use super::managed::{cleanup_patch, migrate_api_version_patch};
use super::masking::redact;
use super::normalize::normalize;
use super::plan::{
    Batch, Desired, DryRunFailure, Known, Outcome, Plan, Write, answers_stored, classify_dry_run,
    crd_serving, list_refused, proves_absent, transport_kind,
};
use super::policy::{SsaPolicy, excluded, force_enabled, ssa_policy};
use super::stage::{order_key, stage_of};
use super::{Action, Applier, ApplyRequest, FailureKind, ObjectError, Owner};
use crate::api::Kustomization;
use crate::api::conditions::keys;
use crate::api::inventory::ObjectRef;
use crate::kube_ext::ResolveError;

/// Whether planning may write the live object's managed fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Send the managed-fields patches (an apply).
    Apply,
    /// Send nothing, plan as if they had been sent (the `diff` command).
    Preview,
}

/// Everything one apply or preview plans with: the desired objects in apply order and the
/// settings of the request.
pub(super) struct Planning<'r> {
    pub(super) desired: Vec<Desired>,
    pub(super) owner: &'r Owner,
    /// The source revision being applied.
    revision: &'r str,
    force: bool,
    ignore: IgnoreRules,
    batch: Batch,
    mode: Mode,
}

/// A managed-fields patch the planner may send: what its failure is called and how it is
/// computed from the live object.
type ManagedFieldsPatch = (&'static str, fn(&Applier, &Desired, &Value) -> Option<Value>);

/// Before the dry-run, as Flux: the API versions of stale managers are migrated, or the dry-run
/// fails on fields their old version does not declare.
const BEFORE_DRY_RUN: ManagedFieldsPatch = (
    "metadata.managedFields apiVersion migration failed",
    |applier, d, live| {
        applier
            .options
            .migrate_api_version
            .then(|| migrate_api_version_patch(live, &d.api_version))
            .flatten()
    },
);

/// After a dry-run that passed, as Flux (ssa's cleanupMetadata): an invalid object leaves the
/// live one untouched, its annotations and field managers included.
const AFTER_DRY_RUN: ManagedFieldsPatch = ("metadata.managedFields cleanup failed", |applier, d, live| {
    cleanup_patch(live, &d.obj, &applier.options.override_managers)
});

impl Applier {
    /// Compiles `spec.ignore`, then resolves and normalizes every object, in apply order; all
    /// errors at once, nothing sent.
    pub(super) async fn prepare<'r>(
        &self,
        req: &'r ApplyRequest<'_>,
        mode: Mode,
    ) -> Result<Planning<'r>, Vec<ObjectError>> {
        // a bad rule fails before anything is read or written, reported against the Kustomization
        let ignore = IgnoreRules::compile(req.ignore).map_err(|e| {
            vec![ObjectError {
                subject: format!("Kustomization/{}", req.owner.key()),
                kind: FailureKind::Invalid,
                message: e.to_string(),
            }]
        })?;
        let mut desired = self.desired(req).await?;
        desired.sort_by_key(|d| {
            let o = &d.object;
            (d.stage, order_key(&d.api_version, &o.kind, &o.namespace, &o.name))
        });
        Ok(Planning {
            batch: Batch::of(&desired),
            desired,
            owner: &req.owner,
            revision: req.revision,
            force: req.force,
            ignore,
            mode,
        })
    }

    async fn desired(&self, req: &ApplyRequest<'_>) -> Result<Vec<Desired>, Vec<ObjectError>> {
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
            let provisional = ObjectRef::of(obj);
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
                Err(e) => match (e, crd_serving(&crds, &api_version, &kind)) {
                    (ResolveError::UnknownKind { .. }, Some(served)) => served,
                    (e @ ResolveError::Discovery { .. }, _) => {
                        errors.push(fail(FailureKind::Api, e.to_string()));
                        continue;
                    }
                    (e, _) => {
                        errors.push(fail(FailureKind::Invalid, format!("dry-run failed: {e}")));
                        continue;
                    }
                },
            };
            let mut normalized = obj.clone();
            let subject = provisional.to_string();
            if let Err(e) = normalize(&mut normalized, &req.owner, resolved.namespaced, &subject) {
                let message = e
                    .to_string()
                    .strip_prefix(&format!("{subject} "))
                    .unwrap_or_default()
                    .to_string();
                errors.push(fail(FailureKind::Invalid, message));
                continue;
            }
            let namespace = if resolved.namespaced {
                namespace
            } else {
                String::new()
            };
            let object = ObjectRef::new(split_api_version(&api_version).0, &kind, &namespace, &name);
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

    /// Plans the objects at these indices concurrently, each from what is known of it.
    pub(super) async fn plan_all(
        &self,
        p: &Planning<'_>,
        items: Vec<(usize, Known)>,
    ) -> Vec<(usize, Result<Plan, ObjectError>)> {
        stream::iter(items)
            .map(|(i, known)| async move { (i, self.plan(p, &p.desired[i], known).await) })
            .buffered(self.options.concurrency.max(1))
            .collect()
            .await
    }

    /// Reads the live object unless it is known, then decides by dry-run.
    async fn plan(&self, p: &Planning<'_>, d: &Desired, known: Known) -> Result<Plan, ObjectError> {
        let fail = |kind: FailureKind, message: String, live: Option<&Value>| {
            let secrets: Vec<&Value> = std::iter::once(&d.obj).chain(live).collect();
            ObjectError {
                subject: d.subject(),
                kind,
                message: redact(&message, &secrets),
            }
        };
        let url = api_url(&d.kind, &d.object.namespace);
        let (read, dry_run) = match known {
            Known::Read(live) => (Ok(Some(live)), None),
            Known::Unlisted => match self.plan_as_create(p, d, &url).await {
                Ok(plan) => return plan.map_err(|(kind, message)| fail(kind, message, None)),
                Err(dry_run) => (self.read(d, &url).await, dry_run),
            },
            Known::Unread => (self.read(d, &url).await, None),
        };
        let mut live = match read {
            Ok(live) => live,
            // Not allowed to read it (an impersonated account without `get`): as Flux, whose
            // read only informs the dry-run, the dry-run's refusal is the error, since it names
            // the write that was denied. Only a failing apply sends it.
            Err(e) if status_of(&e).is_some_and(|s| s.code == 403) => {
                let answer = match dry_run {
                    Some(refused) => Err(refused),
                    None => server_side_apply(self.client(), &url, &d.object.name, &d.obj, true).await,
                };
                let message = api_message("query failed", &e);
                return match answer {
                    Err(refused) => self.decide(p, d, &url, None, false, Err(refused)).await,
                    // Allowed to write but not to read: nothing to compare with.
                    Ok(_) => Err((transport_kind(&e), message)),
                }
                .map_err(|(kind, message)| fail(kind, message, None));
            }
            Err(e) => return Err(fail(transport_kind(&e), api_message("query failed", &e), None)),
        };
        let if_not_present = ssa_policy(&d.obj) == SsaPolicy::IfNotPresent && live.is_some();
        if if_not_present || excluded(&d.obj) || live.as_ref().is_some_and(excluded) {
            return Ok(Plan::Settled(Outcome::settled(Action::Skipped, live.as_ref())));
        }
        if let Some(current) = &live {
            self.check_ownership(p, d, current)
                .await
                .map_err(|m| fail(FailureKind::Conflict, m, None))?;
        }
        // either patch marks the object for apply, as in Flux
        let mut patched = self
            .patch_managed_fields(p, d, &url, &mut live, BEFORE_DRY_RUN)
            .await
            .map_err(|(kind, message)| fail(kind, message, live.as_ref()))?;
        let answer = server_side_apply(self.client(), &url, &d.object.name, &d.obj, true).await;
        if answer.is_ok() {
            patched |= self
                .patch_managed_fields(p, d, &url, &mut live, AFTER_DRY_RUN)
                .await
                .map_err(|(kind, message)| fail(kind, message, live.as_ref()))?;
        }
        self.decide(p, d, &url, live, patched, answer)
            .await
            .map_err(|(kind, message)| fail(kind, message, None))
    }

    /// Sends `patch` for the live object when it has one to send (in a preview, only says it
    /// would); the live object becomes what the API answered. Returns whether there was one.
    async fn patch_managed_fields(
        &self,
        p: &Planning<'_>,
        d: &Desired,
        url: &str,
        live: &mut Option<Value>,
        (what, patch_of): ManagedFieldsPatch,
    ) -> Result<bool, (FailureKind, String)> {
        let Some(patch) = live.as_ref().and_then(|l| patch_of(self, d, l)) else {
            return Ok(false);
        };
        if p.mode == Mode::Apply {
            let sent = json_patch(self.client(), url, &d.object.name, &patch)
                .await
                .map_err(|e| (FailureKind::Api, api_message(what, &e)))?;
            *live = Some(sent);
        }
        Ok(true)
    }

    /// The live object, or `None` when it does not exist.
    async fn read(&self, d: &Desired, url: &str) -> Result<Option<Value>, kube::Error> {
        get(self.client(), url, &d.object.name).await
    }

    /// The plan of an object no LIST showed, from its dry-run alone when the answer shows it
    /// does not exist (a create, or a failure that proves it absent). Otherwise it may exist
    /// after all (without our labels), so it is read and planned like any live object: the
    /// error is the dry-run's failure, if it failed.
    async fn plan_as_create(
        &self,
        p: &Planning<'_>,
        d: &Desired,
        url: &str,
    ) -> Result<Result<Plan, (FailureKind, String)>, Option<kube::Error>> {
        if excluded(&d.obj) {
            return Ok(Ok(Plan::Settled(Outcome::settled(Action::Skipped, None))));
        }
        let answer = server_side_apply(self.client(), url, &d.object.name, &d.obj, true).await;
        match answer {
            Ok(merged) if answers_stored(&merged) => Err(None),
            Err(e) if !proves_absent(&e) => Err(Some(e)),
            answer => Ok(self.decide(p, d, url, None, false, answer).await),
        }
    }

    /// What a dry-run's answer decides for the object whose live state is `live`; errors as
    /// (kind, message), not yet redacted.
    async fn decide(
        &self,
        p: &Planning<'_>,
        d: &Desired,
        url: &str,
        live: Option<Value>,
        patched: bool,
        answer: Result<Value, kube::Error>,
    ) -> Result<Plan, (FailureKind, String)> {
        let client = self.client();
        let merged = match answer {
            Ok(merged) => merged,
            Err(e) => {
                let message = api_message("dry-run failed", &e);
                return match classify_dry_run(&e, d, &p.batch, live.is_some()) {
                    DryRunFailure::Deferred => Ok(Plan::Deferred {
                        error: ObjectError {
                            subject: d.subject(),
                            kind: FailureKind::MissingDependency,
                            message: redact(&message, &[&d.obj]),
                        },
                        exists: live.is_some(),
                    }),
                    DryRunFailure::Failed(kind) => Err((kind, message)),
                    DryRunFailure::Immutable(field) => {
                        let forced =
                            p.force || force_enabled(&d.obj) || live.as_ref().is_some_and(force_enabled);
                        if !forced {
                            let status = status_of(&e).map(|s| s.message.as_str()).unwrap_or_default();
                            return Err((
                                FailureKind::Immutable,
                                format!(
                                    "immutable field detected ({field}): {status}; set spec.force or the annotation {}: enabled to recreate it",
                                    keys::FORCE_ANNOTATION
                                ),
                            ));
                        }
                        // recreate only when the new object is valid: a dry-run create that fails
                        // only because the name is taken
                        match dry_run_create(client, url, &d.obj).await {
                            Ok(_) => Ok(Plan::Write(Write::Recreate)),
                            Err(e)
                                if status_of(&e)
                                    .is_some_and(|s| s.code == 409 && s.reason == "AlreadyExists") =>
                            {
                                Ok(Plan::Write(Write::Recreate))
                            }
                            Err(e) => Err((transport_kind(&e), api_message("dry-run failed", &e))),
                        }
                    }
                };
            }
        };
        let ignored = p.ignore.paths_for(&merged);
        let mut live = live;
        // The dry-run merges into the stored object; when that moved since our read (another
        // controller wrote it, or our read came from an earlier LIST), compare with a fresh read
        // so that someone else's concurrent change is not mistaken for our drift.
        let rv = |o: &Value| o.pointer("/metadata/resourceVersion").cloned();
        if let Some(stale) = live
            .as_ref()
            .filter(|l| !patched && rv(&merged).is_some() && rv(l) != rv(&merged))
        {
            let fresh = get(client, url, &d.object.name)
                .await
                .map_err(|e| (transport_kind(&e), api_message("query failed", &e)))?;
            live = fresh.or_else(|| Some(stale.clone()));
        }
        if let Some(current) = live
            .as_ref()
            .filter(|l| !patched && !has_drifted(Some(l), &merged, &ignored))
        {
            return Ok(Plan::Settled(Outcome::settled(Action::Unchanged, Some(current))));
        }
        Ok(Plan::Write(Write::Apply {
            live,
            ignored,
            merged,
        }))
    }

    /// An object labelled for another Kustomization: taken over or a conflict, as
    /// [`handover::claim`] decides from both Kustomizations.
    async fn check_ownership(&self, p: &Planning<'_>, d: &Desired, live: &Value) -> Result<(), String> {
        let owner = p.owner;
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
        let read = |namespace: &str, name: &str| {
            let (url, name) = (Kustomization::url_path(&(), Some(namespace)), name.to_string());
            async move { get(self.client(), &url, &name).await }
        };
        let other = match read(namespace, name).await {
            Ok(Some(other)) => other,
            // no such Kustomization (or no such kind): nobody else claims it
            Ok(None) => return Ok(()),
            Err(e) => return Err(api_message("ownership check failed", &e)),
        };
        // Our own Kustomization tells whether both read one source; unreadable, it does not.
        let mine = read(&owner.namespace, &owner.name).await.ok().flatten();
        match handover::claim(live, &other, mine.as_ref(), owner, p.revision, &d.object.id()) {
            Claim::TakeOver => Ok(()),
            Claim::Conflict(message) => Err(message),
        }
    }

    /// Lists the live objects of `indices` that carry `owner`'s labels: one LIST per kind (per
    /// namespace when all its objects share one), metadata only or full objects; each listed
    /// object is [`Known::Read`], each missing one [`Known::Unlisted`]. A list the API server
    /// refused yields no entries for its objects, which then take the per-object path; any
    /// other failure fails the plan, named by the first object of the kind.
    pub(super) async fn list_owned(
        &self,
        p: &Planning<'_>,
        indices: impl Iterator<Item = usize>,
        metadata_only: bool,
    ) -> Result<HashMap<usize, Known>, Vec<ObjectError>> {
        let desired = &p.desired;
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
            p.owner.name,
            keys::NAMESPACE_LABEL,
            p.owner.namespace
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
                    let listed =
                        list_objects(self.client(), &url, selector, metadata_only, &first.kind.resource)
                            .await;
                    (indices, listed)
                }
            })
            .buffer_unordered(self.options.concurrency.max(1))
            .collect::<Vec<_>>()
            .await;
        let mut out = HashMap::new();
        let mut failures = Vec::new();
        for (indices, listed) in lists {
            let mut listed = match listed {
                Ok(listed) => listed,
                Err(e) if list_refused(&e) => continue,
                Err(e) => {
                    let first = &desired[indices[0]];
                    failures.push(ObjectError {
                        subject: first.subject(),
                        kind: transport_kind(&e),
                        message: api_message(&format!("list of {} failed", first.kind.resource.plural), &e),
                    });
                    continue;
                }
            };
            for i in indices {
                let d = &desired[i];
                let known = match listed.remove(&(d.object.namespace.clone(), d.object.name.clone())) {
                    Some(obj) => Known::Read(obj),
                    None => Known::Unlisted,
                };
                out.insert(i, known);
            }
        }
        if failures.is_empty() {
            Ok(out)
        } else {
            Err(failures)
        }
    }

    /// Objects whose fingerprints match the last run, from the kind's synced watch or one
    /// metadata LIST per kind.
    pub(super) async fn fast_path(
        &self,
        p: &Planning<'_>,
        previous: &HashMap<String, ObjectPrint>,
    ) -> Result<Vec<(usize, Outcome)>, Vec<ObjectError>> {
        let desired = &p.desired;
        let candidates = (0..desired.len()).filter(|i| {
            previous
                .get(&desired[*i].object.id())
                .is_some_and(|prev| prev.desired == desired[*i].print)
        });
        let (watched, unwatched) = self.watched_prints(p, candidates);
        let listed = self.list_owned(p, unwatched.into_iter(), true).await?;
        let listed = listed.into_iter().filter_map(|(i, known)| match known {
            Known::Read(obj) => Some((i, live_print(&obj["metadata"]))),
            Known::Unlisted | Known::Unread => None,
        });
        let mut out = Vec::new();
        for (i, live) in watched.into_iter().chain(listed) {
            let live = Some(live);
            let Some(prev) = previous.get(&desired[i].object.id()) else {
                continue;
            };
            if prev.holds(&desired[i].print, live.as_deref()) {
                out.push((
                    i,
                    Outcome {
                        action: prev.action,
                        live_print: live,
                    },
                ));
            }
        }
        Ok(out)
    }
}
