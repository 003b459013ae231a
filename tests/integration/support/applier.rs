//! Fixtures for the applier tests: a request-counting client and an applier with short waits.

use std::time::Duration;

use kube::Client;
use kustomize_controller::applier::{Applier, ApplierOptions};
use kustomize_controller::kube_ext::{RequestCounts, ResourceResolver, counting_client};

/// A client for the test control plane whose requests are counted.
pub async fn counted_client() -> (Client, RequestCounts) {
    counting_client(super::config().await).expect("counting client")
}

/// An applier on a counted client, with waits short enough for tests.
pub async fn applier() -> (Applier, RequestCounts, Client) {
    let (client, counts) = counted_client().await;
    let options = ApplierOptions {
        wait_timeout: Duration::from_secs(30),
        retry_interval: Duration::from_millis(500),
        ..Default::default()
    };
    (
        Applier::new(ResourceResolver::new(client.clone()), options),
        counts,
        client,
    )
}
