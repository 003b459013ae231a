//! The `ImageRepository` custom resource, field for field as Flux's
//! `image.toolkit.fluxcd.io/v1`.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{AccessFrom, LocalObjectReference, is_false, is_unobserved, unobserved};
use flux_runtime::duration;

/// The tags excluded when `exclusionList` is empty: cosign signatures.
pub const DEFAULT_EXCLUSION_LIST: &[&str] = &[r"^.*\.sig$"];

/// ImageRepositorySpec defines the parameters for scanning an image repository, e.g.,
/// `fluxcd/flux`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "image.toolkit.fluxcd.io",
    version = "v1",
    kind = "ImageRepository",
    doc = "ImageRepository is the Schema for the imagerepositories API",
    namespaced,
    status = "ImageRepositoryStatus",
    shortname = "imgrepo",
    shortname = "imagerepo",
    category = "all",
    category = "fluxcd",
    category = "fluxcd-images",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image"}"#,
    printcolumn = r#"{"name":"Tags","type":"string","jsonPath":".status.lastScanResult.tagCount"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Last scan","type":"string","jsonPath":".status.lastScanResult.scanTime","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    annotation("kustomize.toolkit.fluxcd.io/substitute", "disabled")
)]
#[serde(rename_all = "camelCase")]
pub struct ImageRepositorySpec {
    /// Image is the name of the image repository
    pub image: String,

    /// Interval is the length of time to wait between scans of the image repository.
    #[schemars(pattern(r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub interval: String,

    /// Timeout for image scanning. Defaults to 'Interval' duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$"))]
    pub timeout: Option<String>,

    /// SecretRef can be given the name of a secret containing credentials to use for the image
    /// registry. The secret should be created with `kubectl create secret docker-registry`, or
    /// the equivalent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,

    /// ProxySecretRef specifies the Secret containing the proxy configuration to use while
    /// communicating with the container registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_secret_ref: Option<LocalObjectReference>,

    /// ServiceAccountName is the name of the Kubernetes ServiceAccount used to authenticate the
    /// image pull if the service account has attached pull secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub service_account_name: Option<String>,

    /// CertSecretRef can be given the name of a Secret containing either or both of a
    /// PEM-encoded client certificate (`tls.crt`) and private key (`tls.key`), and a PEM-encoded
    /// CA certificate (`ca.crt`), used for connecting to the registry. The Secret must be of
    /// type `Opaque` or `kubernetes.io/tls`. Support for the `caFile`, `certFile` and `keyFile`
    /// keys has been deprecated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<LocalObjectReference>,

    /// This flag tells the controller to suspend subsequent image scans. It does not apply to
    /// already started scans. Defaults to false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,

    /// AccessFrom defines an ACL for allowing cross-namespace references to the ImageRepository
    /// object based on the caller's namespace labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_from: Option<AccessFrom>,

    /// ExclusionList is a list of regex strings used to exclude certain tags from being stored
    /// in the database.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 25), extend("default" = [r"^.*\.sig$"]))]
    pub exclusion_list: Vec<String>,

    /// The registry login: `generic` (secrets), or a cloud provider's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "generic"))]
    pub provider: Option<Provider>,

    /// Insecure allows connecting to a non-TLS HTTP container registry.
    #[serde(default, skip_serializing_if = "is_false")]
    pub insecure: bool,
}

/// The provider used for authentication, can be 'aws', 'azure', 'gcp' or 'generic'. When not
/// specified, defaults to 'generic'.
// The field's description in the CRD is this type's: the derive keeps a referenced type's.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Credentials from `secretRef` and the ServiceAccount's pull secrets, else anonymous.
    #[default]
    Generic,
    Aws,
    Azure,
    Gcp,
}

impl Provider {
    /// Flux's spelling, as in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Generic => "generic",
            Self::Aws => "aws",
            Self::Azure => "azure",
            Self::Gcp => "gcp",
        }
    }
}

/// ScanResult contains information about the last scan of the image repository.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScanResult {
    /// Revision is a stable hash of the scanned tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// TagCount is the number of tags found in the last scan.
    // A Go `int`: no format in Flux's schema.
    #[schemars(extend("format" = null))]
    pub tag_count: i64,
    /// ScanTime is the time when the last scan was performed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_time: Option<Time>,
    /// LatestTags is a small sample of the tags found in the last scan. It's the first 10 tags
    /// when sorting all the tags in descending alphabetical order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latest_tags: Vec<String>,
}

/// ImageRepositoryStatus defines the observed state of ImageRepository
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageRepositoryStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::crd::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// ObservedGeneration is the last reconciled generation.
    #[serde(default = "unobserved", skip_serializing_if = "is_unobserved")]
    pub observed_generation: i64,
    /// CanonicalName is the name of the image repository with all the implied bits made
    /// explicit; e.g., `docker.io/library/alpine` rather than `alpine`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical_image_name: Option<String>,
    /// LastScanResult contains the number of fetched tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scan_result: Option<ScanResult>,
    /// ObservedExclusionList is a list of observed exclusion list. It reflects the exclusion
    /// rules used for the observed scan result in spec.lastScanResult.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed_exclusion_list: Vec<String>,
    /// LastHandledReconcileAt holds the value of the most recent reconcile request value, so a
    /// change of the annotation value can be detected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

impl Default for ImageRepositoryStatus {
    fn default() -> Self {
        Self {
            conditions: Vec::new(),
            observed_generation: unobserved(),
            canonical_image_name: None,
            last_scan_result: None,
            observed_exclusion_list: Vec::new(),
            last_handled_reconcile_at: None,
        }
    }
}

/// The shortest scan timeout, whatever the spec says (Flux's `GetTimeout`).
const MIN_TIMEOUT: Duration = Duration::from_secs(1);

impl ImageRepositorySpec {
    /// The scan interval, if it parses (the CRD pattern guarantees it for objects that went
    /// through the API server).
    pub fn interval(&self) -> Option<Duration> {
        duration::parse(&self.interval)
    }

    /// `timeout`, else the interval; never below one second.
    pub fn timeout(&self) -> Duration {
        let given = self.timeout.as_deref().and_then(duration::parse);
        given
            .or_else(|| self.interval())
            .unwrap_or(MIN_TIMEOUT)
            .max(MIN_TIMEOUT)
    }

    /// The tag exclusion regexes in force: the spec's, else the default.
    pub fn exclusion_list(&self) -> Vec<String> {
        if self.exclusion_list.is_empty() {
            DEFAULT_EXCLUSION_LIST.iter().map(|s| s.to_string()).collect()
        } else {
            self.exclusion_list.clone()
        }
    }

    pub fn provider(&self) -> Provider {
        self.provider.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(fields: serde_json::Value) -> ImageRepositorySpec {
        let mut spec = json!({"image": "ghcr.io/fluxcd/flux", "interval": "5m"});
        for (key, value) in fields.as_object().unwrap() {
            spec[key] = value.clone();
        }
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn timeout_is_the_interval_unless_given_and_never_below_a_second() {
        assert_eq!(spec(json!({})).timeout(), Duration::from_secs(300));
        assert_eq!(spec(json!({"timeout": "30s"})).timeout(), Duration::from_secs(30));
        assert_eq!(spec(json!({"timeout": "10ms"})).timeout(), Duration::from_secs(1));
        assert_eq!(
            spec(json!({"interval": "100ms"})).timeout(),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn an_empty_exclusion_list_means_the_default() {
        assert_eq!(spec(json!({})).exclusion_list(), [r"^.*\.sig$"]);
        assert_eq!(
            spec(json!({"exclusionList": []})).exclusion_list(),
            [r"^.*\.sig$"]
        );
        assert_eq!(
            spec(json!({"exclusionList": ["^dev-"]})).exclusion_list(),
            ["^dev-"]
        );
    }

    #[test]
    fn provider_defaults_to_generic_and_reads_fluxs_spelling() {
        assert_eq!(spec(json!({})).provider(), Provider::Generic);
        assert_eq!(spec(json!({"provider": "aws"})).provider(), Provider::Aws);
        assert!(
            serde_json::from_value::<ImageRepositorySpec>(json!({
                "image": "x", "interval": "1m", "provider": "AWS"
            }))
            .is_err()
        );
    }

    #[test]
    fn status_reads_and_writes_fluxs_fields() {
        let written = json!({
            "observedGeneration": 3,
            "canonicalImageName": "index.docker.io/library/alpine",
            "lastScanResult": {
                "revision": "sha256:5c68",
                "tagCount": 4,
                "scanTime": "2026-06-01T10:00:00Z",
                "latestTags": ["d", "c", "b", "a"],
            },
            "observedExclusionList": [r"^.*\.sig$"],
            "lastHandledReconcileAt": "2026-06-01T09:59:00Z",
        });
        let status: ImageRepositoryStatus = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(status.last_scan_result.as_ref().unwrap().tag_count, 4);
        assert_eq!(serde_json::to_value(&status).unwrap(), written);
        // A fresh status is unobserved, and -1 is left to the CRD's status default.
        let fresh: ImageRepositoryStatus = serde_json::from_value(json!({})).unwrap();
        assert_eq!(fresh, ImageRepositoryStatus::default());
        assert_eq!(fresh.observed_generation, -1);
        assert_eq!(serde_json::to_value(&fresh).unwrap(), json!({}));
    }
}
