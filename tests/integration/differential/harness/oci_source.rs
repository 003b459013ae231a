//! OCIRepository sources for the suite: a scenario's tree committed to its Git repository,
//! pushed by the real `flux push artifact` (with that commit as its origin) to the suite's
//! registry, and OCIRepository `oci` in each side's namespace fetched by source-controller.

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::json;

use super::{FETCH_LIMIT, RUN_LABEL, Suite, as_refs, tail};
use crate::differential::scenarios::Files;
use crate::support::flux::{GitRepo, main_revision};
use crate::support::registry::{Artifacts as _, apply_oci_repository};

/// The tag every scenario pushes to (its own repository in the registry).
const TAG: &str = "latest";

impl Suite {
    /// Commits `files`, pushes them to `scenario`'s repository and waits until OCIRepository
    /// `oci` in each of `namespaces` has the artifact; returns its revision (`latest@sha256:..`).
    pub(super) async fn push(
        &self,
        scenario: &str,
        repo: &GitRepo,
        namespaces: &[String],
        files: &Files,
    ) -> String {
        let commit = main_revision(&repo.commit(&as_refs(files)));
        let repository = format!("{}/{scenario}", self.id);
        let digest = self
            .registry
            .push_artifact(&repository, TAG, &as_refs(files), &repo.url, &commit);
        let head = format!("{TAG}@{digest}");
        let url = self.registry.oci_url(&repository);
        futures::future::join_all(namespaces.iter().map(|ns| self.oci_source_at(ns, &url, &head))).await;
        head
    }

    async fn oci_source_at(&self, ns: &str, url: &str, head: &str) {
        apply_oci_repository(&self.client, ns, "oci", url, TAG, "1h").await;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &SourceKind::OCIRepository.api_resource());
        // The label brings it into source-controller's sight; the annotation asks for a fetch
        // when it is already there.
        let patch = json!({"metadata": {
            "labels": {RUN_LABEL: self.id},
            "annotations": {"reconcile.fluxcd.io/requestedAt": head},
        }});
        api.patch("oci", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + FETCH_LIMIT;
        loop {
            let source = api.get("oci").await.unwrap();
            if source.data["status"]["artifact"]["revision"] == head {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "OCIRepository {ns}/oci never reached {head}: {}\nsource-controller log:\n{}\nregistry log:\n{}",
                source.data["status"],
                tail(&self.source.logs(), 30),
                tail(&self.registry.log(), 30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
