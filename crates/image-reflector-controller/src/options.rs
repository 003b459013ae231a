//! The flags of Flux's image-reflector-controller v1.2, with its defaults, so that Flux's
//! Deployment arguments (and any a platform team added) are accepted unchanged: the runtime's,
//! which every Flux controller has, and the image reflector's own.

use std::path::PathBuf;
use std::time::Duration;

use flux_runtime::ControllerIdentity;
use flux_runtime::gates::{Effect, Gate};
use flux_runtime::options::{RuntimeOptions, go_bool, go_duration};

/// The ImageRepository controller's names, Flux's spelling (its Lease is the component's).
pub const IMAGE_REPOSITORY: ControllerIdentity = ControllerIdentity {
    controller: "imagerepository",
    group: "image.toolkit.fluxcd.io",
    kind: "ImageRepository",
    component: "image-reflector-controller",
    metrics_prefix: "image_reflector_controller",
    // Flux's image reflector patches status and finalizers as its controller name, without the
    // `gotk-` prefix its kustomize-controller uses: `managedFields` must not change on a swap.
    field_manager: "image-reflector-controller",
};

/// The ImagePolicy controller's names; same process, same component.
pub const IMAGE_POLICY: ControllerIdentity = ControllerIdentity {
    controller: "imagepolicy",
    kind: "ImagePolicy",
    ..IMAGE_REPOSITORY
};

/// Everything the controller can be told.
#[derive(Clone, Debug, clap::Args)]
pub struct RunOptions {
    /// Logs, leader election, probes and metrics, events, retry delays, watch scope.
    #[command(flatten)]
    pub runtime: RuntimeOptions,
    /// Where the tags of each ImageRepository are stored.
    #[arg(long = "storage-path", default_value = "/data")]
    pub storage_path: PathBuf,
    /// Smallest tag data, in KiB, stored compressed.
    #[arg(long = "storage-compression-threshold", default_value_t = 64, value_parser = positive_kib)]
    pub storage_compression_threshold_kib: u64,
    /// Minutes between sweeps of tag files whose ImageRepository is gone; 0 disables them.
    #[arg(long = "gc-interval", default_value_t = 10)]
    pub gc_interval_minutes: u16,
    /// The interval at which a policy whose repository has no tags yet is re-evaluated.
    #[arg(long = "requeue-dependency", default_value = "30s", value_parser = go_duration)]
    pub requeue_dependency: Duration,
    /// Refuse ImagePolicies that reference an ImageRepository in another namespace.
    #[arg(long = "no-cross-namespace-refs", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    pub no_cross_namespace_refs: bool,
    /// ServiceAccount used for cloud workload identity when an ImageRepository names none
    /// (needs the ObjectLevelWorkloadIdentity gate).
    #[arg(long = "default-service-account", default_value = "")]
    pub default_service_account: String,
    /// Flux's feature gates, `Name=true,Name=false`.
    #[arg(long = "feature-gates", default_value = "", value_parser = parse_gates)]
    pub feature_gates: FeatureGates,
    /// Flux's flags accepted so that its Deployment arguments start this controller, but that
    /// change nothing here.
    #[command(flatten)]
    pub without_effect: FlagsWithoutEffect,
}

/// See [`RunOptions::without_effect`]; [`FlagsWithoutEffect::set`] names those given.
#[derive(Clone, Debug, clap::Args)]
pub struct FlagsWithoutEffect {
    /// kube-rs does not throttle on the client; API Priority and Fairness governs.
    #[arg(long = "kube-api-qps", hide = true)]
    kube_api_qps: Option<f32>,
    #[arg(long = "kube-api-burst", hide = true)]
    kube_api_burst: Option<u32>,
    /// Sizes Badger's memory-mapped value log; tags here are plain files.
    #[arg(long = "storage-value-log-file-size", hide = true)]
    storage_value_log_file_size: Option<i64>,
    /// Flux binds it with the runtime's watch flags; the image reflector never watches
    /// ConfigMaps or Secrets.
    #[arg(long = "watch-configs-label-selector", hide = true)]
    watch_configs_label_selector: Option<String>,
    /// Cloud-provider token cache: no cloud login here.
    #[arg(long = "token-cache-max-size", hide = true)]
    token_cache_max_size: Option<u32>,
    #[arg(long = "token-cache-max-duration", hide = true, value_parser = go_duration)]
    token_cache_max_duration: Option<Duration>,
}

impl FlagsWithoutEffect {
    /// The flags given on the command line, for a startup warning.
    pub fn set(&self) -> Vec<&'static str> {
        [
            ("--kube-api-qps", self.kube_api_qps.is_some()),
            ("--kube-api-burst", self.kube_api_burst.is_some()),
            (
                "--storage-value-log-file-size",
                self.storage_value_log_file_size.is_some(),
            ),
            (
                "--watch-configs-label-selector",
                self.watch_configs_label_selector.is_some(),
            ),
            ("--token-cache-max-size", self.token_cache_max_size.is_some()),
            (
                "--token-cache-max-duration",
                self.token_cache_max_duration.is_some(),
            ),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }
}

/// The gates of Flux's image-reflector-controller v1.2, with its defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// Cloud workload identity per object (`spec.provider` with `serviceAccountName`), and
    /// `--default-service-account`.
    pub object_level_workload_identity: bool,
    /// Gates set to a non-default value that change nothing in this controller, with why.
    pub without_effect: Vec<(&'static str, &'static str)>,
}

const GATES: &[Gate<FeatureGates>] = &[
    Gate {
        name: "ObjectLevelWorkloadIdentity",
        effect: Effect::Sets(|gates, on| gates.object_level_workload_identity = on),
    },
    Gate {
        name: "CacheSecretsAndConfigMaps",
        effect: Effect::Nothing {
            default: false,
            why: "Secrets are read when a scan needs them",
        },
    },
    Gate {
        name: "FluxStorage",
        effect: Effect::Nothing {
            default: false,
            why: "tags are always stored as one file per ImageRepository",
        },
    },
];

fn parse_gates(text: &str) -> Result<FeatureGates, String> {
    let (mut gates, without_effect) = flux_runtime::gates::parse(GATES, text)?;
    gates.without_effect = without_effect;
    Ok(gates)
}

/// `--storage-compression-threshold`: Flux refuses 0 or less (with its file store, the only
/// one here).
fn positive_kib(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(kib) if kib > 0 => Ok(kib),
        _ => Err(format!(
            "--storage-compression-threshold must be a number of KiB greater than zero, got '{text}'"
        )),
    }
}

/// A combination of flags Flux refuses at startup.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidOptions {
    #[error(
        "invalid configuration: cannot set default service accounts when the feature gate \
         ObjectLevelWorkloadIdentity is not enabled"
    )]
    DefaultServiceAccountWithoutGate,
}

impl RunOptions {
    /// Flux's startup checks of flags that parse alone but not together.
    pub fn validate(&self) -> Result<(), InvalidOptions> {
        if !self.default_service_account.is_empty() && !self.feature_gates.object_level_workload_identity {
            return Err(InvalidOptions::DefaultServiceAccountWithoutGate);
        }
        Ok(())
    }

    /// `--storage-compression-threshold` in bytes.
    pub fn storage_compression_threshold(&self) -> u64 {
        self.storage_compression_threshold_kib.saturating_mul(1024)
    }

    /// `--gc-interval`; `None` when 0 disables the sweeps.
    pub fn gc_interval(&self) -> Option<Duration> {
        let minutes = u64::from(self.gc_interval_minutes);
        (minutes > 0).then(|| Duration::from_secs(minutes * 60))
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use flux_runtime::telemetry::LogEncoding;

    use super::*;

    #[derive(Parser)]
    #[command(args_override_self = true)]
    struct Cli {
        #[command(flatten)]
        run: RunOptions,
    }

    fn try_parse(args: &[&str]) -> Result<RunOptions, String> {
        Cli::try_parse_from(std::iter::once("image-reflector-controller").chain(args.iter().copied()))
            .map(|cli| cli.run)
            .map_err(|e| e.to_string())
    }

    fn parse(args: &[&str]) -> RunOptions {
        try_parse(args).unwrap()
    }

    #[test]
    fn fluxs_stock_deployment_arguments_parse() {
        let o = parse(&[
            "--watch-all-namespaces",
            "--log-level=info",
            "--log-encoding=json",
            "--enable-leader-election",
        ]);
        assert!(o.runtime.watch_all_namespaces && o.runtime.enable_leader_election);
        assert_eq!(o.runtime.log_level, "info");
        assert_eq!(o.runtime.log_encoding, LogEncoding::Json);
        assert_eq!(o.validate(), Ok(()));
        assert!(o.without_effect.set().is_empty());
    }

    #[test]
    fn defaults_are_those_of_flux_v1_2() {
        let o = parse(&[]);
        assert_eq!(o.runtime.metrics_addr, ":8080");
        assert_eq!(o.runtime.health_addr, ":9440");
        assert_eq!(o.runtime.events_addr, "");
        assert_eq!(o.runtime.concurrent, 4);
        assert!(o.runtime.watch_all_namespaces);
        assert_eq!(o.runtime.watch_label_selector, "");
        assert!(!o.runtime.enable_leader_election);
        assert!(o.runtime.leader_election_release_on_cancel);
        assert_eq!(o.runtime.leader_election_lease_duration, Duration::from_secs(35));
        assert_eq!(o.runtime.leader_election_renew_deadline, Duration::from_secs(30));
        assert_eq!(o.runtime.leader_election_retry_period, Duration::from_secs(5));
        assert_eq!(o.runtime.min_retry_delay, Duration::from_millis(750));
        assert_eq!(o.runtime.max_retry_delay, Duration::from_secs(15 * 60));
        assert_eq!(o.runtime.log_level, "info");
        assert_eq!(o.runtime.log_encoding, LogEncoding::Json);
        assert_eq!(o.storage_path, PathBuf::from("/data"));
        assert_eq!(o.storage_compression_threshold(), 64 * 1024);
        assert_eq!(o.gc_interval(), Some(Duration::from_secs(600)));
        assert_eq!(o.requeue_dependency, Duration::from_secs(30));
        assert!(!o.no_cross_namespace_refs);
        assert_eq!(o.default_service_account, "");
        assert_eq!(o.feature_gates, FeatureGates::default());
        assert_eq!(
            o.runtime.lease_name(&IMAGE_REPOSITORY),
            "image-reflector-controller-leader-election"
        );
    }

    #[test]
    fn every_flag_of_flux_v1_2_is_accepted() {
        // Each flag main.go of v1.2.0 binds (its own and fluxcd/pkg's flag sets), as a platform
        // team may have set them.
        let o = parse(&[
            "--metrics-addr=:8081",
            "--events-addr=http://notification-controller.flux-system.svc.cluster.local./",
            "--health-addr=:9441",
            "--storage-path=/var/lib/irc",
            "--storage-value-log-file-size=134217728",
            "--storage-compression-threshold=128",
            "--gc-interval=0",
            "--concurrent=8",
            "--requeue-dependency=10s",
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            "--log-encoding=console",
            "--log-level=debug",
            "--enable-leader-election=true",
            "--leader-election-release-on-cancel=false",
            "--leader-election-lease-duration=40s",
            "--leader-election-renew-deadline=35s",
            "--leader-election-retry-period=2s",
            "--no-cross-namespace-refs",
            "--min-retry-delay=1s",
            "--max-retry-delay=5m",
            "--feature-gates=ObjectLevelWorkloadIdentity=true,CacheSecretsAndConfigMaps=true,FluxStorage=true",
            "--watch-all-namespaces=false",
            "--watch-label-selector=sharding.fluxcd.io/key=shard1",
            "--watch-configs-label-selector=reconcile.fluxcd.io/watch=Enabled",
            "--token-cache-max-size=200",
            "--token-cache-max-duration=30m",
            "--default-service-account=image-reflector",
        ]);
        assert_eq!(o.runtime.concurrent, 8);
        assert_eq!(o.storage_path, PathBuf::from("/var/lib/irc"));
        assert_eq!(o.storage_compression_threshold(), 128 * 1024);
        assert_eq!(o.gc_interval(), None);
        assert_eq!(o.requeue_dependency, Duration::from_secs(10));
        assert!(o.no_cross_namespace_refs && !o.runtime.watch_all_namespaces);
        assert!(!o.runtime.leader_election_release_on_cancel);
        assert_eq!(o.runtime.log_encoding, LogEncoding::Console);
        assert!(o.feature_gates.object_level_workload_identity);
        assert_eq!(
            o.feature_gates
                .without_effect
                .iter()
                .map(|(gate, _)| *gate)
                .collect::<Vec<_>>(),
            ["CacheSecretsAndConfigMaps", "FluxStorage"]
        );
        assert_eq!(
            o.without_effect.set(),
            [
                "--kube-api-qps",
                "--kube-api-burst",
                "--storage-value-log-file-size",
                "--watch-configs-label-selector",
                "--token-cache-max-size",
                "--token-cache-max-duration",
            ]
        );
        assert_eq!(o.validate(), Ok(()));
        assert!(
            o.runtime
                .lease_name(&IMAGE_REPOSITORY)
                .starts_with("image-reflector-controller-leader-election-")
        );
    }

    #[test]
    fn unknown_and_removed_flags_are_refused() {
        // The autologin flags were removed in v1.0: Flux v1.2 refuses them too.
        for flag in [
            "--aws-autologin-for-ecr",
            "--gcp-autologin-for-gcr",
            "--azure-autologin-for-acr",
            "--no-such-flag=1",
        ] {
            let err = try_parse(&[flag]).unwrap_err();
            assert!(err.contains("unexpected argument"), "{flag}: {err}");
        }
    }

    #[test]
    fn bad_values_name_the_flag_or_the_value() {
        for (arg, expected) in [
            (
                "--storage-compression-threshold=0",
                "--storage-compression-threshold",
            ),
            ("--gc-interval=65536", "--gc-interval"),
            ("--requeue-dependency=soon", "invalid duration 'soon'"),
            (
                "--feature-gates=Unknown=true",
                "unrecognized feature gate: Unknown",
            ),
            ("--feature-gates=FluxStorage=maybe", "FluxStorage=maybe"),
            ("--no-cross-namespace-refs=yes", "invalid boolean 'yes'"),
        ] {
            let err = try_parse(&[arg]).unwrap_err();
            assert!(err.contains(expected), "{arg}: {err}");
        }
    }

    #[test]
    fn a_default_service_account_needs_the_workload_identity_gate() {
        let o = parse(&["--default-service-account=irc"]);
        let err = o.validate().unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot set default service accounts when the feature gate ObjectLevelWorkloadIdentity is not enabled"),
            "{err}"
        );
        let o = parse(&[
            "--default-service-account=irc",
            "--feature-gates=ObjectLevelWorkloadIdentity=true",
        ]);
        assert_eq!(o.validate(), Ok(()));
    }

    #[test]
    fn help_lists_the_flags_users_set() {
        let help = Cli::command().render_long_help().to_string();
        for flag in [
            "--metrics-addr",
            "--events-addr",
            "--health-addr",
            "--storage-path",
            "--storage-compression-threshold",
            "--gc-interval",
            "--concurrent",
            "--requeue-dependency",
            "--log-encoding",
            "--log-level",
            "--enable-leader-election",
            "--leader-election-release-on-cancel",
            "--leader-election-lease-duration",
            "--leader-election-renew-deadline",
            "--leader-election-retry-period",
            "--no-cross-namespace-refs",
            "--min-retry-delay",
            "--max-retry-delay",
            "--feature-gates",
            "--watch-all-namespaces",
            "--watch-label-selector",
            "--default-service-account",
        ] {
            assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
        }
        // Those without effect are accepted but not advertised.
        assert!(!help.contains("--kube-api-qps"), "{help}");
    }
}
