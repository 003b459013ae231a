//! Status writes: the server-side apply of a Kustomization's status, and the writes this
//! replica made that its Kustomization cache does not show yet.
//!
//! A pass triggered by another object (a source's new artifact, a parked wait's verdict) reads
//! the Kustomization from the cache, which lags the status the pass before it wrote by a watch
//! round trip. Started from that older status, the pass took its own last revision for new
//! work and wrote "Fetching" over a Ready it had just written. Such a pass starts from the
//! status it wrote last instead; the cache showing that write ends the lag.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::api::Kustomization;
use crate::api::conditions::{keys, reason};
use crate::api::kustomization::KustomizationStatus;
use crate::error::{Retry, StepError};

use super::Context;

/// Server-side apply of the status subresource by `gotk-kustomize-controller`, forced: the
/// controller owns these fields.
pub(crate) async fn write_status(
    ctx: &Context,
    ks: &Kustomization,
    status: &KustomizationStatus,
) -> Result<(), StatusWriteError> {
    let api: Api<Kustomization> = Api::namespaced(ctx.client.clone(), &ks.namespace().unwrap_or_default());
    let body = serde_json::json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "status": status,
    });
    let params = PatchParams::apply(keys::STATUS_FIELD_MANAGER).force();
    match api
        .patch_status(&ks.name_any(), &params, &Patch::Apply(&body))
        .await
    {
        Ok(written) => {
            ctx.own_writes.wrote(
                &super::object_key(ks),
                ks.resource_version(),
                written.resource_version(),
                status,
            );
            Ok(())
        }
        // Gone while we worked: nothing left to report on.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(StatusWriteError(error)),
    }
}

/// The status subresource could not be written.
#[derive(Debug, thiserror::Error)]
#[error("failed to update status: {0}")]
pub(crate) struct StatusWriteError(#[source] kube::Error);

impl StepError for StatusWriteError {
    fn reason(&self) -> &'static str {
        reason::RECONCILIATION_FAILED
    }

    fn retry(&self) -> Retry {
        Retry::Backoff
    }
}

/// The resource versions kept per Kustomization, so a cached object can be recognised as an
/// earlier write of ours (a pass writes up to four statuses). Resource versions are opaque:
/// they are matched, never ordered.
const VERSIONS_KEPT: usize = 8;

#[derive(Default)]
pub(crate) struct OwnWrites(Mutex<HashMap<String, Written>>);

struct Written {
    /// Versions behind the last write, oldest first; the last is the last write.
    versions: Vec<String>,
    /// The status of the last write, until the cache shows it.
    ahead: Option<KustomizationStatus>,
}

impl OwnWrites {
    /// A status write of `key` by a pass that read version `read` returned version `version`:
    /// both are behind the status written.
    pub(crate) fn wrote(
        &self,
        key: &str,
        read: Option<String>,
        version: Option<String>,
        status: &KustomizationStatus,
    ) {
        let Some(version) = version else { return };
        let mut writes = self.0.lock().expect("own writes lock");
        let written = writes.entry(key.to_string()).or_insert_with(|| Written {
            versions: Vec::new(),
            ahead: None,
        });
        for version in read.into_iter().chain([version]) {
            written.versions.retain(|v| *v != version);
            if written.versions.len() == VERSIONS_KEPT {
                written.versions.remove(0);
            }
            written.versions.push(version);
        }
        written.ahead = Some(status.clone());
    }

    /// The cache shows `ks`: once that is the last write, the cache is not behind.
    pub(crate) fn seen(&self, key: &str, ks: &Kustomization) {
        let mut writes = self.0.lock().expect("own writes lock");
        if let Some(written) = writes.get_mut(key)
            && written.versions.last() == ks.resource_version().as_ref()
        {
            written.ahead = None;
        }
    }

    /// The status to start a pass of `ks` from: the last one written, when `ks` is an earlier
    /// write of ours (the cache lags); `None` when `ks` is current or someone else wrote it.
    pub(crate) fn ahead_of(&self, key: &str, ks: &Kustomization) -> Option<KustomizationStatus> {
        let writes = self.0.lock().expect("own writes lock");
        let written = writes.get(key)?;
        let version = ks.resource_version()?;
        let earlier = &written.versions[..written.versions.len().saturating_sub(1)];
        if earlier.contains(&version) {
            written.ahead.clone()
        } else {
            None
        }
    }

    pub(crate) fn forget(&self, key: &str) {
        self.0.lock().expect("own writes lock").remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(version: &str) -> Kustomization {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "app", "namespace": "ns", "resourceVersion": version},
            "spec": {"interval": "5m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}}
        }))
        .unwrap()
    }

    fn status(revision: &str) -> KustomizationStatus {
        KustomizationStatus {
            last_applied_revision: Some(revision.into()),
            ..KustomizationStatus::default()
        }
    }

    #[test]
    fn a_cached_earlier_write_of_ours_starts_from_the_last_one() {
        let writes = OwnWrites::default();
        // A pass read version 7 (the finalizer added) and wrote 10, then 12.
        writes.wrote("ns/app", Some("7".into()), Some("10".into()), &status("fetching"));
        writes.wrote("ns/app", Some("7".into()), Some("12".into()), &status("applied"));

        for behind in ["7", "10"] {
            let ahead = writes.ahead_of("ns/app", &at(behind));
            assert_eq!(
                ahead.and_then(|s| s.last_applied_revision).as_deref(),
                Some("applied"),
                "{behind}"
            );
        }
        assert_eq!(
            writes.ahead_of("ns/app", &at("12")),
            None,
            "the cache shows the last write"
        );
        assert_eq!(
            writes.ahead_of("ns/app", &at("13")),
            None,
            "someone else's write since"
        );
        assert_eq!(writes.ahead_of("ns/other", &at("10")), None);

        writes.seen("ns/app", &at("10"));
        assert!(writes.ahead_of("ns/app", &at("10")).is_some(), "still behind");
        writes.seen("ns/app", &at("12"));
        assert_eq!(writes.ahead_of("ns/app", &at("10")), None, "caught up");

        // Caught up between two writes of a pass: the earlier ones still count as behind.
        writes.wrote(
            "ns/app",
            Some("12".into()),
            Some("14".into()),
            &status("fetching again"),
        );
        writes.seen("ns/app", &at("14"));
        writes.wrote(
            "ns/app",
            Some("12".into()),
            Some("16".into()),
            &status("applied again"),
        );
        let ahead = writes.ahead_of("ns/app", &at("14"));
        assert_eq!(
            ahead.and_then(|s| s.last_applied_revision).as_deref(),
            Some("applied again")
        );
    }
}
