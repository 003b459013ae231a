//! The ImagePolicy driver: due? -> repository (ACL) -> checks -> tags -> select -> digest ->
//! status, each step's decision made by the pure modules beside this one; this file does the
//! reads and writes between them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flux_runtime::conditions::{READY, Stamp, find};
use flux_runtime::events::{EventSubject, Notice, Severity, annotations_of};
use flux_runtime::status_writes::{StatusWriteError, object_key};
use flux_runtime::telemetry::logs::reconcile_span;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event as FinalizerEvent;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use tracing::Instrument as _;

use super::PolicyFailure;
use super::due::{Due, LastEvaluation, Observed, due};
use super::repository::{
    RepositoryKey, check_access, check_cross_namespace, check_repository, needs_namespace_labels,
    repository_key,
};
use super::select::{DigestPlan, digest_failure, digest_plan, policy_of, select};
use super::status::{Evaluation, EventType, Requeue, compute, progress};
use crate::IMAGE_POLICY;
use crate::api::image_policy::{ImageRef, ReflectionPolicy};
use crate::api::{ImagePolicy, ImageRepository};
use crate::controller::finalizers::finalized;
use crate::controller::repository::auth::{AuthRefs, scan_auth};
use crate::controller::{Context, REQUESTED_AT_ANNOTATION};
use crate::registry::{ImageRef as RegistryImage, RegistryClient};
use crate::store::RepoKey;

/// Why a pass ended without its requeue: the driver backs off (or, terminal, waits).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The evaluation failed and the status says why; retried with backoff.
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Status(#[from] StatusWriteError),
    #[error(transparent)]
    Finalizer(Box<kube::runtime::finalizer::Error<PolicyError>>),
}

impl EventSubject for ImagePolicy {
    fn event_action(&self, _notice: &Notice) -> &'static str {
        "Reconcile"
    }
}

/// What the driver remembers of a policy's last evaluation (see `due`).
#[derive(Debug, Clone)]
pub(crate) struct Remembered {
    revision: Option<String>,
    requeue_after: Option<Duration>,
    ended: Instant,
}

/// One pass over an ImagePolicy, behind its finalizer.
pub(crate) async fn reconcile(
    policy: Arc<ImagePolicy>,
    ctx: Arc<Context>,
    repositories: Store<ImageRepository>,
) -> Result<Action, PolicyError> {
    let namespace = policy.namespace().unwrap_or_default();
    let span = reconcile_span(&IMAGE_POLICY, &namespace, &policy.name_any());
    let api: Api<ImagePolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    let key = object_key(policy.as_ref());
    let worker = ctx.policies.metrics.start();
    let labels = crate::controller::object_labels(&IMAGE_POLICY, &namespace, &policy.name_any());
    let began = Instant::now();
    let result = finalized(&api, policy, |event| async {
        match event {
            FinalizerEvent::Apply(policy) => apply(&policy, &ctx, &repositories).await,
            FinalizerEvent::Cleanup(policy) => {
                ctx.policies.forget(&object_key(policy.as_ref()));
                Ok(Action::await_change())
            }
        }
    })
    .instrument(span)
    .await
    .map_err(|e| PolicyError::Finalizer(Box::new(e)));
    ctx.metrics.record_reconcile(
        &labels,
        began.elapsed(),
        crate::controller::result_label(result.is_ok()),
    );
    worker.finish(match &result {
        Err(_) => flux_runtime::telemetry::Outcome::Error,
        Ok(_) => flux_runtime::telemetry::Outcome::Success,
    });
    if result.is_ok() {
        ctx.policies.failures.reset(&key);
    }
    result
}

async fn apply(
    policy: &ImagePolicy,
    ctx: &Context,
    repositories: &Store<ImageRepository>,
) -> Result<Action, PolicyError> {
    if policy.spec.suspend {
        tracing::info!("reconciliation is suspended for this object");
        return Ok(Action::await_change());
    }
    let key = object_key(policy);
    let old = ctx
        .policies
        .writes
        .ahead_of(&key, policy)
        .or_else(|| policy.status.clone())
        .unwrap_or_default();
    let namespace = policy.namespace().unwrap_or_default();
    let repo_key = repository_key(&namespace, &policy.spec.image_repository_ref);
    let repository = repositories.get(&ObjectRef::new(&repo_key.name).within(&repo_key.namespace));
    let revision = repository
        .as_ref()
        .and_then(|r| r.status.as_ref()?.last_scan_result.as_ref()?.revision.clone());
    let requested_at = policy
        .annotations()
        .get(REQUESTED_AT_ANNOTATION)
        .map(String::as_str);
    let generation = policy.metadata.generation.unwrap_or_default();
    let observed = Observed {
        generation,
        observed_generation: old.observed_generation,
        requested_at,
        last_handled_reconcile_at: old.last_handled_reconcile_at.as_deref(),
        revision: revision.as_deref(),
    };
    match due(&observed, ctx.policies.last(&key).as_ref()) {
        Due::Idle => return Ok(Action::await_change()),
        Due::After(after) => return Ok(Action::requeue(after)),
        Due::Now(why) => tracing::debug!(?why, "evaluating"),
    }

    let stamp = Stamp {
        generation,
        now: Timestamp::now(),
    };
    let outcome = if policy.spec.digest_reflection_policy() == ReflectionPolicy::Always
        && policy.spec.interval.is_none()
    {
        Err(PolicyFailure::IntervalNotConfigured)
    } else {
        if let Some(progressing) = progress(&old, &stamp) {
            ctx.policies
                .writes
                .write_status(&ctx.client, policy, &progressing)
                .await?;
        }
        evaluate(
            policy,
            ctx,
            &repo_key,
            repository.as_deref(),
            old.latest_ref.as_ref(),
        )
        .await
    };
    let evaluation = Evaluation {
        requested_at,
        interval: policy.spec.requeue_interval(),
        requeue_dependency: ctx.options.requeue_dependency,
        outcome,
    };
    let verdict = compute(&old, &evaluation, &stamp);
    let written = ctx
        .policies
        .writes
        .ahead_of(&key, policy)
        .or_else(|| policy.status.clone());
    if written.as_ref() != Some(&verdict.status) {
        ctx.policies
            .writes
            .write_status(&ctx.client, policy, &verdict.status)
            .await?;
    }
    if let Some(event) = &verdict.event {
        let severity = match event.type_ {
            EventType::Normal => Severity::Info,
            EventType::Warning => Severity::Error,
            EventType::Trace => Severity::Trace,
        };
        tracing::info!(reason = %event.reason, "{}", event.message);
        let notice = Notice::new(
            severity,
            &event.reason,
            event.message.clone(),
            annotations_of(policy),
        );
        ctx.policies.notifier.emit(policy, &notice);
    }
    let (requeue_after, result) = match verdict.requeue {
        Requeue::After(after) => (Some(after), Ok(Action::requeue(after))),
        Requeue::AwaitChange => (None, Ok(Action::await_change())),
        // Handed back to the backoff; any trigger evaluates a failing policy again.
        Requeue::Backoff => {
            let ready = find(&verdict.status.conditions, READY);
            let message = ready.map(|c| c.message.clone()).unwrap_or_default();
            (Some(Duration::ZERO), Err(PolicyError::Failed(message)))
        }
    };
    ctx.policies.remember(
        &key,
        Remembered {
            revision,
            requeue_after,
            ended: Instant::now(),
        },
    );
    result
}

/// The steps after `due`: the latest image with its digest, or the first failure.
async fn evaluate(
    policy: &ImagePolicy,
    ctx: &Context,
    repo_key: &RepositoryKey,
    repository: Option<&ImageRepository>,
    previous: Option<&ImageRef>,
) -> Result<ImageRef, PolicyFailure> {
    let namespace = policy.namespace().unwrap_or_default();
    check_cross_namespace(&namespace, repo_key, ctx.options.no_cross_namespace_refs)?;
    let repository = repository.ok_or_else(|| PolicyFailure::RepositoryNotFound {
        name: repo_key.name.clone(),
    })?;
    let access_from = repository.spec.access_from.as_ref();
    let labels = if needs_namespace_labels(&namespace, repo_key, access_from) {
        namespace_labels(ctx, &namespace).await?
    } else {
        BTreeMap::new()
    };
    check_access(&namespace, repo_key, access_from, &labels)?;
    check_repository(
        &repository.spec,
        ctx.options.feature_gates.object_level_workload_identity,
    )?;
    let chosen = policy_of(&policy.spec)?;
    let tags = read_tags_patiently(ctx, repository).await?;
    let tag_refs: Vec<&str> = tags.iter().map(String::as_str).collect();
    let tag = select(&chosen, &policy.spec, &tag_refs)?;
    let name = repository.spec.image.clone();
    let digest = match digest_plan(policy.spec.digest_reflection_policy(), previous, &name, &tag) {
        DigestPlan::None => String::new(),
        DigestPlan::Keep(digest) => digest,
        DigestPlan::Fetch => fetch_digest(ctx, repository, &tag)
            .await
            .map_err(|reason| digest_failure(&name, &tag, reason))?,
    };
    Ok(ImageRef { name, tag, digest })
}

/// The policy namespace's labels, which the repository's `accessFrom` selects on.
async fn namespace_labels(ctx: &Context, namespace: &str) -> Result<BTreeMap<String, String>, PolicyFailure> {
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let read = namespaces.get(namespace).await.map_err(|e| match e {
        kube::Error::Api(status) => PolicyFailure::RepositoryRead(status.message),
        other => PolicyFailure::RepositoryRead(other.to_string()),
    })?;
    Ok(read.metadata.labels.unwrap_or_default())
}

/// The pauses before reading an empty tag list again: Flux does so before it reports "no tags
/// in database" (4 reads, backoff from 1s by a factor of 1.5), so a policy evaluated while its
/// repository's scan stores the tags (created together, a fresh store after a restart) waits
/// for them instead of turning Ready=False with a Warning for a moment.
const EMPTY_STORE_REREADS: [Duration; 3] = [
    Duration::from_millis(1000),
    Duration::from_millis(1500),
    Duration::from_millis(2250),
];

/// The repository's tags, read again after each of `EMPTY_STORE_REREADS` while there are none.
async fn read_tags_patiently(
    ctx: &Context,
    repository: &ImageRepository,
) -> Result<Vec<String>, PolicyFailure> {
    let mut tags = read_tags(ctx, repository).await?;
    for pause in EMPTY_STORE_REREADS {
        if !tags.is_empty() {
            break;
        }
        tokio::time::sleep(pause).await;
        tags = read_tags(ctx, repository).await?;
    }
    Ok(tags)
}

/// The repository's tags as its last scan stored them.
async fn read_tags(ctx: &Context, repository: &ImageRepository) -> Result<Vec<String>, PolicyFailure> {
    let (namespace, name, uid) = (
        repository.namespace().unwrap_or_default(),
        repository.name_any(),
        repository.uid().unwrap_or_default(),
    );
    let store = ctx.store.clone();
    let stored = tokio::task::spawn_blocking(move || {
        store.read(RepoKey {
            namespace: &namespace,
            name: &name,
            uid: &uid,
        })
    })
    .await
    .map_err(|e| PolicyFailure::StoreRead(e.to_string()))?
    .map_err(|e| PolicyFailure::StoreRead(e.to_string()))?;
    Ok(stored.map(|s| s.tags).unwrap_or_default())
}

/// HEAD of `<image>:<tag>` with the repository's credentials and TLS, within its timeout;
/// the error is the text after Flux's `failed fetching digest of <ref>: `.
async fn fetch_digest(ctx: &Context, repository: &ImageRepository, tag: &str) -> Result<String, String> {
    let spec = &repository.spec;
    let image = RegistryImage::parse(&spec.image, spec.insecure).map_err(|e| e.to_string())?;
    let deadline = tokio::time::Instant::now() + spec.timeout();
    let auth = scan_auth(
        &ctx.client,
        &repository.namespace().unwrap_or_default(),
        &AuthRefs::of(spec),
        &image,
    )
    .await
    .map_err(|e| format!("failed to configure authentication options: {e}"))?;
    let client = RegistryClient::with_proxy(&auth.tls, auth.proxy, ctx.registry_limits.clone())
        .map_err(|e| e.to_string())?;
    client
        .manifest_digest(&image, tag, auth.credentials.as_ref(), deadline)
        .await
        .map_err(|e| format!("failed fetching descriptor for \"{}:{tag}\": {e}", spec.image))
}

impl Remembered {
    pub(crate) fn as_last(&self) -> LastEvaluation {
        LastEvaluation {
            revision: self.revision.clone(),
            requeue_after: self.requeue_after,
            elapsed: self.ended.elapsed(),
        }
    }
}
