//! The HTTP side: one hyper client per TLS configuration, a fresh ping and token per
//! operation (as Flux builds a new transport every scan), bounded reads.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode, header};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tokio::time::Instant;
use url::Url;

use super::challenge::{Challenge, parse_challenge};
use super::link::next_page;
use super::proxy::{Proxy, Route};
use super::reference::is_valid_tag;
use super::response::{Fetched, error_chain, is_digest, is_html, status_error};
use super::{ImageRef, RegistryError, display_url};

const USER_AGENT: &str = concat!("image-reflector-controller/", env!("CARGO_PKG_VERSION"));
/// Every manifest kind ggcr's `remote.Head` accepts, so the digest is the one `docker pull`
/// would resolve (an index for multi-platform images).
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.v1+prettyjws, \
     application/vnd.docker.distribution.manifest.v1+json";
/// Enough of an error body (or a ping's) for the registry's error codes.
const SMALL_BODY: usize = 64 * 1024;
const TOKEN_BODY: usize = 1024 * 1024;

/// A username and password (or token) for Basic auth and the token service.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// `certSecretRef`: a CA trusted beyond the system's roots (`ca.crt`, appended as Flux
/// does) and a client certificate for mutual TLS (`tls.crt` and `tls.key`, PEM).
#[derive(Clone, Default)]
pub struct TlsOptions {
    pub ca_pem: Option<Vec<u8>>,
    pub client_cert_pem: Option<Vec<u8>>,
    pub client_key_pem: Option<Vec<u8>>,
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client_cert_pem", &self.client_cert_pem.is_some())
            .field(
                "client_key_pem",
                &self.client_key_pem.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Bounds on one listing; a registry that exceeds them fails the scan with a message rather
/// than holding memory or time.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `n` of `tags/list` (ggcr and Flux ask for 1000).
    pub page_size: u32,
    pub max_pages: u32,
    pub max_page_bytes: usize,
    pub max_tags: usize,
    /// Each request's own limit, within the operation's deadline.
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            page_size: 1000,
            max_pages: 100,
            // 1000 tags of 128 characters with JSON quoting fit in well under 1 MiB.
            max_page_bytes: 4 * 1024 * 1024,
            max_tags: 50_000,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Where requests go and how they are authorized, after the ping and token exchange.
struct Session {
    base: Url,
    authorization: Option<String>,
}

#[derive(Deserialize)]
struct TagList {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
}

/// A registry client for one TLS configuration.
pub struct RegistryClient {
    http: Client<HttpsConnector<Route>, Empty<Bytes>>,
    limits: Limits,
}

impl RegistryClient {
    pub fn new(tls: &TlsOptions, limits: Limits) -> Result<Self, RegistryError> {
        Self::with_proxy(tls, None, limits)
    }

    /// A client whose connections all go through `proxy` (`proxySecretRef`).
    pub fn with_proxy(tls: &TlsOptions, proxy: Option<Proxy>, limits: Limits) -> Result<Self, RegistryError> {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if let Some(pem) = &tls.ca_pem {
            let certs = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| RegistryError::Tls(format!("ca.crt: {e}")))?;
            if certs.is_empty() {
                return Err(RegistryError::Tls("ca.crt holds no PEM certificate".into()));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| RegistryError::Tls(format!("ca.crt: {e}")))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| RegistryError::Tls(e.to_string()))?
            .with_root_certificates(roots);
        let config = match (&tls.client_cert_pem, &tls.client_key_pem) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| RegistryError::Tls(format!("tls.crt: {e}")))?;
                if chain.is_empty() {
                    return Err(RegistryError::Tls("tls.crt holds no PEM certificate".into()));
                }
                // The key's text never goes into a message.
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|_| RegistryError::Tls("tls.key holds no PEM private key".into()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| RegistryError::Tls(format!("tls.crt and tls.key: {e}")))?
            }
            _ => {
                return Err(RegistryError::Tls(
                    "tls.crt and tls.key must be set together".into(),
                ));
            }
        };
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(limits.request_timeout));
        http.enforce_http(false);
        let to_proxy = HttpsConnectorBuilder::new()
            .with_tls_config(config.clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http.clone());
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http()
            .enable_http1()
            .wrap_connector(Route::new(http, to_proxy, proxy));
        let http = Client::builder(TokioExecutor::new()).build(https);
        Ok(Self { http, limits })
    }

    /// All tags of the repository, in the registry's order, following `Link` pages.
    pub async fn list_tags(
        &self,
        image: &ImageRef,
        credentials: Option<&Credentials>,
        deadline: Instant,
    ) -> Result<Vec<String>, RegistryError> {
        let session = self.session(image, credentials, deadline).await?;
        let mut url = endpoint(&session.base, &format!("v2/{}/tags/list", image.repository()))?;
        url.set_query(Some(&format!("n={}", self.limits.page_size)));
        let mut tags = Vec::new();
        for _ in 0..self.limits.max_pages {
            let fetched = self
                .send(
                    Method::GET,
                    &url,
                    session.authorization.as_deref(),
                    Some("application/json"),
                    self.limits.max_page_bytes,
                    deadline,
                )
                .await?;
            if fetched.status != StatusCode::OK {
                return Err(status_error("GET", &url, &fetched));
            }
            let invalid = |cause: String| RegistryError::InvalidResponse {
                method: "GET",
                url: display_url(&url),
                cause,
            };
            if is_html(&fetched) {
                return Err(invalid("expected a JSON tag list, got an HTML page".into()));
            }
            let page: TagList = serde_json::from_slice(&fetched.body)
                .map_err(|e| invalid(format!("invalid tag list: {e}")))?;
            let page = page.tags.unwrap_or_default();
            if let Some(bad) = page.iter().find(|tag| !is_valid_tag(tag)) {
                let shown: String = bad.chars().take(140).collect();
                return Err(invalid(format!("the tag list holds an invalid tag {shown:?}")));
            }
            if tags.len() + page.len() > self.limits.max_tags {
                return Err(RegistryError::TooManyTags {
                    url: display_url(&url),
                    limit: self.limits.max_tags,
                });
            }
            tags.extend(page);
            let links = fetched
                .headers
                .get_all(header::LINK)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
                .join(", ");
            match next_page(&links, &url).map_err(invalid)? {
                Some(next) => url = next,
                None => return Ok(tags),
            }
        }
        Err(RegistryError::TooManyPages {
            url: display_url(&url),
            limit: self.limits.max_pages,
        })
    }

    /// The digest `HEAD /v2/<repo>/manifests/<tag>` reports (`Docker-Content-Digest`).
    pub async fn manifest_digest(
        &self,
        image: &ImageRef,
        tag: &str,
        credentials: Option<&Credentials>,
        deadline: Instant,
    ) -> Result<String, RegistryError> {
        if !is_valid_tag(tag) {
            return Err(RegistryError::InvalidTag { tag: tag.into() });
        }
        let session = self.session(image, credentials, deadline).await?;
        let url = endpoint(
            &session.base,
            &format!("v2/{}/manifests/{tag}", image.repository()),
        )?;
        let fetched = self
            .send(
                Method::HEAD,
                &url,
                session.authorization.as_deref(),
                Some(MANIFEST_ACCEPT),
                0,
                deadline,
            )
            .await?;
        if fetched.status != StatusCode::OK {
            return Err(status_error("HEAD", &url, &fetched));
        }
        let digest = fetched
            .headers
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !is_digest(digest) {
            return Err(RegistryError::InvalidResponse {
                method: "HEAD",
                url: display_url(&url),
                cause: format!("no valid Docker-Content-Digest header (got {digest:?})"),
            });
        }
        Ok(digest.to_string())
    }

    /// Pings `/v2/` and turns its challenge into an `Authorization` value.
    async fn session(
        &self,
        image: &ImageRef,
        credentials: Option<&Credentials>,
        deadline: Instant,
    ) -> Result<Session, RegistryError> {
        let (base, challenge) = self.ping(image, deadline).await?;
        let authorization = match challenge {
            None => None,
            Some(Challenge::Basic) => credentials.map(basic),
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => {
                let mut scopes = vec![image.pull_scope()];
                scopes.extend(scope.filter(|s| *s != scopes[0]));
                let token = self
                    .token(&base, &realm, service.as_deref(), &scopes, credentials, deadline)
                    .await?;
                Some(format!("Bearer {token}"))
            }
        };
        Ok(Session { base, authorization })
    }

    /// HTTPS only, or for a registry that may use plain HTTP both at once, as ggcr does: the
    /// first to answer the ping properly wins, so a plain-HTTP server that never answers a TLS
    /// handshake costs nothing. When both fail, the HTTPS error leads (an HTTPS registry with
    /// an unknown CA answers plain HTTP with a 400 that would hide the certificate problem).
    async fn ping(
        &self,
        image: &ImageRef,
        deadline: Instant,
    ) -> Result<(Url, Option<Challenge>), RegistryError> {
        let https = self.ping_scheme(image, "https", deadline);
        if !image.plain_http_allowed() {
            return https.await;
        }
        let http = self.ping_scheme(image, "http", deadline);
        tokio::pin!(https, http);
        let (mut https_failed, mut http_failed) = (None, None);
        while https_failed.is_none() || http_failed.is_none() {
            tokio::select! {
                result = &mut https, if https_failed.is_none() => match result {
                    Ok(ping) => return Ok(ping),
                    Err(e) => https_failed = Some(e),
                },
                result = &mut http, if http_failed.is_none() => match result {
                    Ok(ping) => return Ok(ping),
                    Err(e) => http_failed = Some(e),
                },
            }
        }
        let plain = http_failed.expect("both failed");
        Err(match https_failed.expect("both failed") {
            RegistryError::Transport { method, url, cause } => RegistryError::Transport {
                method,
                url,
                cause: format!("{cause} (over plain HTTP: {plain})"),
            },
            RegistryError::Timeout { method, url, cause } => RegistryError::Timeout {
                method,
                url,
                cause: format!("{cause} (over plain HTTP: {plain})"),
            },
            // The registry answered over HTTPS: that answer is the one that matters.
            other => other,
        })
    }

    async fn ping_scheme(
        &self,
        image: &ImageRef,
        scheme: &str,
        deadline: Instant,
    ) -> Result<(Url, Option<Challenge>), RegistryError> {
        let base = Url::parse(&format!("{scheme}://{}/", image.registry())).map_err(|e| {
            RegistryError::InvalidResponse {
                method: "GET",
                url: format!("{scheme}://{}/", image.registry()),
                cause: format!("invalid registry URL: {e}"),
            }
        })?;
        let url = endpoint(&base, "v2/")?;
        let fetched = self
            .send(Method::GET, &url, None, None, SMALL_BODY, deadline)
            .await?;
        Ok((base, ping_challenge(&url, &fetched)?))
    }

    async fn token(
        &self,
        registry: &Url,
        realm: &str,
        service: Option<&str>,
        scopes: &[String],
        credentials: Option<&Credentials>,
        deadline: Instant,
    ) -> Result<String, RegistryError> {
        let mut url = Url::parse(realm)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| RegistryError::InvalidResponse {
                method: "GET",
                url: display_url(registry),
                cause: format!("the challenge's realm is not an http(s) URL: {realm}"),
            })?;
        {
            let mut query = url.query_pairs_mut();
            for scope in scopes {
                query.append_pair("scope", scope);
            }
            if let Some(service) = service {
                query.append_pair("service", service);
            }
        }
        let authorization = credentials.map(basic);
        let fetched = self
            .send(
                Method::GET,
                &url,
                authorization.as_deref(),
                Some("application/json"),
                TOKEN_BODY,
                deadline,
            )
            .await?;
        if fetched.status != StatusCode::OK {
            return Err(status_error("GET", &url, &fetched));
        }
        let response: TokenResponse =
            serde_json::from_slice(&fetched.body).map_err(|e| RegistryError::InvalidResponse {
                method: "GET",
                url: display_url(&url),
                cause: format!("invalid token response: {e}"),
            })?;
        response
            .token
            .filter(|t| !t.is_empty())
            .or(response.access_token.filter(|t| !t.is_empty()))
            .ok_or_else(|| RegistryError::InvalidResponse {
                method: "GET",
                url: display_url(&url),
                cause: "the token response holds no token".into(),
            })
    }

    /// One request with its body read up to `limit` bytes, within the request timeout and the
    /// operation's deadline. An error status keeps only what fits (for its error codes).
    async fn send(
        &self,
        method: Method,
        url: &Url,
        authorization: Option<&str>,
        accept: Option<&str>,
        limit: usize,
        deadline: Instant,
    ) -> Result<Fetched, RegistryError> {
        let method_name = if method == Method::HEAD { "HEAD" } else { "GET" };
        let shown = display_url(url);
        let mut request = Request::builder()
            .method(method.clone())
            .uri(&shown)
            .header(header::USER_AGENT, USER_AGENT);
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        if let Some(value) = accept {
            request = request.header(header::ACCEPT, value);
        }
        let request = request
            .body(Empty::new())
            .map_err(|e| RegistryError::InvalidResponse {
                method: method_name,
                url: shown.clone(),
                cause: format!("cannot build the request: {e}"),
            })?;
        let own_limit = Instant::now() + self.limits.request_timeout;
        let until = own_limit.min(deadline);
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| RegistryError::Transport {
                    method: method_name,
                    url: shown.clone(),
                    cause: error_chain(&e),
                })?;
            let (parts, mut body) = response.into_parts();
            let ok = parts.status.is_success();
            let limit = if ok { limit } else { limit.max(SMALL_BODY) };
            let mut collected = Vec::new();
            if method != Method::HEAD {
                while let Some(frame) = body.frame().await {
                    let frame = frame.map_err(|e| RegistryError::Transport {
                        method: method_name,
                        url: shown.clone(),
                        cause: error_chain(&e),
                    })?;
                    let Some(data) = frame.data_ref() else { continue };
                    if collected.len() + data.len() > limit {
                        if ok {
                            return Err(RegistryError::BodyTooLarge {
                                method: method_name,
                                url: shown.clone(),
                                limit,
                            });
                        }
                        break;
                    }
                    collected.extend_from_slice(data);
                }
            }
            Ok(Fetched {
                status: parts.status,
                headers: parts.headers,
                body: Bytes::from(collected),
            })
        };
        match tokio::time::timeout_at(until, exchange).await {
            Ok(result) => result,
            Err(_) => Err(RegistryError::Timeout {
                method: method_name,
                url: shown,
                cause: if until == deadline {
                    "timed out: the operation's deadline passed".into()
                } else {
                    format!(
                        "no complete response within {}s",
                        self.limits.request_timeout.as_secs_f64()
                    )
                },
            }),
        }
    }
}

fn endpoint(base: &Url, path: &str) -> Result<Url, RegistryError> {
    base.join(path).map_err(|e| RegistryError::InvalidResponse {
        method: "GET",
        url: display_url(base),
        cause: format!("cannot build the URL for {path}: {e}"),
    })
}

fn ping_challenge(url: &Url, fetched: &Fetched) -> Result<Option<Challenge>, RegistryError> {
    match fetched.status {
        StatusCode::OK => Ok(None),
        StatusCode::UNAUTHORIZED => {
            let value = fetched
                .headers
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            parse_challenge(value)
                .map(Some)
                .map_err(|cause| RegistryError::InvalidResponse {
                    method: "GET",
                    url: display_url(url),
                    cause,
                })
        }
        _ => Err(status_error("GET", url, fetched)),
    }
}

fn basic(credentials: &Credentials) -> String {
    let pair = format!("{}:{}", credentials.username, credentials.password);
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_debug_is_redacted() {
        let credentials = Credentials {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{credentials:?}").contains("hunter2"));
        assert_eq!(basic(&credentials), "Basic dTpodW50ZXIy");
    }
}
