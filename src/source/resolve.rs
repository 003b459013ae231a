//! Finding the source object a Kustomization points at and reading its artifact.

use kube::api::{Api, DynamicObject};
use kube::{Client, ResourceExt};

use super::SourceError;
use crate::api::kustomization::{Kustomization, SourceKind, given};
use crate::api::source::{Artifact, SOURCE_GROUP, artifact_of};

/// The source object behind `spec.sourceRef` and its current artifact.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedSource {
    pub kind: SourceKind,
    pub namespace: String,
    pub name: String,
    /// The source object's, for the events that relate to it.
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub artifact: Artifact,
}

/// What the controller's flags let a sourceRef point at.
#[derive(Clone, Copy, Debug, Default)]
pub struct SourceAccess {
    /// `--no-cross-namespace-refs`.
    pub no_cross_namespace_refs: bool,
    /// Feature gate `ExternalArtifact` (off by default, as in Flux).
    pub external_artifact: bool,
}

/// The namespace `spec.sourceRef` points into, checked against the access rules.
/// Pure: the rules apply before anything is read.
pub(crate) fn source_namespace(ks: &Kustomization, access: SourceAccess) -> Result<String, SourceError> {
    let own = ks.namespace().unwrap_or_default();
    let source = &ks.spec.source_ref;
    // `namespace: ""` is the Kustomization's own, as an absent one: never a way around the lock.
    let namespace = given(source.namespace.as_deref()).unwrap_or(&own).to_string();
    if access.no_cross_namespace_refs && namespace != own {
        return Err(SourceError::CrossNamespaceBlocked {
            kind: source.kind.as_str(),
            namespace,
            name: source.name.clone(),
        });
    }
    if source.kind == SourceKind::ExternalArtifact && !access.external_artifact {
        return Err(SourceError::ExternalArtifactDisabled {
            namespace,
            name: source.name.clone(),
        });
    }
    Ok(namespace)
}

/// Reads the source object (`source.toolkit.fluxcd.io/v1`, whatever `sourceRef.apiVersion`
/// says, as Flux does) and its `status.artifact`.
pub async fn get_artifact(
    client: &Client,
    ks: &Kustomization,
    access: SourceAccess,
) -> Result<ResolvedSource, SourceError> {
    get_artifact_cached(client, ks, access, &NoCache).await
}

/// The source objects a pass may read without a request.
pub(crate) trait CachedSources {
    /// The object, when the cache can vouch that it is current.
    fn get(&self, kind: SourceKind, namespace: &str, name: &str) -> Option<DynamicObject>;
    /// What the API answered when the cache could not vouch: the cache must never answer with
    /// an older state of that object afterwards.
    fn read(&self, kind: SourceKind, object: &DynamicObject);
    /// How a missing source is named: as a watch cache names it, by its Kind
    /// (`GitRepository.source.toolkit.fluxcd.io "app" not found`, Flux's text), unless the
    /// reads go to the API, whose own text (`api_text`, by the plural resource) is kept.
    fn not_found(&self, kind: SourceKind, name: &str, _api_text: String) -> String {
        format!("{}.{SOURCE_GROUP} \"{name}\" not found", kind.as_str())
    }
}

struct NoCache;

impl CachedSources for NoCache {
    fn get(&self, _: SourceKind, _: &str, _: &str) -> Option<DynamicObject> {
        None
    }
    fn read(&self, _: SourceKind, _: &DynamicObject) {}
    fn not_found(&self, _: SourceKind, _: &str, api_text: String) -> String {
        api_text
    }
}

/// [`get_artifact`], taking the source object from `cache` when it vouches for it, so that a
/// watch's store spares the read.
pub(crate) async fn get_artifact_cached(
    client: &Client,
    ks: &Kustomization,
    access: SourceAccess,
    cache: &impl CachedSources,
) -> Result<ResolvedSource, SourceError> {
    let namespace = source_namespace(ks, access)?;
    let kind = ks.spec.source_ref.kind;
    let name = ks.spec.source_ref.name.clone();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &kind.api_resource());
    let read = match cache.get(kind, &namespace, &name) {
        Some(object) => Ok(object),
        None => api.get(&name).await.inspect(|object| cache.read(kind, object)),
    };
    let object = match read {
        Ok(object) => object,
        Err(kube::Error::Api(status)) if status.code == 404 => {
            return Err(SourceError::SourceNotFound {
                kind: kind.as_str(),
                namespace,
                message: cache.not_found(kind, &name, status.message),
                name,
            });
        }
        Err(source) => {
            return Err(SourceError::SourceUnreadable {
                namespace,
                name,
                source,
            });
        }
    };
    let artifact = match artifact_of(&object) {
        Ok(Some(artifact)) => artifact,
        Ok(None) => {
            return Err(SourceError::NoArtifact {
                kind: kind.as_str(),
                namespace,
                name,
            });
        }
        Err(source) => {
            return Err(SourceError::InvalidArtifact {
                namespace,
                name,
                source,
            });
        }
    };
    Ok(ResolvedSource {
        kind,
        namespace,
        name,
        uid: object.metadata.uid.clone(),
        resource_version: object.metadata.resource_version.clone(),
        artifact,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StepError;

    fn kustomization(source_ref: serde_json::Value) -> Kustomization {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "team-a"},
            "spec": {"interval": "5m", "prune": true, "sourceRef": source_ref}
        }))
        .unwrap()
    }

    const BLOCKED: SourceAccess = SourceAccess {
        no_cross_namespace_refs: true,
        external_artifact: false,
    };

    #[test]
    fn external_artifacts_need_their_gate() {
        let ks = kustomization(serde_json::json!({"kind": "ExternalArtifact", "name": "bundle"}));
        let err = source_namespace(&ks, SourceAccess::default()).unwrap_err();
        // Flux: AccessDenied, terminal, with the gate named.
        assert_eq!(
            err.to_string(),
            "can't access 'ExternalArtifact/team-a/bundle', ExternalArtifact feature gate is disabled"
        );
        assert_eq!(err.reason(), "AccessDenied");
        assert!(err.is_terminal());
        let access = SourceAccess {
            external_artifact: true,
            ..SourceAccess::default()
        };
        assert_eq!(source_namespace(&ks, access).unwrap(), "team-a");
    }

    #[test]
    fn the_namespace_defaults_to_the_kustomizations() {
        let ks = kustomization(serde_json::json!({"kind": "GitRepository", "name": "repo"}));
        assert_eq!(source_namespace(&ks, BLOCKED).unwrap(), "team-a");
        for own in ["team-a", ""] {
            let ks =
                kustomization(serde_json::json!({"kind": "GitRepository", "name": "repo", "namespace": own}));
            assert_eq!(source_namespace(&ks, BLOCKED).unwrap(), "team-a", "{own:?}");
        }
    }

    #[test]
    fn cross_namespace_refs_are_allowed_unless_blocked() {
        let ks = kustomization(
            serde_json::json!({"kind": "OCIRepository", "name": "repo", "namespace": "flux-system"}),
        );
        assert_eq!(
            source_namespace(&ks, SourceAccess::default()).unwrap(),
            "flux-system"
        );
        let err = source_namespace(&ks, BLOCKED).unwrap_err();
        // Flux: acl.AccessDeniedError, reason AccessDenied, terminal.
        assert_eq!(
            err.to_string(),
            "can't access 'OCIRepository/flux-system/repo', cross-namespace references have been blocked"
        );
        assert_eq!(err.reason(), "AccessDenied");
        assert!(err.is_terminal());
    }
}
