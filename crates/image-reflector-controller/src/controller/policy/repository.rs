//! Which ImageRepository a policy reads and whether it may: `imageRepositoryRef` defaults to
//! the policy's namespace, `--no-cross-namespace-refs` refuses any other before a read, and
//! the repository's `accessFrom` decides on the policy namespace's labels (fluxcd/pkg
//! `runtime/acl`). Then the repository itself must be usable: its image parses, and its
//! workload identity needs the feature gate.

use std::collections::BTreeMap;

use super::PolicyFailure;
use crate::api::image_repository::Provider;
use crate::api::{AccessFrom, ImageRepositorySpec, NamespaceSelector, NamespacedObjectReference};
use crate::registry::ImageRef;

/// The ImageRepository an ImagePolicy points at.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RepositoryKey {
    pub namespace: String,
    pub name: String,
}

/// `imageRepositoryRef`, its namespace defaulting to the policy's (also the key under which
/// policies are found when a repository changes).
pub(crate) fn repository_key(policy_namespace: &str, reference: &NamespacedObjectReference) -> RepositoryKey {
    let namespace = reference
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or(policy_namespace);
    RepositoryKey {
        namespace: namespace.to_string(),
        name: reference.name.clone(),
    }
}

/// `--no-cross-namespace-refs`: checked before the repository is read.
pub(crate) fn check_cross_namespace(
    policy_namespace: &str,
    key: &RepositoryKey,
    no_cross_namespace_refs: bool,
) -> Result<(), PolicyFailure> {
    if no_cross_namespace_refs && key.namespace != policy_namespace {
        return Err(PolicyFailure::CrossNamespaceBlocked {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        });
    }
    Ok(())
}

/// Whether [`check_access`] needs the labels of the policy's namespace (a read the
/// reconciler skips otherwise).
pub(crate) fn needs_namespace_labels(
    policy_namespace: &str,
    key: &RepositoryKey,
    access_from: Option<&AccessFrom>,
) -> bool {
    key.namespace != policy_namespace && access_from.is_some()
}

/// The repository's ACL: same namespace always; else one of `accessFrom.namespaceSelectors`
/// must match the policy namespace's labels (an empty selector matches every namespace).
pub(crate) fn check_access(
    policy_namespace: &str,
    key: &RepositoryKey,
    access_from: Option<&AccessFrom>,
    namespace_labels: &BTreeMap<String, String>,
) -> Result<(), PolicyFailure> {
    if key.namespace == policy_namespace {
        return Ok(());
    }
    let Some(access_from) = access_from else {
        return Err(PolicyFailure::AclMissing {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        });
    };
    if access_from
        .namespace_selectors
        .iter()
        .any(|selector| selects(selector, namespace_labels))
    {
        return Ok(());
    }
    Err(PolicyFailure::AclMismatch {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        policy_namespace: policy_namespace.to_string(),
    })
}

fn selects(selector: &NamespaceSelector, labels: &BTreeMap<String, String>) -> bool {
    selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value))
}

/// What makes a readable repository unusable for a policy, until one of the two changes.
pub(crate) fn check_repository(
    repository: &ImageRepositorySpec,
    object_level_workload_identity: bool,
) -> Result<(), PolicyFailure> {
    ImageRef::parse(&repository.image, repository.insecure)?;
    let names_account = repository
        .service_account_name
        .as_deref()
        .is_some_and(|sa| !sa.is_empty());
    if repository.provider() != Provider::Generic && names_account && !object_level_workload_identity {
        return Err(PolicyFailure::FeatureGateDisabled);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reference(name: &str, namespace: Option<&str>) -> NamespacedObjectReference {
        NamespacedObjectReference {
            name: name.into(),
            namespace: namespace.map(String::from),
        }
    }

    fn key(namespace: &str, name: &str) -> RepositoryKey {
        RepositoryKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn acl(selectors: serde_json::Value) -> AccessFrom {
        serde_json::from_value(json!({ "namespaceSelectors": selectors })).unwrap()
    }

    #[test]
    fn the_reference_defaults_to_the_policy_namespace() {
        assert_eq!(
            repository_key("apps", &reference("podinfo", None)),
            key("apps", "podinfo")
        );
        assert_eq!(
            repository_key("apps", &reference("podinfo", Some(""))),
            key("apps", "podinfo")
        );
        assert_eq!(
            repository_key("apps", &reference("podinfo", Some("flux-system"))),
            key("flux-system", "podinfo")
        );
    }

    #[test]
    fn no_cross_namespace_refs_blocks_only_other_namespaces() {
        let blocked = check_cross_namespace("apps", &key("flux-system", "podinfo"), true).unwrap_err();
        assert_eq!(
            blocked.to_string(),
            "failed to get the referred ImageRepository: cannot access 'ImageRepository/flux-system/podinfo', cross-namespace references have been blocked"
        );
        assert!(check_cross_namespace("apps", &key("apps", "podinfo"), true).is_ok());
        assert!(check_cross_namespace("apps", &key("flux-system", "podinfo"), false).is_ok());
    }

    /// Flux's `getImageRepository` ACL table, with the messages of fluxcd/pkg `runtime/acl`.
    #[test]
    fn the_acl_decides_on_the_policy_namespace_labels() {
        let own = labels(&[("kubernetes.io/metadata.name", "apps"), ("team", "a")]);
        let missing = "failed to get the referred ImageRepository: access denied: 'flux-system/podinfo' can't be accessed due to missing ACL labels on 'accessFrom'";
        let mismatch = "failed to get the referred ImageRepository: access denied: 'flux-system/podinfo' can't be accessed due to ACL labels mismatch on namespace 'apps'";
        type Case<'a> = (&'a str, &'a str, Option<AccessFrom>, Result<(), &'a str>);
        let cases: Vec<Case> = vec![
            ("same namespace, no ACL", "apps", None, Ok(())),
            ("other namespace, no ACL", "flux-system", None, Err(missing)),
            (
                "matching name label",
                "flux-system",
                Some(acl(
                    json!([{"matchLabels": {"kubernetes.io/metadata.name": "apps"}}]),
                )),
                Ok(()),
            ),
            (
                "every label must match",
                "flux-system",
                Some(acl(json!([{"matchLabels": {"team": "a", "env": "prod"}}]))),
                Err(mismatch),
            ),
            (
                "selectors are ORed",
                "flux-system",
                Some(acl(
                    json!([{"matchLabels": {"team": "b"}}, {"matchLabels": {"team": "a"}}]),
                )),
                Ok(()),
            ),
            (
                "an empty selector matches all",
                "flux-system",
                Some(acl(json!([{}]))),
                Ok(()),
            ),
            (
                "empty matchLabels matches all",
                "flux-system",
                Some(acl(json!([{"matchLabels": {}}]))),
                Ok(()),
            ),
            (
                "no selectors match nothing",
                "flux-system",
                Some(acl(json!([]))),
                Err(mismatch),
            ),
        ];
        for (name, repo_namespace, access_from, expected) in cases {
            let key = key(repo_namespace, "podinfo");
            let got = check_access("apps", &key, access_from.as_ref(), &own);
            assert_eq!(
                got.map_err(|e| e.to_string()),
                expected.map_err(String::from),
                "{name}"
            );
            if let Err(e) = check_access("apps", &key, access_from.as_ref(), &own) {
                use flux_runtime::error::StepError;
                assert_eq!(e.reason(), "AccessDenied", "{name}");
            }
        }
    }

    #[test]
    fn namespace_labels_are_read_only_when_an_acl_must_decide() {
        let access = acl(json!([{}]));
        assert!(!needs_namespace_labels("apps", &key("apps", "r"), Some(&access)));
        assert!(!needs_namespace_labels("apps", &key("other", "r"), None));
        assert!(needs_namespace_labels("apps", &key("other", "r"), Some(&access)));
    }

    fn repository(fields: serde_json::Value) -> ImageRepositorySpec {
        let mut spec = json!({"image": "ghcr.io/stefanprodan/podinfo", "interval": "1m"});
        for (k, v) in fields.as_object().unwrap() {
            spec[k] = v.clone();
        }
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn an_unusable_repository_stalls_the_policy() {
        let scheme = check_repository(&repository(json!({"image": "https://reg.example/app"})), false);
        assert_eq!(
            scheme.unwrap_err().to_string(),
            "image 'https://reg.example/app' should not include URL scheme; remove 'https://'"
        );
        let tag = check_repository(&repository(json!({"image": "reg.example/app:1.0"})), false);
        assert_eq!(
            tag.unwrap_err().to_string(),
            "image 'reg.example/app:1.0' should not include a tag; remove ':1.0'"
        );

        let identity = json!({"provider": "aws", "serviceAccountName": "irc"});
        assert_eq!(
            check_repository(&repository(identity.clone()), false),
            Err(PolicyFailure::FeatureGateDisabled)
        );
        assert_eq!(check_repository(&repository(identity), true), Ok(()));
        // A generic provider reads the account's pull secrets: no gate.
        assert_eq!(
            check_repository(&repository(json!({"serviceAccountName": "irc"})), false),
            Ok(())
        );
        assert_eq!(
            check_repository(&repository(json!({"provider": "gcp"})), false),
            Ok(())
        );
    }
}
