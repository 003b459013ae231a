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

/// `substituteFrom` in order (later ones win), then the inline `substitute` over all.
pub(crate) async fn substitution_vars(
    client: &Client,
    ks: &Kustomization,
) -> Result<BTreeMap<String, String>, VarsError> {
    let Some(post_build) = &ks.spec.post_build else {
        return Ok(BTreeMap::new());
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
            Ok(Some(data)) => sources.push(data),
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
    Ok(flux::merge_vars(sources, post_build.substitute.as_ref()))
}
