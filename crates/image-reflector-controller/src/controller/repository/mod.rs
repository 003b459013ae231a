//! The ImageRepository pipeline: due? -> auth -> list -> exclusions -> store -> status. The
//! decisions are pure (`due`, `tags`, `status`); this driver does the reads and writes.

pub(crate) mod auth;
mod due;
mod status;
mod tags;

use std::sync::Arc;
use std::time::Duration;

use flux_runtime::conditions::Stamp;
use flux_runtime::events::{EventSubject, Notice, Severity, annotations_of};
use flux_runtime::status_writes::{StatusWriteError, object_key};
use flux_runtime::telemetry::logs::reconcile_span;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event as FinalizerEvent;
use kube::{Api, ResourceExt};
use tracing::Instrument as _;

use super::finalizers::finalized;
use super::{Context, REQUESTED_AT_ANNOTATION};
use crate::IMAGE_REPOSITORY;
use crate::api::ImageRepository;
use crate::api::conditions::reason;
use crate::api::image_repository::{Provider, ScanResult};
use crate::registry::{ImageRef, RegistryClient};
use crate::store::{RepoKey, StoreError};
use due::{Due, Observed};
use status::{Outcome, Pass, announcement, next_scan_message, next_status};

/// Why a pass ended without its requeue: the driver backs off (or, terminal, waits).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The pass failed and its status says why; retried with backoff.
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Status(#[from] StatusWriteError),
    #[error("failed to remove the tags of the deleted object: {0}")]
    Cleanup(#[source] StoreError),
    #[error(transparent)]
    Finalizer(Box<kube::runtime::finalizer::Error<ReconcileError>>),
}

impl ReconcileError {
    pub(crate) fn is_terminal(&self) -> bool {
        match self {
            Self::Cleanup(error) => error.is_terminal(),
            Self::Finalizer(boxed) => match boxed.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.is_terminal(),
                _ => false,
            },
            Self::Failed(_) | Self::Status(_) => false,
        }
    }
}

impl EventSubject for ImageRepository {
    fn event_action(&self, _notice: &Notice) -> &'static str {
        "Reconcile"
    }
}

/// One pass over an ImageRepository, with the finalizer that removes its tags on deletion.
pub(crate) async fn reconcile(
    repo: Arc<ImageRepository>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let namespace = repo.namespace().unwrap_or_default();
    let span = reconcile_span(&IMAGE_REPOSITORY, &namespace, &repo.name_any());
    let api: Api<ImageRepository> = Api::namespaced(ctx.client.clone(), &namespace);
    let key = object_key(repo.as_ref());
    let labels = super::object_labels(&IMAGE_REPOSITORY, &namespace, &repo.name_any());
    let began = std::time::Instant::now();
    let result = finalized(&api, repo, |event| async {
        match event {
            FinalizerEvent::Apply(repo) => apply(&repo, &ctx).await,
            FinalizerEvent::Cleanup(repo) => cleanup(&repo, &ctx).await,
        }
    })
    .instrument(span)
    .await
    .map_err(|e| ReconcileError::Finalizer(Box::new(e)));
    ctx.metrics
        .record_reconcile(&labels, began.elapsed(), super::result_label(result.is_ok()));
    if result.is_ok() {
        ctx.failures.reset(&key);
    }
    result
}

fn store_key(repo: &ImageRepository) -> (String, String, String) {
    (
        repo.namespace().unwrap_or_default(),
        repo.name_any(),
        repo.uid().unwrap_or_default(),
    )
}

/// Deletion: the object's tag file goes with it.
async fn cleanup(repo: &ImageRepository, ctx: &Context) -> Result<Action, ReconcileError> {
    let (namespace, name, uid) = store_key(repo);
    let store = ctx.store.clone();
    tokio::task::spawn_blocking(move || {
        store.delete(RepoKey {
            namespace: &namespace,
            name: &name,
            uid: &uid,
        })
    })
    .await
    .map_err(|e| ReconcileError::Failed(format!("tag store task failed: {e}")))?
    .map_err(ReconcileError::Cleanup)?;
    ctx.own_writes.forget(&object_key(repo));
    Ok(Action::await_change())
}

async fn apply(repo: &ImageRepository, ctx: &Context) -> Result<Action, ReconcileError> {
    if repo.spec.suspend {
        tracing::info!("reconciliation is suspended for this object");
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let (outcome, next) = steps(repo, ctx, now).await;
    let key = object_key(repo);
    let old = ctx
        .own_writes
        .ahead_of(&key, repo)
        .or_else(|| repo.status.clone());
    let generation = repo.metadata.generation.unwrap_or_default();
    let pass = Pass {
        generation,
        requested_at: repo
            .annotations()
            .get(REQUESTED_AT_ANNOTATION)
            .map(String::as_str),
        stamp: Stamp { generation, now },
    };
    let status = next_status(old.as_ref(), &pass, &outcome);
    if old.as_ref() != Some(&status) {
        ctx.own_writes.write_status(&ctx.client, repo, &status).await?;
    }
    let old_conditions = old.map(|s| s.conditions).unwrap_or_default();
    let notice = match announcement(&old_conditions, &status.conditions) {
        Some((severity, reason, message)) => {
            Some(Notice::new(severity, &reason, message, annotations_of(repo)))
        }
        // Nothing news: Flux's trace event, recorded but not forwarded.
        None => match &outcome {
            Outcome::Done { scan, .. } => {
                let old_revision = repo
                    .status
                    .as_ref()
                    .and_then(|s| s.last_scan_result.as_ref())
                    .map(|r| &r.revision);
                let changed = scan.as_ref().is_some_and(|s| Some(&s.revision) != old_revision);
                let message = next_scan_message(scan.is_some(), changed, next);
                Some(Notice::new(
                    Severity::Trace,
                    reason::SUCCEEDED,
                    message,
                    annotations_of(repo),
                ))
            }
            _ => None,
        },
    };
    if let Some(notice) = notice {
        tracing::info!(reason = %notice.reason, "{}", notice.message);
        ctx.notifier.emit(repo, &notice);
    }
    match outcome {
        Outcome::Done { .. } => Ok(Action::requeue(next)),
        Outcome::Stalled { message, .. } => {
            tracing::error!(%message, "stalled: waiting for a change of the object");
            Ok(Action::await_change())
        }
        Outcome::Failed { message, .. } => Err(ReconcileError::Failed(message)),
    }
}

/// The steps of a pass, each failure with Flux's reason and message; the duration is the
/// requeue of a pass that ended well.
async fn steps(repo: &ImageRepository, ctx: &Context, now: Timestamp) -> (Outcome, Duration) {
    let spec = &repo.spec;
    let interval = spec.interval().unwrap_or(Duration::from_secs(300));
    let stalled = |reason, message: String| (Outcome::Stalled { reason, message }, interval);
    let failed = |reason, message: String, scanning| {
        (
            Outcome::Failed {
                reason,
                message,
                scanning,
            },
            interval,
        )
    };
    if spec.provider() != Provider::Generic
        && spec.service_account_name.is_some()
        && !ctx.options.feature_gates.object_level_workload_identity
    {
        return stalled(
            reason::FEATURE_GATE_DISABLED,
            "to use spec.serviceAccountName for provider authentication please enable the \
             ObjectLevelWorkloadIdentity feature gate in the controller"
                .into(),
        );
    }
    let image = match ImageRef::parse(&spec.image, spec.insecure) {
        Ok(image) => image,
        Err(error) => return stalled(reason::IMAGE_URL_INVALID, error.to_string()),
    };
    if let Err(message) = auth::provider_supported(spec.provider()) {
        return stalled(reason::INVALID_PROVIDER_CONFIGURATION, message);
    }
    let deadline = tokio::time::Instant::now() + spec.timeout();
    let namespace = repo.namespace().unwrap_or_default();
    let auth = auth::scan_auth(&ctx.client, &namespace, &auth::AuthRefs::of(spec), &image).await;
    let auth = match auth {
        Ok(auth) => auth,
        Err(error) => {
            return failed(
                reason::AUTHENTICATION_FAILED,
                format!("failed to configure authentication options: {error}"),
                None,
            );
        }
    };

    let (ns, name, uid) = store_key(repo);
    let store = ctx.store.clone();
    let stored = tokio::task::spawn_blocking(move || {
        store.read(RepoKey {
            namespace: &ns,
            name: &name,
            uid: &uid,
        })
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()));
    let stored_tags = match stored {
        Ok(stored) => stored.map_or(0, |s| s.tags.len()),
        Err(error) => {
            return failed(
                reason::FAILURE,
                format!("failed to determine if it's scan time: {error}"),
                None,
            );
        }
    };
    let canonical_name = image.canonical_name();
    let exclusion_list = spec.exclusion_list();
    let seen = Observed {
        requested_at: repo
            .annotations()
            .get(REQUESTED_AT_ANNOTATION)
            .map(String::as_str),
        canonical_name: &canonical_name,
        exclusion_list: &exclusion_list,
        stored_tags,
        interval,
        now,
    };
    let why = match due::due(repo.status.as_ref(), &seen) {
        Due::After(remaining) => {
            let done = Outcome::Done {
                canonical_name,
                exclusion_list,
                scan: None,
            };
            return (done, remaining);
        }
        Due::Now(why) => why,
    };
    tracing::info!("scanning: {}", why.as_str());
    match scan(repo, ctx, &image, auth, &exclusion_list, deadline, now).await {
        Ok(result) => (
            Outcome::Done {
                canonical_name,
                exclusion_list,
                scan: Some(result),
            },
            interval,
        ),
        Err(message) => failed(
            reason::READ_OPERATION_FAILED,
            format!("scan failed: {message}"),
            Some(why),
        ),
    }
}

/// Lists, filters and stores the tags; the error is the text after Flux's `scan failed: `.
async fn scan(
    repo: &ImageRepository,
    ctx: &Context,
    image: &ImageRef,
    auth: auth::ScanAuth,
    exclusion_list: &[String],
    deadline: tokio::time::Instant,
    now: Timestamp,
) -> Result<ScanResult, String> {
    let client = RegistryClient::with_proxy(&auth.tls, auth.proxy, ctx.registry_limits.clone())
        .map_err(|e| e.to_string())?;
    let listed = client
        .list_tags(image, auth.credentials.as_ref(), deadline)
        .await
        .map_err(|e| e.to_string())?;
    let kept = tags::exclude(listed, exclusion_list).map_err(|e| e.to_string())?;
    let latest = tags::latest(&kept);
    let count = kept.len();
    let (namespace, name, uid) = store_key(repo);
    let store = ctx.store.clone();
    let canonical = image.canonical_name();
    let stored = tokio::task::spawn_blocking(move || {
        store.write(
            RepoKey {
                namespace: &namespace,
                name: &name,
                uid: &uid,
            },
            kept,
        )
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("failed to set tags for {canonical:?}: {e}"))?;
    Ok(ScanResult {
        revision: Some(stored.revision),
        tag_count: i64::try_from(count).unwrap_or(i64::MAX),
        scan_time: Some(Stamp { generation: 0, now }.time()),
        latest_tags: latest,
    })
}
