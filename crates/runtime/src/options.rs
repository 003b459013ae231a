//! The flags every Flux controller has (fluxcd/pkg/runtime's: logs, leader election, probes
//! and metrics, events, client rate limits, watch scope, interval jitter), and the readers of
//! Go-style flag values a controller's own flags use too.

use std::time::Duration;

use crate::duration;
use crate::gates;
use crate::identity::ControllerIdentity;
use crate::telemetry::LogEncoding;

/// A duration flag as Go's `time.ParseDuration` reads the values people write: `1m0s`, `90s`,
/// `1.5h`, a leading `+`, and a bare `0`.
pub fn go_duration(text: &str) -> Result<Duration, String> {
    let unsigned = text.strip_prefix('+').unwrap_or(text);
    if unsigned == "0" {
        return Ok(Duration::ZERO);
    }
    duration::parse(unsigned).ok_or_else(|| format!("invalid duration '{text}' (expected e.g. 30s, 5m, 1h)"))
}

/// A boolean flag as Go's flag package reads it: bare (`--flag`) means true, else
/// `--flag=<strconv.ParseBool value>`.
pub fn go_bool(text: &str) -> Result<bool, String> {
    gates::parse_bool(text).ok_or_else(|| format!("invalid boolean '{text}' (expected true or false)"))
}

fn jitter_percentage(text: &str) -> Result<u8, String> {
    match text.parse::<u8>() {
        Ok(p) if p < 100 => Ok(p),
        _ => Err(format!(
            "--interval-jitter-percentage must be a number between 0 and 99, got '{text}'"
        )),
    }
}

/// The runtime flags of a controller, flattened into its own.
#[derive(Clone, Debug, clap::Args)]
pub struct RuntimeOptions {
    /// The number of concurrent reconciles.
    #[arg(long, default_value_t = 4)]
    pub concurrent: u16,
    /// Percentage of jitter applied to the interval, to spread reconciles.
    #[arg(long = "interval-jitter-percentage", default_value = "5", value_parser = jitter_percentage)]
    pub interval_jitter_percentage: u8,
    /// Watch objects in all namespaces; false restricts to RUNTIME_NAMESPACE.
    #[arg(long = "watch-all-namespaces", default_value = "true", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    pub watch_all_namespaces: bool,
    /// Only reconcile objects matching this label selector (sharding).
    #[arg(long = "watch-label-selector", default_value = "")]
    pub watch_label_selector: String,
    /// Where /metrics is served.
    #[arg(long = "metrics-addr", default_value = ":8080")]
    pub metrics_addr: String,
    /// Where /healthz and /readyz are served.
    #[arg(long = "health-addr", default_value = ":9440")]
    pub health_addr: String,
    /// Run only while holding the leader Lease.
    #[arg(long = "enable-leader-election", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    pub enable_leader_election: bool,
    #[arg(long = "leader-election-lease-duration", default_value = "35s", value_parser = go_duration)]
    pub leader_election_lease_duration: Duration,
    #[arg(long = "leader-election-renew-deadline", default_value = "30s", value_parser = go_duration)]
    pub leader_election_renew_deadline: Duration,
    #[arg(long = "leader-election-retry-period", default_value = "5s", value_parser = go_duration)]
    pub leader_election_retry_period: Duration,
    /// Give the Lease up on shutdown so another replica takes over at once.
    #[arg(long = "leader-election-release-on-cancel", default_value = "true", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    pub leader_election_release_on_cancel: bool,
    /// notification-controller's event endpoint.
    #[arg(long = "events-addr", default_value = "")]
    pub events_addr: String,
    /// First wait after a failed reconcile; doubled per consecutive failure.
    #[arg(long = "min-retry-delay", default_value = "750ms", value_parser = go_duration)]
    pub min_retry_delay: Duration,
    /// Longest wait after failed reconciles.
    #[arg(long = "max-retry-delay", default_value = "15m", value_parser = go_duration)]
    pub max_retry_delay: Duration,
    #[arg(long = "log-level", default_value = "info")]
    pub log_level: String,
    #[arg(long = "log-encoding", value_enum, default_value = "json")]
    pub log_encoding: LogEncoding,
    /// The namespace the controller runs in (the Lease lives there).
    #[arg(
        long = "runtime-namespace",
        env = "RUNTIME_NAMESPACE",
        default_value = "flux-system"
    )]
    pub runtime_namespace: String,
}

impl RuntimeOptions {
    /// The Lease name: Flux's (`<component>-leader-election`), suffixed by a hash of the shard
    /// selector so shards elect apart.
    pub fn lease_name(&self, identity: &ControllerIdentity) -> String {
        use sha2::{Digest, Sha256};
        let base = format!("{}-leader-election", identity.component);
        if self.watch_label_selector.is_empty() {
            return base;
        }
        let digest = hex::encode(Sha256::digest(self.watch_label_selector.as_bytes()));
        format!("{base}-{}", &digest[..8])
    }
}

/// Inserts `run` after the program name unless a subcommand (or a top-level `--help`,
/// `--version`) comes first: Flux starts its controller with flags alone.
pub fn with_default_subcommand(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    subcommands: &[&str],
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = args.into_iter().collect();
    let first = args.get(1).and_then(|a| a.to_str());
    let explicit = first.is_some_and(|first| {
        subcommands.contains(&first) || ["-h", "--help", "-V", "--version"].contains(&first)
    });
    if !explicit {
        args.insert(args.len().min(1), "run".into());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_alone_mean_run() {
        let with = |args: &[&str]| -> Vec<String> {
            with_default_subcommand(
                std::iter::once("kc").chain(args.iter().copied()).map(Into::into),
                &["run", "build", "help"],
            )
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
        };
        assert_eq!(
            with(&["--watch-all-namespaces", "--log-level=info"]),
            ["kc", "run", "--watch-all-namespaces", "--log-level=info"]
        );
        assert_eq!(with(&[]), ["kc", "run"]);
        assert_eq!(with(&["run", "--concurrent=2"]), ["kc", "run", "--concurrent=2"]);
        assert_eq!(with(&["build", "."]), ["kc", "build", "."]);
        assert_eq!(with(&["--help"]), ["kc", "--help"]);
    }
}
