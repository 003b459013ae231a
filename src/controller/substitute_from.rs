//! The variables of `postBuild`: read from the ConfigMaps and Secrets `substituteFrom` names,
//! with the controller's identity. Values are never logged nor put in messages.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::api::Kustomization;
use crate::api::conditions::reason;
use crate::api::kustomization::SubstituteKind;
use crate::error::StepError;
use crate::flux;

/// A `substituteFrom` source that could not be read. Messages are Flux's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VarsError {
    #[error("substitute from '{kind}/{name}' error: {kind} '{namespace}/{name}' not found")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("substitute from '{kind}/{name}' error: {source}")]
    Read {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl StepError for VarsError {
    fn reason(&self) -> &'static str {
        reason::BUILD_FAILED
    }
}

/// The postBuild variables, and the values that came from Secrets: an API server's validation
/// error may echo one, and they are masked in apply errors as Flux masks them (since v1.9.6).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Substitution {
    pub vars: BTreeMap<String, String>,
    pub secret_values: Vec<String>,
}

/// `substituteFrom` in order (later ones win), then the inline `substitute` over all.
pub(crate) async fn substitution_vars(
    client: &Client,
    ks: &Kustomization,
) -> Result<Substitution, VarsError> {
    let Some(post_build) = &ks.spec.post_build else {
        return Ok(Substitution::default());
    };
    let namespace = ks.namespace().unwrap_or_default();
    let mut sources = Vec::new();
    for reference in &post_build.substitute_from {
        let (kind, found) = match reference.kind {
            SubstituteKind::ConfigMap => (
                "ConfigMap",
                Api::<ConfigMap>::namespaced(client.clone(), &namespace)
                    .get_opt(&reference.name)
                    .await
                    .map(|cm| cm.map(|cm| cm.data.unwrap_or_default())),
            ),
            SubstituteKind::Secret => (
                "Secret",
                Api::<Secret>::namespaced(client.clone(), &namespace)
                    .get_opt(&reference.name)
                    .await
                    .map(|secret| {
                        secret.map(|s| {
                            let data = s.data.unwrap_or_default().into_iter();
                            data.map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                                .collect::<BTreeMap<_, _>>()
                        })
                    }),
            ),
        };
        match found {
            Ok(Some(data)) => sources.push((reference.kind, data)),
            Ok(None) if reference.optional => {}
            Ok(None) => {
                return Err(VarsError::NotFound {
                    kind,
                    namespace,
                    name: reference.name.clone(),
                });
            }
            Err(source) => {
                return Err(VarsError::Read {
                    kind,
                    name: reference.name.clone(),
                    source,
                });
            }
        }
    }
    Ok(merge(sources, post_build.substitute.as_ref()))
}

/// The variables of the read sources and the inline map, and the values read from Secrets as
/// substitution writes them (newlines removed).
fn merge(
    sources: Vec<(SubstituteKind, BTreeMap<String, String>)>,
    inline: Option<&BTreeMap<String, String>>,
) -> Substitution {
    let secret_values = sources
        .iter()
        .filter(|(kind, _)| *kind == SubstituteKind::Secret)
        .flat_map(|(_, data)| data.values().map(|value| value.replace('\n', "")))
        .collect();
    let vars = flux::merge_vars(sources.into_iter().map(|(_, data)| data).collect(), inline);
    Substitution { vars, secret_values }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    // Before, only SOPS-decrypted values were masked in apply errors: a Secret's value that the
    // API server echoed went into the Ready condition and the event as is.
    #[test]
    fn values_from_secrets_are_kept_for_masking_and_others_are_not() {
        let merged = merge(
            vec![
                (SubstituteKind::ConfigMap, map(&[("region", "eu-west-1")])),
                (SubstituteKind::Secret, map(&[("token", "s3cr3t-t0ken\n")])),
                (SubstituteKind::ConfigMap, map(&[("token", "overridden")])),
            ],
            Some(&map(&[("inline", "visible")])),
        );
        assert_eq!(merged.secret_values, ["s3cr3t-t0ken"]);
        assert_eq!(
            merged.vars,
            map(&[
                ("inline", "visible"),
                ("region", "eu-west-1"),
                ("token", "overridden")
            ])
        );
    }
}
