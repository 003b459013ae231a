//! Credentials and TLS settings of a scan from the Secrets an ImageRepository names:
//! `secretRef` (a `kubernetes.io/dockerconfigjson` Secret, matched by registry the way the
//! kubelet's keyring does) and `certSecretRef` (`ca.crt`, `tls.crt`, `tls.key`).

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use serde::Deserialize;

use crate::registry::{Credentials, ImageRef, TlsOptions};

const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// Why the credentials could not be built; the condition prefixes Flux's
/// `failed to configure authentication options: `.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    /// Flux's text is the API's (`secrets "docker" not found`).
    #[error("{0}")]
    Read(String),
    #[error("secret '{secret}': {cause}")]
    DockerConfig { secret: String, cause: String },
}

/// One entry of `.dockerconfigjson`'s `auths`.
#[derive(Deserialize, Default)]
struct Entry {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    auth: Option<String>,
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

/// The credentials in a `.dockerconfigjson` for `image`: the entry whose host equals the
/// registry's and whose path is the longest prefix of the repository; none means anonymous.
pub(crate) fn keyring_match(config: &[u8], image: &ImageRef) -> Result<Option<Credentials>, String> {
    let config: DockerConfig =
        serde_json::from_slice(config).map_err(|e| format!("invalid {DOCKER_CONFIG_KEY}: {e}"))?;
    let registry = normal_host(image.registry());
    let mut best: Option<(usize, &Entry)> = None;
    for (key, entry) in &config.auths {
        let (host, path) = split_key(key);
        if normal_host(host) != registry || !path_prefix(path, image.repository()) {
            continue;
        }
        if best.is_none_or(|(len, _)| path.len() > len) {
            best = Some((path.len(), entry));
        }
    }
    let Some((_, entry)) = best else {
        return Ok(None);
    };
    credentials(entry).map(Some)
}

/// A key's host and path, without scheme and the `/v1/`, `/v2/` API suffixes.
fn split_key(key: &str) -> (&str, &str) {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let (host, path) = key.split_once('/').unwrap_or((key, ""));
    let path = path.trim_end_matches('/');
    let path = match path {
        "v1" | "v2" => "",
        other => other,
    };
    (host, path)
}

/// Docker Hub has several names.
fn normal_host(host: &str) -> &str {
    match host {
        "docker.io" | "registry-1.docker.io" | "index.docker.io" => "index.docker.io",
        other => other,
    }
}

fn path_prefix(prefix: &str, repository: &str) -> bool {
    prefix.is_empty()
        || repository == prefix
        || repository
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn credentials(entry: &Entry) -> Result<Credentials, String> {
    if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
        return Ok(Credentials {
            username: username.clone(),
            password: password.clone(),
        });
    }
    let auth = entry.auth.as_deref().unwrap_or_default();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth)
        .map_err(|e| format!("invalid auth: {e}"))?;
    let decoded = String::from_utf8(decoded).map_err(|_| "invalid auth: not UTF-8".to_string())?;
    let (username, password) = decoded
        .split_once(':')
        .ok_or_else(|| "invalid auth: not user:password".to_string())?;
    Ok(Credentials {
        username: username.into(),
        password: password.into(),
    })
}

/// What a scan authenticates with.
pub(crate) struct ScanAuth {
    pub credentials: Option<Credentials>,
    pub tls: TlsOptions,
}

/// Reads the Secrets the spec names (the same one once when both name it).
pub(crate) async fn scan_auth(
    client: &Client,
    namespace: &str,
    secret_ref: Option<&str>,
    cert_secret_ref: Option<&str>,
    image: &ImageRef,
) -> Result<ScanAuth, AuthError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut read = BTreeMap::new();
    for name in secret_ref.iter().chain(cert_secret_ref.iter()) {
        if !read.contains_key(*name) {
            let secret = secrets.get(name).await.map_err(|e| match e {
                kube::Error::Api(status) => AuthError::Read(status.message),
                other => AuthError::Read(other.to_string()),
            })?;
            read.insert(name.to_string(), secret.data.unwrap_or_default());
        }
    }
    let credentials = match secret_ref {
        Some(name) => match read[name].get(DOCKER_CONFIG_KEY) {
            Some(config) => keyring_match(&config.0, image).map_err(|cause| AuthError::DockerConfig {
                secret: name.to_string(),
                cause,
            })?,
            None => None,
        },
        None => None,
    };
    let tls = cert_secret_ref.map_or_else(TlsOptions::default, |name| {
        let data = &read[name];
        let field = |key: &str| data.get(key).map(|ByteString(bytes)| bytes.clone());
        TlsOptions {
            ca_pem: field("ca.crt"),
            client_cert_pem: field("tls.crt"),
            client_key_pem: field("tls.key"),
        }
    });
    Ok(ScanAuth { credentials, tls })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(keys: &[(&str, &str)]) -> Vec<u8> {
        let auths: serde_json::Map<_, _> = keys
            .iter()
            .map(|(key, user)| {
                (
                    key.to_string(),
                    serde_json::json!({"username": user, "password": "p"}),
                )
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({ "auths": auths })).unwrap()
    }

    fn user(config: &[u8], image: &str) -> Option<String> {
        let image = ImageRef::parse(image, false).unwrap();
        keyring_match(config, &image).unwrap().map(|c| c.username)
    }

    #[test]
    fn the_longest_matching_key_of_the_registry_wins() {
        let keys = config(&[
            ("ghcr.io", "host"),
            ("ghcr.io/org", "org"),
            ("ghcr.io/org/app", "app"),
            ("https://index.docker.io/v1/", "hub"),
            ("127.0.0.1:5000", "local"),
        ]);
        let cases = [
            ("ghcr.io/other/app", Some("host")),
            ("ghcr.io/org/lib", Some("org")),
            ("ghcr.io/org/app", Some("app")),
            ("ghcr.io/org/application", Some("org")),
            ("ghcr.io/orgx/app", Some("host")),
            ("alpine", Some("hub")),
            ("docker.io/fluxcd/flux", Some("hub")),
            ("127.0.0.1:5000/app", Some("local")),
            ("127.0.0.1:5001/app", None),
            ("quay.io/x/y", None),
        ];
        for (image, want) in cases {
            assert_eq!(user(&keys, image).as_deref(), want, "{image}");
        }
    }

    #[test]
    fn auth_field_is_base64_user_colon_password() {
        let config = br#"{"auths":{"ghcr.io":{"auth":"dXNlcjpwYTpzcw=="}}}"#;
        let image = ImageRef::parse("ghcr.io/a/b", false).unwrap();
        let creds = keyring_match(config, &image).unwrap().unwrap();
        assert_eq!(
            (creds.username.as_str(), creds.password.as_str()),
            ("user", "pa:ss")
        );
        let bad = br#"{"auths":{"ghcr.io":{"auth":"!!"}}}"#;
        assert!(
            keyring_match(bad, &image)
                .unwrap_err()
                .starts_with("invalid auth")
        );
        assert!(
            keyring_match(b"{", &image)
                .unwrap_err()
                .starts_with("invalid .dockerconfigjson")
        );
    }
}
