//! The `ImagePolicy` custom resource, field for field as Flux's `image.toolkit.fluxcd.io/v1`.

use std::fmt;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{NamespacedObjectReference, is_false, is_unobserved, unobserved};
use flux_runtime::duration;

/// How often the digest is refreshed under `Always` when `interval` is zero.
const DEFAULT_DIGEST_INTERVAL: Duration = Duration::from_secs(600);

/// ImagePolicySpec defines the parameters for calculating the ImagePolicy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "image.toolkit.fluxcd.io",
    version = "v1",
    kind = "ImagePolicy",
    doc = "ImagePolicy is the Schema for the imagepolicies API",
    namespaced,
    status = "ImagePolicyStatus",
    shortname = "imgpol",
    shortname = "imagepol",
    category = "all",
    category = "fluxcd",
    category = "fluxcd-images",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".status.latestRef.name"}"#,
    printcolumn = r#"{"name":"Tag","type":"string","jsonPath":".status.latestRef.tag"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    annotation("kustomize.toolkit.fluxcd.io/substitute", "disabled")
)]
#[x_kube(validation = Rule::new(
    "!has(self.interval) || (has(self.digestReflectionPolicy) && self.digestReflectionPolicy == 'Always')"
).message("spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'"))]
#[x_kube(validation = Rule::new(
    "has(self.interval) || !has(self.digestReflectionPolicy) || self.digestReflectionPolicy != 'Always'"
).message("spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'"))]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicySpec {
    /// ImageRepositoryRef points at the object specifying the image being scanned
    pub image_repository_ref: NamespacedObjectReference,

    /// Policy gives the particulars of the policy to be followed in selecting the most recent
    /// image
    pub policy: ImagePolicyChoice,

    /// FilterTags enables filtering for only a subset of tags based on a set of rules. If no
    /// rules are provided, all the tags from the repository will be ordered and compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_tags: Option<TagFilter>,

    /// When the digest of the elected image is fetched (see [`ReflectionPolicy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Never"))]
    pub digest_reflection_policy: Option<ReflectionPolicy>,

    /// Interval is the length of time to wait between refreshing the digest of the latest tag
    /// when the reflection policy is set to "Always". Defaults to 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub interval: Option<String>,

    /// This flag tells the controller to suspend subsequent policy reconciliations. It does not
    /// apply to already started reconciliations. Defaults to false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
}

/// DigestReflectionPolicy governs the setting of the `.status.latestRef.digest` field. Never:
/// The digest field will always be set to the empty string. IfNotPresent: The digest field will
/// be set to the digest of the elected latest image if the field is empty and the image did not
/// change. Always: The digest field will always be set to the digest of the elected latest
/// image. Default: Never.
// The field's description in the CRD is this type's: the derive keeps a referenced type's.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ReflectionPolicy {
    /// The digest is fetched on every reconcile.
    Always,
    /// The digest is fetched when the elected image changed or has none yet.
    IfNotPresent,
    /// No digest.
    #[default]
    Never,
}

/// ImagePolicyChoice is a union of all the types of policy that can be supplied. The CRD does
/// not enforce one of them: an empty choice is refused when the policy is evaluated.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ImagePolicyChoice {
    /// SemVer gives a semantic version range to check against the tags available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<SemVerPolicy>,
    /// Alphabetical set of rules to use for alphabetical ordering of the tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alphabetical: Option<OrderPolicy>,
    /// Numerical set of rules to use for numerical ordering of the tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numerical: Option<OrderPolicy>,
}

/// SemVerPolicy specifies a semantic version policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct SemVerPolicy {
    /// Range gives a semver range for the image tag; the highest version within the range
    /// that's a tag yields the latest image.
    pub range: String,
}

/// The ordering of an alphabetical or numerical policy. Ascending order selects the greatest
/// tag (Z, 9), descending the least (A, 0).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct OrderPolicy {
    /// Order specifies the sorting order of the tags: ascending order selects the greatest tag,
    /// descending order the least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "asc"))]
    pub order: Option<Order>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    #[default]
    Asc,
    Desc,
}

impl OrderPolicy {
    pub fn order(&self) -> Order {
        self.order.unwrap_or_default()
    }
}

/// TagFilter enables filtering tags based on a set of defined rules
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct TagFilter {
    /// Pattern specifies a regular expression pattern used to filter for image tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Extract allows a capture group to be extracted from the specified regular expression
    /// pattern, useful before tag evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extract: Option<String>,
}

/// ImageRef represents an image reference.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ImageRef {
    /// Name is the bare image's name.
    pub name: String,
    /// Tag is the image's tag.
    pub tag: String,
    /// Digest is the image's digest.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
}

/// `name:tag[@digest]`, as Flux's messages print a reference.
impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.tag)?;
        if !self.digest.is_empty() {
            write!(f, "@{}", self.digest)?;
        }
        Ok(())
    }
}

/// ImagePolicyStatus defines the observed state of ImagePolicy
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicyStatus {
    /// LatestRef gives the first in the list of images scanned by the image repository, when
    /// filtered and ordered according to the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_ref: Option<ImageRef>,
    /// ObservedPreviousRef is the observed previous LatestRef. It is used to keep track of the
    /// previous and current images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_previous_ref: Option<ImageRef>,
    #[serde(default = "unobserved", skip_serializing_if = "is_unobserved")]
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::crd::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// LastHandledReconcileAt holds the value of the most recent reconcile request value, so a
    /// change of the annotation value can be detected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

impl Default for ImagePolicyStatus {
    fn default() -> Self {
        Self {
            latest_ref: None,
            observed_previous_ref: None,
            observed_generation: unobserved(),
            conditions: Vec::new(),
            last_handled_reconcile_at: None,
        }
    }
}

impl ImagePolicySpec {
    pub fn digest_reflection_policy(&self) -> ReflectionPolicy {
        self.digest_reflection_policy.unwrap_or_default()
    }

    /// The periodic requeue: only `Always` has one, `interval` or 10m when it is zero;
    /// `None` when the policy is only re-evaluated on a new scan revision or request.
    pub fn requeue_interval(&self) -> Option<Duration> {
        if self.digest_reflection_policy() != ReflectionPolicy::Always {
            return None;
        }
        let interval = self.interval.as_deref().and_then(duration::parse);
        Some(
            interval
                .filter(|i| !i.is_zero())
                .unwrap_or(DEFAULT_DIGEST_INTERVAL),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(fields: serde_json::Value) -> ImagePolicySpec {
        let mut spec = json!({
            "imageRepositoryRef": {"name": "podinfo"},
            "policy": {"semver": {"range": ">=1.0.0"}},
        });
        for (key, value) in fields.as_object().unwrap() {
            spec[key] = value.clone();
        }
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn only_always_requeues_and_a_zero_interval_means_ten_minutes() {
        assert_eq!(spec(json!({})).requeue_interval(), None);
        assert_eq!(
            spec(json!({"digestReflectionPolicy": "IfNotPresent"})).requeue_interval(),
            None
        );
        assert_eq!(
            spec(json!({"digestReflectionPolicy": "Always", "interval": "1m"})).requeue_interval(),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            spec(json!({"digestReflectionPolicy": "Always", "interval": "0s"})).requeue_interval(),
            Some(Duration::from_secs(600))
        );
    }

    #[test]
    fn orders_default_to_ascending_and_read_fluxs_spelling() {
        let policy = spec(json!({"policy": {"alphabetical": {}, "numerical": {"order": "desc"}}})).policy;
        assert_eq!(policy.alphabetical.unwrap().order(), Order::Asc);
        assert_eq!(policy.numerical.unwrap().order(), Order::Desc);
        assert!(
            serde_json::from_value::<OrderPolicy>(json!({"order": "DESC"})).is_err(),
            "the CRD enum is lower case"
        );
    }

    #[test]
    fn refs_print_as_flux_prints_them() {
        let mut image = ImageRef {
            name: "ghcr.io/stefanprodan/podinfo".into(),
            tag: "6.5.0".into(),
            digest: String::new(),
        };
        assert_eq!(image.to_string(), "ghcr.io/stefanprodan/podinfo:6.5.0");
        image.digest = "sha256:abc".into();
        assert_eq!(image.to_string(), "ghcr.io/stefanprodan/podinfo:6.5.0@sha256:abc");
    }

    #[test]
    fn status_reads_and_writes_fluxs_fields() {
        let written = json!({
            "latestRef": {"name": "ghcr.io/x/y", "tag": "1.1.0", "digest": "sha256:aa"},
            "observedPreviousRef": {"name": "ghcr.io/x/y", "tag": "1.0.0"},
            "observedGeneration": 2,
            "lastHandledReconcileAt": "now",
        });
        let status: ImagePolicyStatus = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(status.observed_previous_ref.as_ref().unwrap().digest, "");
        assert_eq!(serde_json::to_value(&status).unwrap(), written);
        let fresh: ImagePolicyStatus = serde_json::from_value(json!({})).unwrap();
        assert_eq!(fresh.observed_generation, -1);
    }
}
