//! Flags of `kustomize-controller run`, compatible with Flux's: the runtime's, which every
//! Flux controller has, and the Kustomization controller's own.

use std::time::Duration;

use flux_runtime::options::{RuntimeOptions, go_bool, go_duration};

use super::gates::{self, FeatureGates};
use super::workload_identity::{WorkloadPolicy, normalized_address};

/// Everything `run` can be told.
#[derive(Clone, Debug, clap::Args)]
pub struct RunOptions {
    /// Logs, leader election, probes and metrics, events, retry delays, watch scope, jitter.
    #[command(flatten)]
    pub runtime: RuntimeOptions,
    /// The number of objects dry-run and applied in parallel within one stage. 16 (Flux: 4,
    /// and it applies one at a time): on a local API server a cold apply of 400 objects took 15 s
    /// at 4, 7.5 s at 16 and 6.6 s at 32, and 16 requests in flight per reconcile stay far below
    /// an API server's in-flight limits (hundreds).
    #[arg(long = "concurrent-ssa", default_value_t = 16)]
    pub concurrent_ssa: usize,
    /// The interval at which failing dependencies and missing artifacts are re-checked.
    #[arg(long = "requeue-dependency", default_value = "30s", value_parser = go_duration)]
    pub requeue_dependency: Duration,
    /// Refuse sourceRefs in another namespace.
    #[arg(long = "no-cross-namespace-refs", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    pub no_cross_namespace_refs: bool,
    /// Refuse remote Git bases of kustomizations (HTTP file resources are still fetched, as
    /// Flux does).
    #[arg(long = "no-remote-bases", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    pub no_remote_bases: bool,
    /// `--no-remote-bases-include-http`, `--no-remote-local-addresses`, `--remote-denied-cidrs`.
    #[command(flatten)]
    pub remote_lockdown: crate::remote::RemoteLockdownArgs,
    /// Let a remote kubeconfig run its `user.exec` credential plugin on the controller's host.
    #[arg(long = "insecure-kubeconfig-exec", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    pub insecure_kubeconfig_exec: bool,
    /// Let a remote kubeconfig turn off TLS verification (`insecure-skip-tls-verify`).
    #[arg(long = "insecure-kubeconfig-tls", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    pub insecure_kubeconfig_tls: bool,
    /// With the ObjectLevelWorkloadIdentity gate on, the only API server addresses a
    /// `kubeConfig.configMapRef` may name (comma-separated or repeated; empty: any).
    #[arg(long = "workload-identity-allowed-addresses", value_delimiter = ',', value_parser = allowed_address)]
    pub workload_identity_allowed_addresses: Vec<String>,
    /// With the ObjectLevelWorkloadIdentity gate on, the only token audiences a
    /// `kubeConfig.configMapRef` may ask for (comma-separated or repeated; empty: any).
    #[arg(long = "workload-identity-allowed-audiences", value_delimiter = ',')]
    pub workload_identity_allowed_audiences: Vec<String>,
    /// ServiceAccount impersonated by Kustomizations that name none.
    #[arg(long = "default-service-account", default_value = "")]
    pub default_service_account: String,
    /// ConfigMaps and Secrets matching this label selector, when a Kustomization reads them
    /// (substituteFrom, decryption, kubeConfig), trigger its reconciliation on change.
    #[arg(
        long = "watch-configs-label-selector",
        default_value = "reconcile.fluxcd.io/watch=Enabled"
    )]
    pub watch_configs_label_selector: String,
    /// Download retries of an artifact (Flux's --http-retry), 5s to 30s apart, then every
    /// retryInterval. Retries are requeues: a failing source server holds no worker.
    #[arg(long = "artifact-fetch-retries", alias = "http-retry", default_value_t = 9)]
    pub artifact_fetch_retries: u32,
    /// Flux's feature gates, `Name=true,Name=false`.
    #[arg(long = "feature-gates", default_value = "", value_parser = gates::parse)]
    pub feature_gates: FeatureGates,
    /// Further field managers whose fields are taken over like kubectl's. Repeatable.
    #[arg(long = "override-manager")]
    pub override_managers: Vec<String>,
    /// Flux's flags this controller accepts so that Flux's Deployment arguments start it, but
    /// that change nothing here (client-side throttling, SOPS, default workload identities, token cache).
    #[command(flatten)]
    pub without_effect: FlagsWithoutEffect,
    /// Largest artifact accepted, in bytes.
    #[arg(long = "max-artifact-size", default_value_t = 512 << 20)]
    pub max_artifact_size: u64,
    /// Kinds applied in their own stage before the rest, as `group/Kind` (core: `Kind`).
    #[arg(long = "custom-apply-stage-kinds", value_delimiter = ',', default_value = "")]
    pub custom_apply_stage_kinds: Vec<String>,
    /// Even when revision and build output are unchanged, compare every object with the
    /// cluster at least this often (drift detection).
    #[arg(long = "full-sync-interval", default_value = "1h", value_parser = go_duration)]
    pub full_sync_interval: Duration,
    /// A Secret in the runtime namespace whose `*.agekey` entries decrypt for every
    /// Kustomization with `spec.decryption` but no `secretRef`.
    #[arg(long = "sops-age-secret")]
    pub sops_age_secret: Option<String>,
}

/// See [`RunOptions::without_effect`]; [`FlagsWithoutEffect::set`] names those given.
#[derive(Clone, Debug, clap::Args)]
pub struct FlagsWithoutEffect {
    /// kube-rs does not throttle on the client; API Priority and Fairness governs.
    #[arg(long = "kube-api-qps", hide = true)]
    kube_api_qps: Option<f32>,
    #[arg(long = "kube-api-burst", hide = true)]
    kube_api_burst: Option<u32>,
    /// Vault login allow-lists are not supported (nor is the Vault key service).
    #[arg(long = "sops-vault-configmap", hide = true)]
    sops_vault_configmap: Option<String>,
    #[arg(long = "default-decryption-service-account", hide = true)]
    default_decryption_service_account: Option<String>,
    /// A kubeconfig ConfigMap must name its ServiceAccount (`serviceAccountName`); no default.
    #[arg(long = "default-kubeconfig-service-account", hide = true)]
    default_kubeconfig_service_account: Option<String>,
    #[arg(long = "token-cache-max-size", hide = true)]
    token_cache_max_size: Option<u32>,
    #[arg(long = "token-cache-max-duration", hide = true, value_parser = go_duration)]
    token_cache_max_duration: Option<Duration>,
    /// Nothing is taken over before the dry-run here; `--override-manager` managers are
    /// taken over when applying.
    #[arg(long = "override-manager-before-dry-run", hide = true)]
    override_managers_before_dry_run: Vec<String>,
    /// Flux 1.10's SPIFFE flags (names from github.com/fluxcd/pkg/spiffe): mTLS to the
    /// artifact and event servers and the SPIFFE Broker for object identities are not
    /// supported; artifacts and events go as the URLs say, workload identity is not used.
    #[arg(long = "authorized-artifact-server-spiffe-id", hide = true)]
    authorized_artifact_server_spiffe_ids: Vec<String>,
    #[arg(long = "authorized-event-server-spiffe-id", hide = true)]
    authorized_event_server_spiffe_ids: Vec<String>,
    #[arg(long = "spiffe-broker-endpoint", hide = true)]
    spiffe_broker_endpoint: Option<String>,
    #[arg(long = "spiffe-broker-id", hide = true)]
    spiffe_broker_ids: Vec<String>,
}

impl FlagsWithoutEffect {
    /// The flags given on the command line, for a startup warning.
    pub fn set(&self) -> Vec<&'static str> {
        [
            ("--kube-api-qps", self.kube_api_qps.is_some()),
            ("--kube-api-burst", self.kube_api_burst.is_some()),
            ("--sops-vault-configmap", self.sops_vault_configmap.is_some()),
            (
                "--default-decryption-service-account",
                self.default_decryption_service_account.is_some(),
            ),
            (
                "--default-kubeconfig-service-account",
                self.default_kubeconfig_service_account.is_some(),
            ),
            ("--token-cache-max-size", self.token_cache_max_size.is_some()),
            (
                "--token-cache-max-duration",
                self.token_cache_max_duration.is_some(),
            ),
            (
                "--override-manager-before-dry-run",
                !self.override_managers_before_dry_run.is_empty(),
            ),
            // Each counts when it would turn SPIFFE on in Flux: a repeatable ID given at all
            // (even empty), the endpoint non-empty.
            (
                "--authorized-artifact-server-spiffe-id",
                !self.authorized_artifact_server_spiffe_ids.is_empty(),
            ),
            (
                "--authorized-event-server-spiffe-id",
                !self.authorized_event_server_spiffe_ids.is_empty(),
            ),
            (
                "--spiffe-broker-endpoint",
                self.spiffe_broker_endpoint
                    .as_deref()
                    .is_some_and(|e| !e.is_empty()),
            ),
            ("--spiffe-broker-id", !self.spiffe_broker_ids.is_empty()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }
}

fn allowed_address(text: &str) -> Result<String, String> {
    normalized_address(text).ok_or_else(|| format!("'{text}' is not an http(s) URL"))
}

impl RunOptions {
    /// What `kubeConfig.configMapRef` may mint tokens for.
    pub(crate) fn workload_policy(&self) -> WorkloadPolicy {
        let given = |list: &[String]| list.iter().filter(|v| !v.is_empty()).cloned().collect();
        WorkloadPolicy {
            enabled: self.feature_gates.object_level_workload_identity,
            allowed_addresses: given(&self.workload_identity_allowed_addresses),
            allowed_audiences: given(&self.workload_identity_allowed_audiences),
        }
    }

    /// The custom stage kinds, without the empty entry an empty flag yields.
    pub(crate) fn custom_stage_kinds(&self) -> Vec<String> {
        self.custom_apply_stage_kinds
            .iter()
            .filter(|k| !k.is_empty())
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use sha2::Digest;

    use flux_runtime::telemetry::LogEncoding;

    use super::*;

    #[derive(Parser)]
    #[command(args_override_self = true)]
    struct Cli {
        #[command(flatten)]
        run: RunOptions,
    }

    fn parse(args: &[&str]) -> RunOptions {
        Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
            .unwrap()
            .run
    }

    #[test]
    fn defaults_are_fluxs() {
        let o = parse(&[]);
        assert_eq!(o.runtime.concurrent, 4);
        assert_eq!(o.requeue_dependency, Duration::from_secs(30));
        assert_eq!(o.runtime.interval_jitter_percentage, 5);
        assert!(o.runtime.watch_all_namespaces);
        assert_eq!(
            (o.runtime.metrics_addr.as_str(), o.runtime.health_addr.as_str()),
            (":8080", ":9440")
        );
        assert_eq!(o.runtime.leader_election_lease_duration, Duration::from_secs(35));
        assert_eq!(o.runtime.log_encoding, LogEncoding::Json);
        assert!(o.custom_stage_kinds().is_empty());
        assert_eq!(
            o.runtime.lease_name(&crate::controller::IDENTITY),
            "kustomize-controller-leader-election"
        );
    }

    #[test]
    fn flux_style_values_parse() {
        let o = parse(&[
            "--watch-all-namespaces=false",
            "--requeue-dependency=5s",
            "--custom-apply-stage-kinds=rbac.authorization.k8s.io/Role,ServiceAccount",
            "--watch-label-selector=sharding.fluxcd.io/key=shard1",
            "--http-retry=2",
        ]);
        assert!(!o.runtime.watch_all_namespaces);
        assert_eq!(o.requeue_dependency, Duration::from_secs(5));
        assert_eq!(
            o.custom_stage_kinds(),
            ["rbac.authorization.k8s.io/Role", "ServiceAccount"]
        );
        assert_eq!(o.artifact_fetch_retries, 2);
        // The lease name is Flux's plus the first 8 hex digits of sha256(selector).
        let expected = &hex::encode(sha2::Sha256::digest(b"sharding.fluxcd.io/key=shard1"))[..8];
        assert_eq!(
            o.runtime.lease_name(&crate::controller::IDENTITY),
            format!("kustomize-controller-leader-election-{expected}")
        );
    }

    #[test]
    fn a_flux_deployments_arguments_start_it() {
        // Every flag of Flux's kustomize-controller v1.10, as a platform team may
        // have set them.
        let o = parse(&[
            "--concurrent=10",
            "--concurrent-ssa=8",
            "--requeue-dependency=10s",
            "--http-retry=3",
            "--no-remote-bases=true",
            "--no-cross-namespace-refs=true",
            "--default-service-account=default",
            "--default-decryption-service-account=sops",
            "--default-kubeconfig-service-account=remote",
            "--sops-age-secret=sops-age",
            "--sops-vault-configmap=vault",
            "--override-manager=helm",
            "--override-manager=argocd",
            "--custom-apply-stage-kinds=Role",
            "--metrics-addr=:8080",
            "--health-addr=:9440",
            "--events-addr=http://notification-controller.flux-system.svc.cluster.local./",
            "--enable-leader-election",
            "--leader-election-lease-duration=35s",
            "--leader-election-renew-deadline=30s",
            "--leader-election-retry-period=5s",
            "--leader-election-release-on-cancel=true",
            "--watch-all-namespaces=true",
            "--watch-label-selector=sharding.fluxcd.io/key notin (shard1)",
            "--watch-configs-label-selector=reconcile.fluxcd.io/watch=Enabled",
            "--min-retry-delay=1s",
            "--max-retry-delay=5m",
            "--interval-jitter-percentage=10",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
            "--insecure-kubeconfig-exec",
            "--insecure-kubeconfig-tls=false",
            "--token-cache-max-size=200",
            "--token-cache-max-duration=30m",
            "--override-manager-before-dry-run=kubectl",
            "--log-level=debug",
            "--log-encoding=json",
            "--feature-gates=ExternalArtifact=true,MigrateAPIVersion=true",
            "--authorized-artifact-server-spiffe-id=spiffe://cluster.local/ns/flux-system/sa/source-controller",
            "--authorized-event-server-spiffe-id=spiffe://cluster.local/ns/flux-system/sa/notification-controller",
            "--spiffe-broker-endpoint=dns:///spire-broker.spire:8443",
            "--spiffe-broker-id=spiffe://cluster.local/spire/agent/k8s_psat/broker-cluster/",
        ]);
        assert_eq!(o.runtime.concurrent, 10);
        // Go's bool flags: bare means true, `=true` too.
        assert!(o.runtime.enable_leader_election && o.no_remote_bases && o.no_cross_namespace_refs);
        assert_eq!(
            (o.runtime.min_retry_delay, o.runtime.max_retry_delay),
            (Duration::from_secs(1), Duration::from_secs(300))
        );
        assert_eq!(o.override_managers, ["helm", "argocd"]);
        assert!(o.feature_gates.external_artifact && o.feature_gates.migrate_api_version);
        assert_eq!(o.without_effect.set().len(), 12);
        assert_eq!(o.sops_age_secret.as_deref(), Some("sops-age"));
        assert!(o.insecure_kubeconfig_exec && !o.insecure_kubeconfig_tls);
    }

    #[test]
    fn values_parse_the_ways_pflag_accepts_them() {
        let o = parse(&[
            // A value as the next argument.
            "--events-addr",
            "http://receiver/",
            "--concurrent",
            "6",
            // Go's Duration.String() output and a bare zero.
            "--leader-election-lease-duration=1m0s",
            "--requeue-dependency=0",
            "--max-retry-delay=+1h30m",
            // Repeated scalar flags: the last one wins.
            "--log-level=debug",
            "--log-level=error",
            // Bools: strconv.ParseBool spellings.
            "--watch-all-namespaces=F",
            "--no-remote-bases=1",
            "--override-manager-before-dry-run=kubectl",
            // An empty value.
            "--default-service-account=",
        ]);
        assert_eq!(o.runtime.events_addr, "http://receiver/");
        assert_eq!(o.runtime.concurrent, 6);
        assert_eq!(o.runtime.leader_election_lease_duration, Duration::from_secs(60));
        assert_eq!(o.requeue_dependency, Duration::ZERO);
        assert_eq!(o.runtime.max_retry_delay, Duration::from_secs(5400));
        assert_eq!(o.runtime.log_level, "error");
        assert!(!o.runtime.watch_all_namespaces && o.no_remote_bases);
        assert_eq!(o.default_service_account, "");
        assert_eq!(o.without_effect.set(), ["--override-manager-before-dry-run"]);
    }

    #[test]
    fn fluxs_spiffe_flags_are_accepted_and_named_in_the_warning() {
        let o = parse(&[
            // Repeatable, as pflag's StringArray: both values are taken.
            "--authorized-artifact-server-spiffe-id=spiffe://example.org/source-controller",
            "--authorized-artifact-server-spiffe-id=spiffe://example.org/source-watcher/",
            "--authorized-event-server-spiffe-id",
            "spiffe://example.org",
            "--spiffe-broker-endpoint=dns:///spire-broker.spire:8443",
            "--spiffe-broker-id=spiffe://example.org/spire/agent/k8s_psat/broker-cluster/",
        ]);
        assert_eq!(
            o.without_effect.set(),
            [
                "--authorized-artifact-server-spiffe-id",
                "--authorized-event-server-spiffe-id",
                "--spiffe-broker-endpoint",
                "--spiffe-broker-id",
            ]
        );
        assert_eq!(o.without_effect.authorized_artifact_server_spiffe_ids.len(), 2);
        // Flux turns the Broker on only for a non-empty endpoint; an empty one warns of nothing.
        let o = parse(&["--spiffe-broker-endpoint="]);
        assert!(o.without_effect.set().is_empty(), "{:?}", o.without_effect.set());
    }

    #[test]
    fn remote_lockdown_flags_parse() {
        let config = |o: &RunOptions| {
            let allow_git = !o.no_remote_bases;
            o.remote_lockdown.apply(crate::remote::RemoteConfig {
                allow_git,
                ..Default::default()
            })
        };
        let open = config(&parse(&[]));
        assert!(open.allow_git && open.allow_http_files);
        assert_eq!(open.denied, crate::remote::DeniedNetworks::default());
        // Alone, the HTTP flag changes nothing: it widens --no-remote-bases.
        assert!(config(&parse(&["--no-remote-bases-include-http"])).allow_http_files);
        let flux = config(&parse(&["--no-remote-bases=true"]));
        assert!(
            !flux.allow_git && flux.allow_http_files,
            "Flux fetches HTTP files"
        );
        let closed = config(&parse(&[
            "--no-remote-bases=true",
            "--no-remote-bases-include-http=true",
            "--no-remote-local-addresses",
            "--remote-denied-cidrs=10.0.0.0/8,fd00::/8",
        ]));
        assert!(!closed.allow_git && !closed.allow_http_files);
        let cidrs: Vec<_> = ["10.0.0.0/8", "fd00::/8"]
            .iter()
            .map(|c| crate::remote::Cidr::parse(c).unwrap())
            .collect();
        assert_eq!(closed.denied, crate::remote::DeniedNetworks::new(true, &cidrs));
        let err = Cli::try_parse_from(["run", "--remote-denied-cidrs=10.0.0.0/40"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("'10.0.0.0/40' is not a CIDR"), "{err}");
    }

    #[test]
    fn workload_identity_is_off_and_its_lists_parse() {
        assert_eq!(parse(&[]).workload_policy(), WorkloadPolicy::default());
        let o = parse(&[
            "--feature-gates=ObjectLevelWorkloadIdentity=true",
            "--workload-identity-allowed-addresses=https://A:6443/,https://b",
            "--workload-identity-allowed-addresses=https://c:443",
            "--workload-identity-allowed-audiences=remote",
        ]);
        assert_eq!(
            o.workload_policy(),
            WorkloadPolicy {
                enabled: true,
                allowed_addresses: vec!["https://a:6443".into(), "https://b".into(), "https://c".into()],
                allowed_audiences: vec!["remote".into()],
            }
        );
        let err = Cli::try_parse_from(["run", "--workload-identity-allowed-addresses=remote:6443"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("is not an http(s) URL"), "{err}");
    }

    #[test]
    fn bad_values_name_the_flag() {
        let err = Cli::try_parse_from(["run", "--interval-jitter-percentage=100"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--interval-jitter-percentage"), "{err}");
        let err = Cli::try_parse_from(["run", "--requeue-dependency=soon"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("invalid duration 'soon'"), "{err}");
        let err = Cli::try_parse_from(["run", "--feature-gates=Unknown=true"])
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("--feature-gates") && err.contains("unrecognized feature gate: Unknown"),
            "{err}"
        );
    }
}
