//! What runs a controller beside its reconciles: its instance name and its shutdown.

use crate::identity::ControllerIdentity;

/// The pod name when running in a cluster, else the host name; events and the Lease carry it.
pub fn instance_name(identity: &ControllerIdentity) -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("{}-{}", identity.component, std::process::id()))
}

/// Returns on SIGTERM or SIGINT, once it has said so in the log.
pub async fn shutdown_signal() {
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down: waiting for running reconciles to finish");
}
