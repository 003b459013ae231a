//! From the spec and the stored tags to the latest image reference, in Flux's order: the
//! policy is validated before the store is read, an empty store is reported before the filter
//! is compiled, and the digest is fetched per `digestReflectionPolicy`.

use super::PolicyFailure;
use crate::api::ImagePolicySpec;
use crate::api::image_policy::{ImagePolicyChoice, ImageRef, Order, OrderPolicy, ReflectionPolicy};
use crate::policy::{Choice, Policy, TagFilter};

/// `spec.policy` as an engine; an invalid one stalls the policy before any tag is read.
pub(crate) fn policy_of(spec: &ImagePolicySpec) -> Result<Policy, PolicyFailure> {
    Ok(Policy::new(&choice(&spec.policy))?)
}

fn choice(policy: &ImagePolicyChoice) -> Choice<'_> {
    let order = |o: &OrderPolicy| match o.order() {
        Order::Asc => "asc",
        Order::Desc => "desc",
    };
    Choice {
        semver: policy.semver.as_ref().map(|s| s.range.as_str()),
        alphabetical: policy.alphabetical.as_ref().map(order),
        numerical: policy.numerical.as_ref().map(order),
    }
}

/// The latest tag of `tags` (the store's order, which decides ties) after `filterTags`.
pub(crate) fn select(
    policy: &Policy,
    spec: &ImagePolicySpec,
    tags: &[&str],
) -> Result<String, PolicyFailure> {
    if tags.is_empty() {
        return Err(PolicyFailure::NoTags);
    }
    let filter = spec
        .filter_tags
        .as_ref()
        .map(|f| {
            TagFilter::new(
                f.pattern.as_deref().unwrap_or_default(),
                f.extract.as_deref().unwrap_or_default(),
            )
        })
        .transpose()?;
    Ok(policy.latest(filter.as_ref(), tags)?)
}

/// What to do about the digest of the newly selected `name:tag`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DigestPlan {
    /// `Never`: no digest.
    None,
    /// `IfNotPresent` with the same image already resolved with a digest: keep it, even if
    /// the tag was pushed again since.
    Keep(String),
    /// HEAD the manifest (`Always`, or `IfNotPresent` for a new image or a missing digest).
    Fetch,
}

/// The digest decision from the policy and the `status.latestRef` before this reconcile.
pub(crate) fn digest_plan(
    reflection: ReflectionPolicy,
    previous: Option<&ImageRef>,
    name: &str,
    tag: &str,
) -> DigestPlan {
    match reflection {
        ReflectionPolicy::Never => DigestPlan::None,
        ReflectionPolicy::Always => DigestPlan::Fetch,
        ReflectionPolicy::IfNotPresent => match previous {
            Some(p) if p.name == name && p.tag == tag && !p.digest.is_empty() => {
                DigestPlan::Keep(p.digest.clone())
            }
            _ => DigestPlan::Fetch,
        },
    }
}

/// The failure of a planned fetch (`reason`: the auth or HEAD error).
pub(crate) fn digest_failure(name: &str, tag: &str, reason: impl std::fmt::Display) -> PolicyFailure {
    PolicyFailure::Digest {
        reference: format!("{name}:{tag}"),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyError;
    use serde_json::json;

    fn spec(fields: serde_json::Value) -> ImagePolicySpec {
        let mut spec = json!({"imageRepositoryRef": {"name": "podinfo"}});
        for (k, v) in fields.as_object().unwrap() {
            spec[k] = v.clone();
        }
        serde_json::from_value(spec).unwrap()
    }

    fn run(fields: serde_json::Value, tags: &[&str]) -> Result<String, String> {
        let spec = spec(fields);
        policy_of(&spec)
            .and_then(|p| select(&p, &spec, tags))
            .map_err(|e| e.to_string())
    }

    /// Conformance items 16 to 19 of the reference, messages from Flux's policy package.
    #[test]
    fn selection_follows_the_spec() {
        let semver_tags = ["1.1.0-alpha", "1.1.0", "1.0.2", "1.0.1", "1.0.0", "0.1.0"];
        let ubuntu = ["zesty", "yakkety", "xenial", "bionic", "artful"];
        let builds = ["main-845d3a80-2", "main-3e32dc8a-100"];
        let id = json!({"pattern": "^main-[a-f0-9]+-(?P<id>[0-9]+)$", "extract": "$id"});
        type Case<'a> = (
            &'a str,
            serde_json::Value,
            &'a [&'a str],
            Result<&'a str, &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "semver range",
                json!({"policy": {"semver": {"range": "1.0.x"}}}),
                &semver_tags,
                Ok("1.0.2"),
            ),
            (
                "alphabetical asc",
                json!({"policy": {"alphabetical": {}}}),
                &ubuntu,
                Ok("zesty"),
            ),
            (
                "alphabetical desc",
                json!({"policy": {"alphabetical": {"order": "desc"}}}),
                &ubuntu,
                Ok("artful"),
            ),
            (
                "numerical on the extracted id",
                json!({"policy": {"numerical": {"order": "asc"}}, "filterTags": id}),
                &builds,
                Ok("main-3e32dc8a-100"),
            ),
            (
                "numerical on a non-number",
                json!({"policy": {"numerical": {}}}),
                &builds,
                Err("failed to parse invalid numeric value 'main-845d3a80-2'"),
            ),
            (
                "filter matching nothing",
                json!({"policy": {"alphabetical": {}}, "filterTags": {"pattern": "^nothing$"}}),
                &ubuntu,
                Err("version list argument cannot be empty"),
            ),
            (
                "range matching nothing",
                json!({"policy": {"semver": {"range": ">=9.0.0"}}}),
                &semver_tags,
                Err("unable to determine latest version from provided list"),
            ),
            (
                "empty choice",
                json!({"policy": {}}),
                &ubuntu,
                Err("invalid policy: given ImagePolicyChoice object is invalid"),
            ),
            (
                "empty store",
                json!({"policy": {"alphabetical": {}}}),
                &[],
                Err("no tags in database"),
            ),
        ];
        for (name, fields, tags, expected) in cases {
            assert_eq!(
                run(fields, tags),
                expected.map(String::from).map_err(String::from),
                "{name}"
            );
        }
    }

    #[test]
    fn an_invalid_policy_is_reported_before_an_empty_store_and_that_before_a_bad_filter() {
        let bad_filter = json!({"pattern": "([a-z"});
        let invalid = run(
            json!({"policy": {"semver": {"range": "*-*"}}, "filterTags": bad_filter}),
            &[],
        );
        assert!(invalid.unwrap_err().starts_with("invalid policy: "));
        let empty = run(
            json!({"policy": {"alphabetical": {}}, "filterTags": bad_filter}),
            &[],
        );
        assert_eq!(empty, Err("no tags in database".into()));
        let spec = spec(json!({"policy": {"alphabetical": {}}, "filterTags": bad_filter}));
        let filter = select(&policy_of(&spec).unwrap(), &spec, &["a"]).unwrap_err();
        assert!(
            matches!(filter, PolicyFailure::Policy(PolicyError::InvalidFilter { .. })),
            "{filter:?}"
        );
        assert!(
            filter
                .to_string()
                .starts_with("failed to filter tags: invalid regular expression pattern '([a-z': ")
        );
    }

    /// Flux's `digestReflection` transitions as far as the decision goes.
    #[test]
    fn the_digest_is_fetched_kept_or_dropped_per_policy() {
        let image = "reg.example/app";
        let previous = |tag: &str, digest: &str| ImageRef {
            name: image.into(),
            tag: tag.into(),
            digest: digest.into(),
        };
        use ReflectionPolicy::*;
        type Case<'a> = (
            &'a str,
            ReflectionPolicy,
            Option<ImageRef>,
            &'a str,
            &'a str,
            DigestPlan,
        );
        let cases: Vec<Case> = vec![
            ("never, first", Never, None, image, "1.0", DigestPlan::None),
            (
                "never drops a digest",
                Never,
                Some(previous("1.0", "sha256:a")),
                image,
                "1.0",
                DigestPlan::None,
            ),
            (
                "if-not-present, first",
                IfNotPresent,
                None,
                image,
                "1.0",
                DigestPlan::Fetch,
            ),
            (
                "if-not-present keeps",
                IfNotPresent,
                Some(previous("1.0", "sha256:a")),
                image,
                "1.0",
                DigestPlan::Keep("sha256:a".into()),
            ),
            (
                "if-not-present, new tag",
                IfNotPresent,
                Some(previous("1.0", "sha256:a")),
                image,
                "1.1",
                DigestPlan::Fetch,
            ),
            (
                "if-not-present, new image name",
                IfNotPresent,
                Some(previous("1.0", "sha256:a")),
                "other.example/app",
                "1.0",
                DigestPlan::Fetch,
            ),
            (
                "if-not-present, no digest yet",
                IfNotPresent,
                Some(previous("1.0", "")),
                image,
                "1.0",
                DigestPlan::Fetch,
            ),
            (
                "always",
                Always,
                Some(previous("1.0", "sha256:a")),
                image,
                "1.0",
                DigestPlan::Fetch,
            ),
        ];
        for (name, policy, previous, image, tag, expected) in cases {
            assert_eq!(
                digest_plan(policy, previous.as_ref(), image, tag),
                expected,
                "{name}"
            );
        }
        assert_eq!(
            digest_failure(
                image,
                "1.0",
                "failed to configure authentication options: secrets \"s\" not found"
            )
            .to_string(),
            "failed fetching digest of reg.example/app:1.0: failed to configure authentication options: secrets \"s\" not found"
        );
    }
}
