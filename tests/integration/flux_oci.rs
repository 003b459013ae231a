//! OCI sources end to end with the real Flux parts: a real registry, artifacts pushed by the
//! real `flux push artifact` with the Git commit they were built from, the real
//! source-controller's OCIRepository, and our controller applying it with the commit as
//! `lastAppliedOriginRevision` (from the artifact's `org.opencontainers.image.revision`).

use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kustomize_controller::api::Kustomization;
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::json;

use crate::support::controller::{
    ControllerProcess, apply_kustomization, config_map_value, get_kustomization,
};
use crate::support::flux::{
    GitServer, SourceController, main_revision, source_controller_crds, start_our_controller,
};
use crate::support::registry::{Artifacts as _, apply_oci_repository};
use crate::support::{TestNamespace, client, kustomization_crd};
use test_support::registry::{Options, Registry};

/// Generous: a source poll, a pull and an apply on a loaded 2-core machine.
const APPLY_LIMIT: Duration = Duration::from_secs(180);

fn tree(config_maps: &[(&str, &str)]) -> Vec<(String, String)> {
    let objects: Vec<String> = config_maps
        .iter()
        .map(|(name, value)| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
            )
        })
        .collect();
    vec![
        (
            "deploy/kustomization.yaml".into(),
            "resources: [objects.yaml]\n".into(),
        ),
        ("deploy/objects.yaml".into(), objects.join("---\n")),
    ]
}

fn refs(files: &[(String, String)]) -> Vec<(&str, &str)> {
    files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect()
}

struct Loop {
    client: kube::Client,
    ns: TestNamespace,
    registry: Registry,
    source: SourceController,
    controller: ControllerProcess,
}

impl Loop {
    /// Waits until Kustomization `name` has applied `revision`; on a time-out the failure
    /// shows the source, both controllers' logs and the registry's.
    async fn wait_applied(&self, name: &str, revision: &str) -> Kustomization {
        let ns = &self.ns.name;
        let deadline = tokio::time::Instant::now() + APPLY_LIMIT;
        loop {
            let ks = get_kustomization(&self.client, ns, name).await;
            let status = ks.as_ref().and_then(|k| k.status.as_ref());
            if status.and_then(|s| s.last_applied_revision.as_deref()) == Some(revision) {
                return ks.unwrap();
            }
            if tokio::time::Instant::now() > deadline {
                let oci: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), ns, &SourceKind::OCIRepository.api_resource());
                let source = oci.get_opt("repo").await.ok().flatten();
                panic!(
                    "{ns}/{name} did not apply {revision} within {APPLY_LIMIT:?}; status: {status:?}\n\
                     OCIRepository status: {}\nour log:\n{}\nsource-controller log:\n{}\nregistry log:\n{}",
                    source.map_or(json!(null), |s| s.data["status"].clone()),
                    self.controller.logs(),
                    self.source.logs(),
                    self.registry.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

#[tokio::test]
async fn pushed_artifacts_are_applied_with_their_origin_revision() {
    let client = client().await;
    kustomization_crd(&client).await;
    source_controller_crds(&client).await;
    let ns = TestNamespace::new(&client, "flux-oci").await;
    let git = GitServer::start().await;
    let repo = git.repository("app");
    let l = Loop {
        registry: Registry::start(Options::default()),
        source: SourceController::start(&ns.name),
        controller: start_our_controller(&ns.name),
        client,
        ns,
    };
    let ns = l.ns.name.clone();
    let repository = format!("{ns}/manifests");

    // The CI way: commit, then push the commit's tree with its URL and revision.
    let files = tree(&[("a", "one"), ("b", "one")]);
    let first = main_revision(&repo.commit(&refs(&files)));
    let digest = l
        .registry
        .push_artifact(&repository, "latest", &refs(&files), &repo.url, &first);
    apply_oci_repository(
        &l.client,
        &ns,
        "repo",
        &l.registry.oci_url(&repository),
        "latest",
        "2s",
    )
    .await;
    let spec = json!({
        "interval": "10m", "retryInterval": "5s", "prune": true, "timeout": "30s",
        "path": "./deploy", "targetNamespace": ns,
        "sourceRef": {"kind": "OCIRepository", "name": "repo"},
    });
    apply_kustomization(&l.client, &ns, "app", spec).await;

    let applied = format!("latest@{digest}");
    let status = l.wait_applied("app", &applied).await.status.unwrap();
    assert_eq!(
        status.last_applied_origin_revision.as_deref(),
        Some(first.as_str()),
        "the origin revision is the commit flux push artifact recorded"
    );
    assert_eq!(status.last_attempted_revision.as_deref(), Some(applied.as_str()));
    assert_eq!(
        config_map_value(&l.client, &ns, "a").await.as_deref(),
        Some("one")
    );
    assert_eq!(
        config_map_value(&l.client, &ns, "b").await.as_deref(),
        Some("one")
    );

    // A new commit pushed to the same tag: source-controller's poll finds the new digest, ours
    // applies it with the new origin and prunes what the tree dropped.
    let files = tree(&[("a", "two")]);
    let second = main_revision(&repo.commit(&refs(&files)));
    let next = l
        .registry
        .push_artifact(&repository, "latest", &refs(&files), &repo.url, &second);
    assert_ne!(next, digest, "a new tree is a new artifact");
    let status = l
        .wait_applied("app", &format!("latest@{next}"))
        .await
        .status
        .unwrap();
    assert_eq!(
        status.last_applied_origin_revision.as_deref(),
        Some(second.as_str())
    );
    assert_eq!(
        config_map_value(&l.client, &ns, "a").await.as_deref(),
        Some("two")
    );
    assert_eq!(
        config_map_value(&l.client, &ns, "b").await,
        None,
        "b left the artifact and is pruned"
    );
    l.ns.delete().await;
}
