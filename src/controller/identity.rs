//! Who applies a Kustomization's objects: the controller itself, an impersonated ServiceAccount
//! (`spec.serviceAccountName` or `--default-service-account`), or a remote cluster from
//! `spec.kubeConfig.secretRef` (a kubeconfig, checked by [`super::kubeconfig`]) or
//! `spec.kubeConfig.configMapRef` (a ServiceAccount token, [`super::workload`]), optionally
//! impersonating there too. One decision, made here.
//!
//! Each identity gets its own client, kind resolver and applier, cached between passes: an
//! impersonated or remote Kustomization keeps its discovery cache and its no-op fingerprints
//! like one applied with the controller's identity. The cache is bounded and forgets
//! identities unused for a while.
//!
//! Sources, dependencies, substitution ConfigMaps/Secrets and the kubeconfig Secret or ConfigMap
//! are always read with the controller's identity; applied objects, and every read of them
//! (health checks, CEL expressions), go through these tools.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flux_runtime::client::{RequestCounts, counted_client};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::api::Api;
use kube::config::KubeConfigOptions;
use kube::{Client, Config, ResourceExt};
use sha2::{Digest, Sha256};

use super::identity_error::IdentityError;
use super::kubeconfig::{self, KubeconfigPolicy};
use super::workload_identity::{self as workload, WorkloadCluster, WorkloadPolicy};
use crate::api::Kustomization;
use crate::api::kustomization::given;
use crate::applier::{Applier, ApplierOptions, LiveWatches};
use crate::health::HealthWatches;
use crate::kube_ext::ResourceResolver;

/// Keys tried, in order, when `secretRef.key` is not set.
const KUBECONFIG_KEYS: [&str; 2] = ["value", "value.yaml"];

/// Identities kept at most; the least recently used one goes first.
const CAPACITY: usize = 256;

/// An identity unused for this long is forgotten (its next pass is a full run).
const IDLE: Duration = Duration::from_secs(3600);

/// Who applies: the key of the tools cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Identity {
    /// `system:serviceaccount:<namespace>:<name>` on the controller's cluster.
    ServiceAccount { user: String },
    /// A remote cluster (by the digest of its kubeconfig bytes or of its ConfigMap's settings,
    /// so an edited Secret or ConfigMap is a new identity), with the user to impersonate there.
    /// The namespace is part of it: a ConfigMap's token is minted for a ServiceAccount of the
    /// Kustomization's namespace, so equal ConfigMaps in two namespaces are two identities.
    TargetCluster {
        namespace: String,
        kubeconfig: String,
        user: Option<String>,
    },
}

/// The client, kind resolver and applier of one identity.
pub(crate) struct Tools {
    pub resolver: ResourceResolver,
    pub applier: Applier,
    /// The health waits' shared watches, on this identity's client.
    pub health: HealthWatches,
}

impl Tools {
    /// `watches` are the shared metadata watches of the same cluster, if any.
    fn new(client: Client, options: ApplierOptions, watches: Option<&Arc<LiveWatches>>) -> Self {
        let resolver = ResourceResolver::new(client);
        let applier = Applier::new(resolver.clone(), options);
        Self {
            applier: match watches {
                Some(watches) => applier.with_live_watches(watches.clone()),
                None => applier,
            },
            health: HealthWatches::new(resolver.clone()),
            resolver,
        }
    }

    pub fn client(&self) -> &Client {
        self.resolver.client()
    }
}

struct Cached {
    tools: Arc<Tools>,
    used: Instant,
    /// When its credentials (a requested token) stop being valid.
    expires: Option<Instant>,
}

/// Where a remote cluster's client comes from.
enum TargetCluster {
    Kubeconfig {
        secret: String,
        bytes: Vec<u8>,
    },
    Workload {
        config_map: String,
        cluster: WorkloadCluster,
    },
}

impl TargetCluster {
    fn digest(&self) -> String {
        match self {
            Self::Kubeconfig { bytes, .. } => hex::encode(Sha256::digest(bytes)),
            Self::Workload { cluster, .. } => cluster.digest(),
        }
    }
}

/// Decides the identity of each Kustomization and hands out its cached tools.
pub(crate) struct Identities {
    own: Arc<Tools>,
    config: Config,
    counts: RequestCounts,
    /// `--default-service-account`, as given ("" is none).
    default_service_account: String,
    policy: KubeconfigPolicy,
    /// What `configMapRef` may mint tokens for; nothing by default.
    workload: WorkloadPolicy,
    cache: Mutex<HashMap<Identity, Cached>>,
    /// The controller's cluster's shared metadata watches: read for every identity there (with
    /// the controller's own permissions), never for a remote cluster.
    live: Option<Arc<LiveWatches>>,
}

impl Identities {
    /// `client` is the controller's own (built from `config`, counted into `counts`); every
    /// client made for another identity is counted there too.
    pub fn new(
        client: Client,
        config: Config,
        counts: RequestCounts,
        default_service_account: &str,
        policy: KubeconfigPolicy,
        options: ApplierOptions,
    ) -> Self {
        Self {
            own: Arc::new(Tools::new(client, options, None)),
            config,
            counts,
            default_service_account: default_service_account.to_string(),
            policy,
            workload: WorkloadPolicy::default(),
            cache: Mutex::default(),
            live: None,
        }
    }

    /// Lets `configMapRef` mint tokens as `policy` allows (the gate and the allow-lists).
    pub(crate) fn with_workload_policy(mut self, policy: WorkloadPolicy) -> Self {
        self.workload = policy;
        self
    }

    /// Lets the fast path of every identity on the controller's cluster read `watches`.
    pub(crate) fn with_live_watches(mut self, watches: Arc<LiveWatches>) -> Self {
        let options = self.own.applier.options().clone();
        self.own = Arc::new(Tools::new(self.own.client().clone(), options, Some(&watches)));
        self.live = Some(watches);
        self
    }

    /// The ServiceAccount this Kustomization acts as, if any: its own, else the default.
    fn service_account<'a>(&'a self, ks: &'a Kustomization) -> Option<&'a str> {
        service_account(
            ks.spec.service_account_name.as_deref(),
            &self.default_service_account,
        )
    }

    /// The tools to apply, prune and health-check this Kustomization's objects with.
    pub(crate) async fn for_kustomization(&self, ks: &Kustomization) -> Result<Arc<Tools>, IdentityError> {
        let namespace = ks.namespace().unwrap_or_default();
        let user = self
            .service_account(ks)
            .map(|sa| impersonated_user(&namespace, sa));
        let remote = self.target_cluster(ks, &namespace).await?;
        let Some(identity) = identity(&namespace, remote.as_ref(), user.clone()) else {
            return Ok(self.own.clone());
        };
        if let Some(tools) = self.cached(&identity) {
            return Ok(tools);
        }
        let (mut config, expires) = match &remote {
            Some(TargetCluster::Kubeconfig { secret, bytes }) => {
                (target_cluster_config(secret, bytes, self.policy).await?, None)
            }
            Some(TargetCluster::Workload { config_map, cluster }) => {
                let (token, valid) = cluster.token(self.own.client(), &namespace).await?;
                // Renewed well before it expires: a pass may run for a while with these tools.
                let expires = Instant::now() + valid.mul_f32(0.75);
                (cluster.config(config_map, &token)?, Some(expires))
            }
            None => (self.config.clone(), None),
        };
        config.auth_info.impersonate = user;
        let client = counted_client(config, &self.counts).map_err(IdentityError::Build)?;
        let live = if remote.is_none() {
            self.live.as_ref()
        } else {
            None
        };
        let tools = Arc::new(Tools::new(client, self.own.applier.options().clone(), live));
        self.keep(identity, tools.clone(), expires);
        Ok(tools)
    }

    /// The remote cluster `spec.kubeConfig` names, read with the controller's identity.
    async fn target_cluster(
        &self,
        ks: &Kustomization,
        namespace: &str,
    ) -> Result<Option<TargetCluster>, IdentityError> {
        let Some(kube_config) = ks.spec.kube_config.as_ref() else {
            return Ok(None);
        };
        if let Some(secret_ref) = &kube_config.secret_ref {
            let secret_name = format!("{namespace}/{}", secret_ref.name);
            let secret = Api::<Secret>::namespaced(self.own.client().clone(), namespace)
                .get(&secret_ref.name)
                .await
                .map_err(|e| IdentityError::ReadSecret(secret_name.clone(), e))?;
            let keys: Vec<&str> = match given(secret_ref.key.as_deref()) {
                Some(key) => vec![key],
                None => KUBECONFIG_KEYS.to_vec(),
            };
            let data = secret.data.unwrap_or_default();
            let bytes = keys
                .iter()
                .find_map(|key| data.get(*key))
                .ok_or_else(|| IdentityError::MissingKey(secret_name.clone(), keys[0].to_string()))?;
            return Ok(Some(TargetCluster::Kubeconfig {
                secret: secret_name,
                bytes: bytes.0.clone(),
            }));
        }
        let Some(config_map_ref) = &kube_config.config_map_ref else {
            return Ok(None);
        };
        let config_map = format!("{namespace}/{}", config_map_ref.name);
        let data = Api::<ConfigMap>::namespaced(self.own.client().clone(), namespace)
            .get(&config_map_ref.name)
            .await
            .map_err(|e| IdentityError::ReadConfigMap(config_map.clone(), e))?
            .data
            .unwrap_or_default();
        let cluster = workload::from_config_map(&config_map, &data)?;
        self.workload.check(&config_map, &cluster)?;
        Ok(Some(TargetCluster::Workload { config_map, cluster }))
    }

    /// Whether the ServiceAccount this Kustomization impersonates exists. Deletion skips pruning
    /// when it does not, rather than failing forever.
    pub(crate) async fn service_account_exists(&self, ks: &Kustomization) -> Result<bool, kube::Error> {
        let Some(sa) = self.service_account(ks) else {
            return Ok(true);
        };
        let namespace = ks.namespace().unwrap_or_default();
        Ok(
            Api::<ServiceAccount>::namespaced(self.own.client().clone(), &namespace)
                .get_opt(sa)
                .await?
                .is_some(),
        )
    }

    fn cached(&self, identity: &Identity) -> Option<Arc<Tools>> {
        let mut cache = self.cache.lock().expect("identity cache lock");
        let now = Instant::now();
        cache.retain(|_, c| now.duration_since(c.used) < IDLE && c.expires.is_none_or(|e| now < e));
        let cached = cache.get_mut(identity)?;
        cached.used = now;
        Some(cached.tools.clone())
    }

    fn keep(&self, identity: Identity, tools: Arc<Tools>, expires: Option<Instant>) {
        let mut cache = self.cache.lock().expect("identity cache lock");
        // Two passes of the same identity may race to build it: the first one kept wins.
        if cache.contains_key(&identity) {
            return;
        }
        if cache.len() >= CAPACITY
            && let Some(oldest) = cache.iter().min_by_key(|(_, c)| c.used).map(|(k, _)| k.clone())
        {
            cache.remove(&oldest);
        }
        cache.insert(
            identity,
            Cached {
                tools,
                used: Instant::now(),
                expires,
            },
        );
    }

    #[cfg(test)]
    fn cached_identities(&self) -> usize {
        self.cache.lock().expect("identity cache lock").len()
    }
}

/// The cache key of who applies; `None` is the controller itself.
fn identity(namespace: &str, remote: Option<&TargetCluster>, user: Option<String>) -> Option<Identity> {
    match (remote, user) {
        (None, None) => None,
        (None, Some(user)) => Some(Identity::ServiceAccount { user }),
        (Some(remote), user) => Some(Identity::TargetCluster {
            namespace: namespace.to_string(),
            kubeconfig: remote.digest(),
            user,
        }),
    }
}

/// The ServiceAccount to impersonate, if any: `spec.serviceAccountName`, else the operator's
/// `--default-service-account`. An empty name is not given at either level (as in Flux), so a
/// tenant's `serviceAccountName: ""` gets the default like an absent one and can never mean
/// "no impersonation", the controller's own identity. Every path that impersonates (this
/// cluster, a remote one, the deletion check) decides here.
fn service_account<'a>(spec: Option<&'a str>, default: &'a str) -> Option<&'a str> {
    given(spec).or(given(Some(default)))
}

/// The user name Kubernetes gives a ServiceAccount.
fn impersonated_user(namespace: &str, service_account: &str) -> String {
    format!("system:serviceaccount:{namespace}:{service_account}")
}

/// A remote cluster's config from a kubeconfig the tenant wrote; see [`kubeconfig::checked`].
async fn target_cluster_config(
    secret_name: &str,
    bytes: &[u8],
    policy: KubeconfigPolicy,
) -> Result<Config, IdentityError> {
    let kubeconfig =
        kubeconfig::checked(bytes, policy).map_err(|e| IdentityError::Refused(secret_name.to_string(), e))?;
    // What can fail here is decoding the inline data or the server URL; kube's messages name
    // the step, not the value.
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| IdentityError::InvalidKubeConfig(secret_name.to_string(), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Retry, StepError};

    fn ks(name: &str, service_account: Option<&str>) -> Kustomization {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"interval": "5m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"},
                "serviceAccountName": service_account}
        }))
        .unwrap()
    }

    /// Finding 1 of issue 28: with `--default-service-account=default`, a Kustomization with
    /// `serviceAccountName: ""` was applied with the controller's own identity (the default
    /// was only taken when the field was absent, then "" filtered to "no impersonation"), so a
    /// tenant's ClusterRoleBinding to cluster-admin was applied. "" is absent, as in Flux.
    #[test]
    fn an_empty_service_account_name_is_not_given() {
        let table = [
            // (spec.serviceAccountName, --default-service-account, impersonated)
            (None, "", None),
            (Some(""), "", None),
            (None, "default", Some("default")),
            (Some(""), "default", Some("default")),
            (Some("deployer"), "default", Some("deployer")),
            (Some("deployer"), "", Some("deployer")),
        ];
        for (spec, default, impersonated) in table {
            assert_eq!(
                service_account(spec, default),
                impersonated,
                "serviceAccountName {spec:?}, default {default:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_empty_service_account_name_impersonates_the_default() {
        let identities = identities("default");
        let empty = ks("a", Some(""));
        assert_eq!(identities.service_account(&empty), Some("default"));
        let tools = identities.for_kustomization(&empty).await.unwrap();
        assert!(
            !Arc::ptr_eq(&tools, &identities.own),
            "never the controller's own identity"
        );
        let absent = identities.for_kustomization(&ks("b", None)).await.unwrap();
        assert!(
            Arc::ptr_eq(&tools, &absent),
            "the same identity as without the field"
        );
    }

    /// Finding 9 of issue 28: the cache key of a remote cluster was the digest of its settings
    /// and the user, so tenant B's Kustomization with a ConfigMap equal to tenant A's got the
    /// tools holding the token of A's ServiceAccount.
    #[test]
    fn equal_remote_settings_in_two_namespaces_are_two_identities() {
        let data: std::collections::BTreeMap<String, String> = [
            ("provider", "generic"),
            ("address", "https://remote:6443"),
            ("serviceAccountName", "deployer"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let remote = |namespace: &str| {
            let config_map = format!("{namespace}/remote");
            let cluster = workload::from_config_map(&config_map, &data).unwrap();
            TargetCluster::Workload { config_map, cluster }
        };
        let (a, b) = (remote("team-a"), remote("team-b"));
        assert_eq!(a.digest(), b.digest(), "the same settings");
        assert_ne!(
            identity("team-a", Some(&a), None),
            identity("team-b", Some(&b), None)
        );
        assert_eq!(
            identity("team-a", Some(&a), None),
            identity("team-a", Some(&a), None)
        );
        assert_eq!(identity("team-a", None, None), None);
    }

    #[test]
    fn the_impersonated_user_is_the_service_accounts() {
        assert_eq!(
            impersonated_user("team-a", "deployer"),
            "system:serviceaccount:team-a:deployer"
        );
    }

    /// A config that never connects: building clients and tools sends no request.
    fn identities(default_service_account: &str) -> Identities {
        let config = Config::new("https://127.0.0.1:1".parse().unwrap());
        let counts = RequestCounts::default();
        let client = counted_client(config.clone(), &counts).unwrap();
        Identities::new(
            client,
            config,
            counts,
            default_service_account,
            KubeconfigPolicy::default(),
            ApplierOptions::default(),
        )
    }

    #[tokio::test]
    async fn one_set_of_tools_per_identity_kept_between_passes() {
        let identities = identities("fallback");
        let first = identities.for_kustomization(&ks("a", None)).await.unwrap();
        let again = identities.for_kustomization(&ks("a", None)).await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the same identity keeps its tools");
        let same_sa = identities
            .for_kustomization(&ks("b", Some("fallback")))
            .await
            .unwrap();
        assert!(
            Arc::ptr_eq(&first, &same_sa),
            "tools belong to the identity, not the object"
        );
        let other = identities
            .for_kustomization(&ks("c", Some("deployer")))
            .await
            .unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        assert!(!Arc::ptr_eq(&first, &identities.own));
        assert_eq!(identities.cached_identities(), 2);
    }

    #[tokio::test]
    async fn without_impersonation_the_controllers_own_tools_are_used() {
        let identities = identities("");
        let tools = identities.for_kustomization(&ks("a", None)).await.unwrap();
        assert!(Arc::ptr_eq(&tools, &identities.own));
        assert_eq!(identities.cached_identities(), 0);
    }

    #[tokio::test]
    async fn the_cache_is_bounded_and_forgets_the_least_recently_used() {
        let identities = identities("");
        let tools = |sa: String| {
            let identities = &identities;
            async move { identities.for_kustomization(&ks("a", Some(&sa))).await.unwrap() }
        };
        let first = tools("sa-0".into()).await;
        let second = tools("sa-1".into()).await;
        for i in 2..CAPACITY + 1 {
            tools(format!("sa-{i}")).await;
        }
        assert_eq!(identities.cached_identities(), CAPACITY);
        assert!(
            !Arc::ptr_eq(&first, &tools("sa-0".into()).await),
            "sa-0 was evicted"
        );
        assert!(!Arc::ptr_eq(&second, &tools("sa-1".into()).await), "then sa-1");
        assert_eq!(identities.cached_identities(), CAPACITY);
    }

    #[tokio::test]
    async fn tools_with_an_expiring_token_are_dropped_when_it_expires() {
        let identities = identities("");
        let remote = |n: &str| Identity::TargetCluster {
            namespace: "team-a".into(),
            kubeconfig: n.into(),
            user: None,
        };
        let tools = identities.own.clone();
        identities.keep(remote("expired"), tools.clone(), Some(Instant::now()));
        identities.keep(remote("valid"), tools.clone(), Some(Instant::now() + IDLE));
        identities.keep(remote("no-token"), tools, None);
        assert!(identities.cached(&remote("expired")).is_none());
        assert!(identities.cached(&remote("valid")).is_some());
        assert!(identities.cached(&remote("no-token")).is_some());
        assert_eq!(identities.cached_identities(), 2);
    }

    #[tokio::test]
    async fn refusals_name_the_secret_and_the_field() {
        let exec = r#"
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://remote:6443"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/steal}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"#;
        let strict = KubeconfigPolicy::default();
        let err = target_cluster_config("team-a/remote", exec.as_bytes(), strict)
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("the kubeconfig in secret 'team-a/remote' sets 'exec'"),
            "{message}"
        );
        assert!(!message.contains("/bin/steal"), "{message}");
        assert_eq!(err.retry(), Retry::Terminal);
        let err = target_cluster_config("team-a/remote", b"{not yaml", strict)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the kubeconfig in secret 'team-a/remote' is not a valid kubeconfig"
        );
        let allowed = KubeconfigPolicy {
            allow_exec: true,
            ..strict
        };
        assert!(
            target_cluster_config("team-a/remote", exec.as_bytes(), allowed)
                .await
                .is_ok()
        );
    }
}
