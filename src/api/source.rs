//! Read-only views of Flux source objects: just enough to find and trust their artifact.

use std::collections::BTreeMap;

use kube::api::{ApiResource, DynamicObject};
use serde::{Deserialize, Serialize};

use super::kustomization::SourceKind;

/// The group every source kind lives in.
pub const SOURCE_GROUP: &str = "source.toolkit.fluxcd.io";
/// The version the controller reads, whatever `sourceRef.apiVersion` says (as Flux does).
pub const SOURCE_VERSION: &str = "v1";
/// The artifact metadata key holding the origin revision of OCI artifacts.
pub const ORIGIN_REVISION_KEY: &str = "org.opencontainers.image.revision";

/// `status.artifact` of a source object.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Where source-controller serves the tarball.
    pub url: String,
    /// Opaque revision, e.g. `main@sha1:<hex>`; compared by exact string equality.
    pub revision: String,
    /// `<algorithm>:<hex>` digest of the tarball.
    #[serde(default)]
    pub digest: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub size: Option<i64>,
    #[serde(default)]
    pub last_update_time: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

impl Artifact {
    /// The origin revision recorded as `lastAppliedOriginRevision`.
    pub fn origin_revision(&self) -> Option<&str> {
        self.metadata.get(ORIGIN_REVISION_KEY).map(String::as_str)
    }
}

impl SourceKind {
    /// The API resource to read this kind with.
    pub fn api_resource(self) -> ApiResource {
        let plural = match self {
            Self::GitRepository => "gitrepositories",
            Self::OCIRepository => "ocirepositories",
            Self::Bucket => "buckets",
            Self::ExternalArtifact => "externalartifacts",
        };
        ApiResource {
            group: SOURCE_GROUP.into(),
            version: SOURCE_VERSION.into(),
            api_version: format!("{SOURCE_GROUP}/{SOURCE_VERSION}"),
            kind: self.as_str().into(),
            plural: plural.into(),
        }
    }
}

/// Reads `status.artifact` of a source object. `Ok(None)` while the source has none yet.
pub fn artifact_of(source: &DynamicObject) -> Result<Option<Artifact>, serde_json::Error> {
    match source.data.get("status").and_then(|s| s.get("artifact")) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(artifact) => serde_json::from_value(artifact.clone()).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plural_names_match_source_controller() {
        let plurals: Vec<_> = [
            SourceKind::GitRepository,
            SourceKind::OCIRepository,
            SourceKind::Bucket,
            SourceKind::ExternalArtifact,
        ]
        .into_iter()
        .map(|k| k.api_resource().plural)
        .collect();
        assert_eq!(
            plurals,
            [
                "gitrepositories",
                "ocirepositories",
                "buckets",
                "externalartifacts"
            ]
        );
    }

    #[test]
    fn reads_the_artifact_and_its_origin_revision() {
        let source: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "OCIRepository",
            "metadata": {"name": "app", "namespace": "flux-system"},
            "status": {"artifact": {
                "url": "http://source-controller/ocirepository/flux-system/app/latest.tar.gz",
                "revision": "latest@sha256:abc",
                "digest": "sha256:abc",
                "lastUpdateTime": "2026-01-01T00:00:00Z",
                "size": 1234,
                "path": "ocirepository/flux-system/app/latest.tar.gz",
                "metadata": {"org.opencontainers.image.revision": "main@sha1:def"}
            }}
        }))
        .unwrap();
        let artifact = artifact_of(&source).unwrap().unwrap();
        assert_eq!(artifact.revision, "latest@sha256:abc");
        assert_eq!(artifact.origin_revision(), Some("main@sha1:def"));
    }

    #[test]
    fn a_source_without_artifact_has_none() {
        let source: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": "app"}, "status": {"conditions": []}
        }))
        .unwrap();
        assert_eq!(artifact_of(&source).unwrap(), None);
    }
}
