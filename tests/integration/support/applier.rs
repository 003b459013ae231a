//! Fixtures for the applier tests: a request-counting client, an applier with short waits, and
//! [`ApplyTest`], the namespace and owner one test applies for.

use std::time::Duration;

use flux_runtime::client::{RequestCounts, counting_client};
use kube::Client;
use kustomize_controller::api::kustomization::IgnoreRule;
use kustomize_controller::applier::{Applier, ApplierOptions, ApplyError, ApplyRequest, ChangeSet, Owner};
use kustomize_controller::kube_ext::ResourceResolver;
use serde_json::Value;

use super::TestNamespace;

/// A client for the test control plane whose requests are counted.
pub async fn counted_client() -> (Client, RequestCounts) {
    counting_client(super::config().await).expect("counting client")
}

/// Waits short enough for tests.
pub fn test_options() -> ApplierOptions {
    waits(Duration::from_secs(30), Duration::from_millis(500))
}

/// The default options but for how long the applier waits (`wait_timeout`) and how often it
/// polls meanwhile (`retry_interval`).
pub fn waits(wait_timeout: Duration, retry_interval: Duration) -> ApplierOptions {
    ApplierOptions {
        wait_timeout,
        retry_interval,
        ..Default::default()
    }
}

/// An applier on a counted client, with [`test_options`].
pub async fn applier() -> (Applier, RequestCounts, Client) {
    applier_with(test_options()).await
}

/// An applier on a counted client, with `options`.
pub async fn applier_with(options: ApplierOptions) -> (Applier, RequestCounts, Client) {
    let (client, counts) = counted_client().await;
    (
        Applier::new(ResourceResolver::new(client.clone()), options),
        counts,
        client,
    )
}

/// One applier test: an applier on a counted client, a namespace of its own, and the
/// Kustomization (`owner`) the objects are applied for.
pub struct ApplyTest {
    pub applier: Applier,
    pub counts: RequestCounts,
    pub client: Client,
    pub owner: Owner,
    options: ApplierOptions,
    ns: TestNamespace,
}

impl ApplyTest {
    /// A namespace named after `prefix`, owner `owner` in it, [`test_options`].
    pub async fn new(prefix: &str, owner: &str) -> Self {
        Self::with_options(prefix, owner, test_options()).await
    }

    pub async fn with_options(prefix: &str, owner: &str, options: ApplierOptions) -> Self {
        let (applier, counts, client) = applier_with(options.clone()).await;
        let ns = TestNamespace::new(&client, prefix).await;
        Self {
            applier,
            counts,
            owner: Owner::new(owner, &ns.name),
            client,
            options,
            ns,
        }
    }

    pub fn namespace(&self) -> &str {
        &self.ns.name
    }

    /// An apply of `objects` at `revision` for the owner; not forced, no ignore rules.
    pub fn request(&self, objects: Vec<Value>, revision: &'static str) -> ApplyRequest<'static> {
        request(&self.owner, objects, revision, &[])
    }

    pub async fn apply(&self, objects: Vec<Value>, revision: &'static str) -> Result<ChangeSet, ApplyError> {
        self.applier.apply(self.request(objects, revision)).await
    }

    /// As [`ApplyTest::apply`], by a new applier on the same counted client, as after a restart:
    /// no fingerprints, so every object is dry-run.
    pub async fn apply_restarted(
        &self,
        objects: Vec<Value>,
        revision: &'static str,
    ) -> Result<ChangeSet, ApplyError> {
        let restarted = Applier::new(ResourceResolver::new(self.client.clone()), self.options.clone());
        restarted.apply(self.request(objects, revision)).await
    }

    /// As [`ApplyTest::apply`], with `spec.ignore` rules.
    pub async fn apply_ignoring(
        &self,
        objects: Vec<Value>,
        revision: &'static str,
        ignore: &[IgnoreRule],
    ) -> Result<ChangeSet, ApplyError> {
        self.applier
            .apply(request(&self.owner, objects, revision, ignore))
            .await
    }

    /// The live object in this namespace, or `None`.
    pub async fn live(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        live(&self.client, api_version, kind, Some(self.namespace()), name).await
    }

    /// The live ConfigMap `name` in this namespace, or `None`.
    pub async fn config_map(&self, name: &str) -> Option<Value> {
        self.live("v1", "ConfigMap", name).await
    }

    /// How many server-side dry-runs went to `resource` (plural, with group) since the counts
    /// were last reset.
    pub fn dry_runs_of(&self, resource: &str) -> u64 {
        dry_runs_of(&self.counts, resource)
    }

    /// Deletes the namespace (see [`TestNamespace::delete`]).
    pub async fn delete(self) {
        self.ns.delete().await;
    }
}

/// An apply request for `owner`: not forced.
pub fn request<'a>(
    owner: &Owner,
    objects: Vec<Value>,
    revision: &'a str,
    ignore: &'a [IgnoreRule],
) -> ApplyRequest<'a> {
    ApplyRequest {
        owner: owner.clone(),
        objects,
        force: false,
        ignore,
        revision,
    }
}

/// The live object, or `None`.
pub async fn live(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
    name: &str,
) -> Option<Value> {
    let resolver = ResourceResolver::new(client.clone());
    let (api, _) = resolver.api(api_version, kind, ns).await.expect("resolve");
    api.get_opt(name)
        .await
        .expect("get")
        .map(|o| serde_json::to_value(o).unwrap())
}

/// How many server-side dry-runs went to `resource` (plural, with group).
pub fn dry_runs_of(counts: &RequestCounts, resource: &str) -> u64 {
    counts
        .snapshot()
        .iter()
        .filter(|(k, _)| k.verb == "dry-run-patch" && k.resource == resource)
        .map(|(_, n)| *n)
        .sum()
}

/// Deletes a cluster-scoped object if its kind is known; a test's last step, so errors are
/// ignored.
pub async fn delete_cluster_object(client: &Client, api_version: &str, kind: &str, name: &str) {
    let resolver = ResourceResolver::new(client.clone());
    if let Ok((api, _)) = resolver.api(api_version, kind, None).await {
        let _ = api.delete(name, &kube::api::DeleteParams::background()).await;
    }
}

/// Deletes CustomResourceDefinition `name` (see [`delete_cluster_object`]).
pub async fn delete_crd(client: &Client, name: &str) {
    delete_cluster_object(
        client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        name,
    )
    .await;
}
