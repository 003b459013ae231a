//! Mapping `apiVersion` + `kind` to an API endpoint, with a cache: the kube client extension
//! the applier, the health waiter and the controller share. (The client's tower layers and the
//! leader's write fence are in `flux_runtime`.)

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersion;
use kube::discovery::{ApiGroup, Scope};

/// Where objects of one kind live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedKind {
    pub resource: ApiResource,
    pub namespaced: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("invalid apiVersion '{0}'")]
    InvalidApiVersion(String),
    /// The server does not serve the kind: typically a CRD that is not installed (yet).
    #[error("no matches for kind \"{kind}\" in version \"{api_version}\"")]
    UnknownKind { api_version: String, kind: String },
    #[error("discovery of {api_version} failed: {source}")]
    Discovery {
        api_version: String,
        #[source]
        source: kube::Error,
    },
}

/// Resolves kinds through API discovery, one request per group-version, then from memory.
/// Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct ResourceResolver {
    client: Client,
    cache: Arc<RwLock<HashMap<String, Arc<ApiGroup>>>>,
}

impl ResourceResolver {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Arc::default(),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Resolves `apiVersion` + `kind`. A kind missing from a cached group-version triggers one
    /// fresh discovery of that group-version, so CRDs installed since are found.
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<ResolvedKind, ResolveError> {
        if let Some(found) = self.cached(api_version, kind) {
            return Ok(found);
        }
        let gv: GroupVersion = api_version
            .parse()
            .map_err(|_| ResolveError::InvalidApiVersion(api_version.to_string()))?;
        let group = match kube::discovery::pinned_group(&self.client, &gv).await {
            Ok(group) => group,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(ResolveError::UnknownKind {
                    api_version: api_version.into(),
                    kind: kind.into(),
                });
            }
            Err(source) => {
                return Err(ResolveError::Discovery {
                    api_version: api_version.into(),
                    source,
                });
            }
        };
        self.cache
            .write()
            .expect("resolver cache lock")
            .insert(api_version.to_string(), Arc::new(group));
        self.cached(api_version, kind)
            .ok_or_else(|| ResolveError::UnknownKind {
                api_version: api_version.into(),
                kind: kind.into(),
            })
    }

    fn cached(&self, api_version: &str, kind: &str) -> Option<ResolvedKind> {
        let cache = self.cache.read().expect("resolver cache lock");
        let group = cache.get(api_version)?;
        let version = api_version.rsplit('/').next().unwrap_or(api_version);
        group
            .versioned_resources(version)
            .into_iter()
            .find(|(resource, _)| resource.kind == kind)
            .map(|(resource, caps)| ResolvedKind {
                resource,
                namespaced: caps.scope == Scope::Namespaced,
            })
    }

    /// Forgets everything, e.g. after CRDs were applied or deleted.
    pub(crate) fn invalidate(&self) {
        self.cache.write().expect("resolver cache lock").clear();
    }

    /// An API handle for objects of this kind in `namespace` (ignored for cluster-scoped kinds).
    pub async fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<(Api<DynamicObject>, ResolvedKind), ResolveError> {
        let resolved = self.resolve(api_version, kind).await?;
        let api = match (resolved.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &resolved.resource),
            _ => Api::all_with(self.client.clone(), &resolved.resource),
        };
        Ok((api, resolved))
    }
}
