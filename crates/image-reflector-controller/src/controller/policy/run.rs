//! The ImagePolicy controller: its watches (policies, and repositories mapped to the policies
//! that reference them), its share of the context, and its error policy.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use flux_runtime::controller::{CancellationToken, run_until};
use flux_runtime::events::Notifier;
use flux_runtime::requeue::{Failures, after_error};
use flux_runtime::status_writes::{OwnWrites, object_key};
use flux_runtime::telemetry::RuntimeMetrics;
use flux_runtime::triggers::{own_objects, watch_config, watched};
use flux_runtime::watch_retry;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use super::reconcile::{PolicyError, Remembered, reconcile};
use super::repository::repository_key;
use crate::IMAGE_POLICY;
use crate::api::{ImagePolicy, ImageRepository};
use crate::controller::Context;

/// What the ImagePolicy controller keeps beside the shared context.
pub(crate) struct Policies {
    pub notifier: Notifier<ImagePolicy>,
    /// controller-runtime's metrics labelled `imagepolicy`.
    pub metrics: RuntimeMetrics,
    pub writes: OwnWrites<ImagePolicy>,
    pub(crate) failures: Failures,
    evaluations: Mutex<HashMap<String, Remembered>>,
}

impl Policies {
    pub(crate) fn new(notifier: Notifier<ImagePolicy>, metrics: RuntimeMetrics) -> Self {
        Self {
            notifier,
            metrics,
            writes: OwnWrites::new(IMAGE_POLICY.field_manager),
            failures: Failures::default(),
            evaluations: Mutex::default(),
        }
    }

    pub(crate) fn last(&self, key: &str) -> Option<super::due::LastEvaluation> {
        let evaluations = self.evaluations.lock().expect("evaluations lock");
        evaluations.get(key).map(Remembered::as_last)
    }

    pub(crate) fn remember(&self, key: &str, evaluation: Remembered) {
        let mut evaluations = self.evaluations.lock().expect("evaluations lock");
        evaluations.insert(key.to_string(), evaluation);
    }

    /// The policy is gone: nothing of it is kept.
    pub(crate) fn forget(&self, key: &str) {
        self.evaluations.lock().expect("evaluations lock").remove(key);
        self.failures.reset(key);
        self.writes.forget(key);
    }
}

/// A repository wakes its policies only with a new scan revision (Flux v1's predicate); its
/// other changes, a rescan that found the same tags among them, wake none.
fn revision_hash(repository: &ImageRepository) -> Option<u64> {
    let revision = repository
        .status
        .as_ref()
        .and_then(|s| s.last_scan_result.as_ref())
        .and_then(|r| r.revision.as_deref());
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    revision.hash(&mut hasher);
    Some(hasher.finish())
}

/// The policies, in any namespace, whose `imageRepositoryRef` names `repository`.
fn policies_of(policies: &Store<ImagePolicy>, repository: &ImageRepository) -> Vec<ObjectRef<ImagePolicy>> {
    let (namespace, name) = (repository.namespace().unwrap_or_default(), repository.name_any());
    policies
        .state()
        .iter()
        .filter(|policy| {
            let key = repository_key(
                &policy.namespace().unwrap_or_default(),
                &policy.spec.image_repository_ref,
            );
            key.namespace == namespace && key.name == name
        })
        .map(|policy| ObjectRef::from_obj(policy.as_ref()))
        .collect()
}

/// The ImagePolicy controller: every namespace or the runtime one, label-selected shards (the
/// selector applies to both kinds, as Flux's cache does).
pub(crate) async fn run_policies(ctx: Arc<Context>, shutdown: CancellationToken) {
    let runtime = &ctx.options.runtime;
    let seen = ctx.clone();
    let (reader, policies) = own_objects(&ctx.client, runtime, move |policy: &ImagePolicy| {
        seen.policies.writes.seen(&object_key(policy), policy)
    });
    let (repositories, repository_writer) = reflector::store();
    let repository_changes = watch_retry::with_backoff(watcher(
        watched::<ImageRepository>(&ctx.client, runtime),
        watch_config(runtime),
    ))
    .modify(|repository: &mut ImageRepository| repository.managed_fields_mut().clear())
    .reflect(repository_writer)
    .applied_objects()
    .predicate_filter(revision_hash, Default::default());
    let mapped = reader.clone();
    let controller = watch_retry::controller(policies, reader, runtime.concurrent)
        .watches_stream(repository_changes, move |repository| {
            policies_of(&mapped, &repository)
        });
    run_until(
        &IMAGE_POLICY,
        controller,
        shutdown,
        move |policy, ctx| reconcile(policy, ctx, repositories.clone()),
        error_policy,
        ctx,
    )
    .await;
}

/// An evaluation's error is never terminal: a policy that cannot be evaluated concludes with
/// its status, not an error. The rest back off exponentially.
fn error_policy(policy: Arc<ImagePolicy>, error: &PolicyError, ctx: Arc<Context>) -> Action {
    after_error(
        &IMAGE_POLICY,
        policy.as_ref(),
        error,
        false,
        &ctx.policies.failures,
        &ctx.policies.metrics,
        &ctx.options.runtime,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn repository(revision: Option<&str>) -> ImageRepository {
        let mut repo = json!({
            "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
            "metadata": {"name": "podinfo", "namespace": "flux-system", "generation": 1},
            "spec": {"image": "ghcr.io/a/b", "interval": "5m"},
        });
        if let Some(revision) = revision {
            repo["status"] = json!({"lastScanResult": {"revision": revision, "tagCount": 1}});
        }
        serde_json::from_value(repo).unwrap()
    }

    #[test]
    fn only_a_scan_revision_wakes_policies() {
        let mut unscanned = repository(None);
        let before = revision_hash(&unscanned);
        unscanned.metadata.generation = Some(2);
        assert_eq!(revision_hash(&unscanned), before);
        let scanned = repository(Some("sha256:aa"));
        let mut rescanned = scanned.clone();
        rescanned
            .status
            .as_mut()
            .unwrap()
            .last_scan_result
            .as_mut()
            .unwrap()
            .tag_count = 2;
        rescanned.metadata.generation = Some(2);
        assert_eq!(revision_hash(&scanned), revision_hash(&rescanned));
        assert_ne!(
            revision_hash(&scanned),
            revision_hash(&repository(Some("sha256:bb")))
        );
        assert_ne!(revision_hash(&scanned), before);
    }

    #[test]
    fn repositories_map_to_the_policies_that_name_them_in_any_namespace() {
        let (reader, mut writer) = reflector::store::<ImagePolicy>();
        let policy = |namespace: &str, name: &str, reference: serde_json::Value| -> ImagePolicy {
            serde_json::from_value(json!({
                "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"imageRepositoryRef": reference, "policy": {"alphabetical": {}}},
            }))
            .unwrap()
        };
        for p in [
            policy("flux-system", "same", json!({"name": "podinfo"})),
            policy(
                "apps",
                "cross",
                json!({"name": "podinfo", "namespace": "flux-system"}),
            ),
            policy("apps", "local", json!({"name": "podinfo"})),
            policy("flux-system", "other", json!({"name": "other"})),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(p));
        }
        let mut names: Vec<String> = policies_of(&reader, &repository(Some("x")))
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        names.sort();
        assert_eq!(names, ["apps/cross", "flux-system/same"]);
    }
}
