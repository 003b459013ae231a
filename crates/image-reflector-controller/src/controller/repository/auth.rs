//! Credentials and TLS settings of a scan from the Secrets an ImageRepository names:
//! `secretRef` (a `kubernetes.io/dockerconfigjson` Secret, matched by registry the way the
//! kubelet's keyring does) and `certSecretRef` (`ca.crt`, `tls.crt`, `tls.key`).

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::{Api, Client};
use serde::Deserialize;

use crate::api::image_repository::Provider;
use crate::registry::{Credentials, ImageRef, Proxy, TlsOptions};

const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";
const DOCKERCFG_KEY: &str = ".dockercfg";

/// Why the credentials could not be built; the condition prefixes Flux's
/// `failed to configure authentication options: `.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    /// Flux's text is the API's (`secrets "docker" not found`).
    #[error("{0}")]
    Read(String),
    #[error("secret '{secret}': {cause}")]
    DockerConfig { secret: String, cause: String },
    /// Flux's words (`secret '<ns>/<name>': key 'address' not found`).
    #[error("secret '{secret}': {cause}")]
    Proxy { secret: String, cause: String },
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

#[derive(Deserialize, Default)]
pub(crate) struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

/// The credentials for `image` from docker configs in the order Flux merges them (`secretRef`,
/// then the ServiceAccount's `imagePullSecrets`): the entry whose host equals the registry's
/// and whose path is the longest prefix of the repository, the first on a tie; none means
/// anonymous. An error names the Secret.
pub(crate) fn keyring_match(
    configs: &[(String, DockerConfig)],
    image: &ImageRef,
) -> Result<Option<Credentials>, AuthError> {
    let registry = normal_host(image.registry());
    let mut best: Option<(usize, &str, &Entry)> = None;
    for (secret, config) in configs {
        for (key, entry) in &config.auths {
            let (host, path) = split_key(key);
            if normal_host(host) != registry || !path_prefix(path, image.repository()) {
                continue;
            }
            if best.is_none_or(|(len, _, _)| path.len() > len) {
                best = Some((path.len(), secret.as_str(), entry));
            }
        }
    }
    let Some((_, secret, entry)) = best else {
        return Ok(None);
    };
    credentials(entry)
        .map(Some)
        .map_err(|cause| AuthError::DockerConfig {
            secret: secret.to_string(),
            cause,
        })
}

/// A Secret's docker config: `.dockerconfigjson`, or the older `.dockercfg` (the `auths`
/// map alone); a Secret with neither adds no entries.
pub(crate) fn docker_config(
    secret: &str,
    data: &BTreeMap<String, ByteString>,
) -> Result<DockerConfig, AuthError> {
    let invalid = |key: &str, e: serde_json::Error| AuthError::DockerConfig {
        secret: secret.to_string(),
        cause: format!("invalid {key}: {e}"),
    };
    if let Some(ByteString(bytes)) = data.get(DOCKER_CONFIG_KEY) {
        return serde_json::from_slice(bytes).map_err(|e| invalid(DOCKER_CONFIG_KEY, e));
    }
    if let Some(ByteString(bytes)) = data.get(DOCKERCFG_KEY) {
        let auths = serde_json::from_slice(bytes).map_err(|e| invalid(DOCKERCFG_KEY, e))?;
        return Ok(DockerConfig { auths });
    }
    Ok(DockerConfig::default())
}

/// `proxySecretRef`'s Secret as Flux reads it: `address` required, `username` and
/// `password` optional.
pub(crate) fn proxy_from_secret(
    secret: &str,
    data: &BTreeMap<String, ByteString>,
) -> Result<Proxy, AuthError> {
    let text = |key: &str| {
        data.get(key)
            .map(|ByteString(bytes)| String::from_utf8_lossy(bytes).into_owned())
    };
    let address = text("address").ok_or_else(|| AuthError::Proxy {
        secret: secret.to_string(),
        cause: "key 'address' not found".into(),
    })?;
    Proxy::parse(&address, text("username"), text("password")).map_err(|cause| AuthError::Proxy {
        secret: secret.to_string(),
        cause,
    })
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
    pub proxy: Option<Proxy>,
}

/// The Secrets and ServiceAccount an ImageRepository names.
pub(crate) struct AuthRefs<'a> {
    pub secret_ref: Option<&'a str>,
    pub cert_secret_ref: Option<&'a str>,
    pub proxy_secret_ref: Option<&'a str>,
    pub service_account_name: Option<&'a str>,
}

/// Whether this controller can log in as `provider` asks: only `generic` (docker configs).
/// Cloud contextual login (aws, azure, gcp) is not implemented, so such an object is stalled
/// with this message until its provider changes, rather than scanned anonymously.
pub(crate) fn provider_supported(provider: Provider) -> Result<(), String> {
    match provider {
        Provider::Generic => Ok(()),
        cloud => Err(format!(
            "spec.provider '{}' is not supported by this image-reflector-controller: contextual \
             login to aws, azure and gcp registries is not implemented; use provider 'generic' \
             with spec.secretRef or spec.serviceAccountName",
            cloud.as_str()
        )),
    }
}

/// Why a Secret could not be read.
enum Missing {
    NotFound,
    Other(String),
}

impl Missing {
    /// The API server's words, as Flux reports `secretRef` and `certSecretRef` reads.
    fn api_text(self, name: &str) -> String {
        match self {
            Self::NotFound => format!("secrets \"{name}\" not found"),
            Self::Other(text) => text,
        }
    }
}

/// A Secret's data, read once per pass however many references name it.
async fn get_secret<'m>(
    secrets: &Api<Secret>,
    read: &'m mut BTreeMap<String, BTreeMap<String, ByteString>>,
    name: &str,
) -> Result<&'m BTreeMap<String, ByteString>, Missing> {
    if !read.contains_key(name) {
        let secret = secrets.get(name).await.map_err(|e| match e {
            kube::Error::Api(status) if status.code == 404 => Missing::NotFound,
            kube::Error::Api(status) => Missing::Other(status.message),
            other => Missing::Other(other.to_string()),
        })?;
        read.insert(name.to_string(), secret.data.unwrap_or_default());
    }
    Ok(&read[name])
}

/// Reads what the spec names in Flux's order (proxy, certificate, `secretRef`, then the
/// ServiceAccount's pull secrets), each Secret once.
pub(crate) async fn scan_auth(
    client: &Client,
    namespace: &str,
    refs: &AuthRefs<'_>,
    image: &ImageRef,
) -> Result<ScanAuth, AuthError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut read: BTreeMap<String, BTreeMap<String, ByteString>> = BTreeMap::new();
    let proxy = match refs.proxy_secret_ref {
        Some(name) => {
            let data = get_secret(&secrets, &mut read, name).await.map_err(|e| match e {
                Missing::NotFound => AuthError::Read(format!("secret '{namespace}/{name}' not found")),
                Missing::Other(text) => {
                    AuthError::Read(format!("failed to get secret '{namespace}/{name}': {text}"))
                }
            })?;
            Some(proxy_from_secret(&format!("{namespace}/{name}"), data)?)
        }
        None => None,
    };
    for name in refs.secret_ref.iter().chain(refs.cert_secret_ref.iter()) {
        // Flux reports these reads with the API's own words.
        get_secret(&secrets, &mut read, name)
            .await
            .map_err(|e| AuthError::Read(e.api_text(name)))?;
    }
    let mut configs = Vec::new();
    if let Some(name) = refs.secret_ref {
        configs.push((name.to_string(), docker_config(name, &read[name])?));
    }
    if let Some(sa) = refs.service_account_name {
        let sa_key = format!("{namespace}/{sa}");
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        let account = accounts.get(sa).await.map_err(|e| match e {
            kube::Error::Api(status) if status.code == 404 => {
                AuthError::Read(format!("serviceaccount '{sa_key}' not found"))
            }
            other => AuthError::Read(format!("failed to get serviceaccount '{sa_key}': {other}")),
        })?;
        for pull in account.image_pull_secrets.unwrap_or_default() {
            let name = pull.name;
            let data = get_secret(&secrets, &mut read, &name).await.map_err(|e| {
                let why = match e {
                    Missing::NotFound => format!("secret '{namespace}/{name}' not found"),
                    Missing::Other(text) => format!("failed to get secret '{namespace}/{name}': {text}"),
                };
                AuthError::Read(format!(
                    "failed to get image pull secret for serviceaccount '{sa_key}': {why}"
                ))
            })?;
            configs.push((name.clone(), docker_config(&name, data)?));
        }
    }
    let credentials = keyring_match(&configs, image)?;
    let tls = refs.cert_secret_ref.map_or_else(TlsOptions::default, |name| {
        let data = &read[name];
        let field = |key: &str| data.get(key).map(|ByteString(bytes)| bytes.clone());
        TlsOptions {
            ca_pem: field("ca.crt"),
            client_cert_pem: field("tls.crt"),
            client_key_pem: field("tls.key"),
        }
    });
    Ok(ScanAuth {
        credentials,
        tls,
        proxy,
    })
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

    fn secret(name: &str, key: &str, bytes: &[u8]) -> (String, DockerConfig) {
        let data = BTreeMap::from([(key.to_string(), ByteString(bytes.to_vec()))]);
        (name.to_string(), docker_config(name, &data).unwrap())
    }

    fn user(configs: &[(String, DockerConfig)], image: &str) -> Option<String> {
        let image = ImageRef::parse(image, false).unwrap();
        keyring_match(configs, &image).unwrap().map(|c| c.username)
    }

    #[test]
    fn the_longest_matching_key_of_the_registry_wins() {
        let keys = [secret(
            "s",
            DOCKER_CONFIG_KEY,
            &config(&[
                ("ghcr.io", "host"),
                ("ghcr.io/org", "org"),
                ("ghcr.io/org/app", "app"),
                ("https://index.docker.io/v1/", "hub"),
                ("127.0.0.1:5000", "local"),
            ]),
        )];
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
    fn secrets_merge_longest_key_first_then_earliest_secret() {
        // secretRef first, then the ServiceAccount's pull secrets (one in the old format).
        let configs = [
            secret("ref", DOCKER_CONFIG_KEY, &config(&[("ghcr.io", "ref")])),
            secret(
                "pull-a",
                DOCKER_CONFIG_KEY,
                &config(&[("ghcr.io", "a"), ("ghcr.io/org", "a-org")]),
            ),
            secret(
                "pull-b",
                DOCKERCFG_KEY,
                br#"{"quay.io":{"username":"b","password":"p"}}"#,
            ),
        ];
        assert_eq!(user(&configs, "ghcr.io/x/y").as_deref(), Some("ref"));
        assert_eq!(user(&configs, "ghcr.io/org/y").as_deref(), Some("a-org"));
        assert_eq!(user(&configs, "quay.io/x/y").as_deref(), Some("b"));
        assert_eq!(user(&configs, "docker.io/x/y"), None);
    }

    #[test]
    fn auth_field_is_base64_user_colon_password() {
        let image = ImageRef::parse("ghcr.io/a/b", false).unwrap();
        let good = [secret(
            "s",
            DOCKER_CONFIG_KEY,
            br#"{"auths":{"ghcr.io":{"auth":"dXNlcjpwYTpzcw=="}}}"#,
        )];
        let creds = keyring_match(&good, &image).unwrap().unwrap();
        assert_eq!(
            (creds.username.as_str(), creds.password.as_str()),
            ("user", "pa:ss")
        );
        let bad = [secret(
            "bad",
            DOCKER_CONFIG_KEY,
            br#"{"auths":{"ghcr.io":{"auth":"!!"}}}"#,
        )];
        let error = keyring_match(&bad, &image).unwrap_err().to_string();
        assert!(error.starts_with("secret 'bad': invalid auth"), "{error}");
        let data = BTreeMap::from([(DOCKER_CONFIG_KEY.to_string(), ByteString(b"{".to_vec()))]);
        let error = docker_config("broken", &data).err().unwrap().to_string();
        assert!(
            error.starts_with("secret 'broken': invalid .dockerconfigjson"),
            "{error}"
        );
    }

    #[test]
    fn only_the_generic_provider_is_served() {
        assert_eq!(provider_supported(Provider::Generic), Ok(()));
        for (provider, name) in [
            (Provider::Aws, "aws"),
            (Provider::Azure, "azure"),
            (Provider::Gcp, "gcp"),
        ] {
            let message = provider_supported(provider).unwrap_err();
            assert!(
                message.starts_with(&format!("spec.provider '{name}' is not supported")),
                "{message}"
            );
        }
    }

    #[test]
    fn proxy_secret_needs_an_address_and_names_itself() {
        let data = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>()
        };
        let error = proxy_from_secret("ns/p", &data(&[("username", "u")])).unwrap_err();
        assert_eq!(error.to_string(), "secret 'ns/p': key 'address' not found");
        let error = proxy_from_secret("ns/p", &data(&[("address", "gopher://h:70")])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "secret 'ns/p': proxy URL must use one of the supported schemes (http, https, socks5), got 'gopher'"
        );
        let proxy = proxy_from_secret(
            "ns/p",
            &data(&[
                ("address", "socks5://h:1080"),
                ("username", "u"),
                ("password", "pw"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (
                proxy.address(),
                proxy.username.as_deref(),
                proxy.password.as_deref()
            ),
            ("socks5://h:1080".to_string(), Some("u"), Some("pw"))
        );
    }
}
