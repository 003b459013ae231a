//! Downloading an artifact over HTTP(S): streamed to disk, hashed on the way, bounded in size
//! and time, retried on transient failures; then extracted into the cache.

use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{StatusCode, header};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncWriteExt;

use super::cache::{ArtifactTree, TreeCache};
use super::digest::{ArtifactDigest, Hasher};
use super::{FetcherConfig, SourceError, extract, override_host, redact_url};
use crate::api::duration;
use crate::api::source::Artifact;

/// The state behind a `Fetcher`: one HTTP client (connections are reused) and the cache.
pub(crate) struct FetchInner {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    cache: TreeCache,
    pub(super) config: FetcherConfig,
}

/// An HTTP(S) connector verifying servers against the system's CA certificates (none found:
/// HTTPS fails to verify, plain HTTP still works, as source-controller serves in-cluster).
pub(crate) fn https_connector(
    connect_timeout: std::time::Duration,
) -> Result<HttpsConnector<HttpConnector>, rustls::Error> {
    tls_connector(HttpConnector::new(), connect_timeout)
}

/// `http` (with any resolver) wrapped in TLS with the system roots, HTTP/1.
pub(crate) fn tls_connector<R>(
    mut http: HttpConnector<R>,
    connect_timeout: std::time::Duration,
) -> Result<HttpsConnector<HttpConnector<R>>, rustls::Error> {
    http.set_connect_timeout(Some(connect_timeout));
    http.enforce_http(false);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = match HttpsConnectorBuilder::new().with_provider_and_native_roots(provider.clone()) {
        Ok(builder) => builder,
        Err(e) => {
            tracing::warn!(error = %e, "no system CA certificates; HTTPS URLs will fail to verify");
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    Ok(tls.https_or_http().enable_http1().wrap_connector(http))
}

/// How one download attempt ended, when it did not succeed.
enum Failure {
    /// Worth another attempt: connection trouble, timeouts, 5xx, 429.
    Transient(String),
    /// Final: 404, other statuses, size limit, digest mismatch, local I/O.
    Final(SourceError),
}

impl FetchInner {
    pub(crate) fn new(config: FetcherConfig) -> Result<Self, SourceError> {
        let https = https_connector(config.connect_timeout).map_err(|e| SourceError::Storage {
            context: "TLS setup".into(),
            source: std::io::Error::other(e),
        })?;
        let client = Client::builder(TokioExecutor::new()).build(https);
        let cache = TreeCache::new(&config.cache_dir, config.max_cache_bytes)?;
        Ok(Self {
            client,
            cache,
            config,
        })
    }

    pub(crate) async fn fetch(&self, artifact: &Artifact) -> Result<ArtifactTree, SourceError> {
        let raw_url = match self.config.host_override.for_url(&artifact.url) {
            Some(host) => override_host(&artifact.url, host),
            None => artifact.url.clone(),
        };
        let url = redact_url(&raw_url);
        let digest = ArtifactDigest::parse(artifact.digest.as_deref().unwrap_or("")).map_err(|source| {
            SourceError::Verify {
                url: url.clone(),
                source,
            }
        })?;
        let limit = self.config.max_artifact_bytes;
        if artifact
            .size
            .is_some_and(|size| u64::try_from(size).unwrap_or(0) > limit)
        {
            return Err(SourceError::TooLarge { url, limit });
        }
        self.cache
            .get_or_fill(&digest.to_string(), |dir| async move {
                let staged = tempfile::Builder::new()
                    .prefix("download-")
                    .tempfile_in(self.cache.staging_dir())
                    .map_err(|source| SourceError::Storage {
                        context: "create download file".into(),
                        source,
                    })?;
                self.download(&raw_url, &url, &digest, staged.path()).await?;
                let archive = staged.reopen().map_err(|source| SourceError::Storage {
                    context: "reopen download file".into(),
                    source,
                })?;
                let limits = self.config.extract_limits.clone();
                let extracted =
                    tokio::task::spawn_blocking(move || extract(BufReader::new(archive), &dir, &limits))
                        .await
                        .map_err(|e| SourceError::Storage {
                            context: "extraction task".into(),
                            source: std::io::Error::other(e),
                        })?;
                let stats = extracted.map_err(|source| SourceError::Extract {
                    url: url.clone(),
                    source,
                })?;
                tracing::debug!(url = %url, files = stats.files, bytes = stats.bytes, "artifact extracted");
                Ok(stats.bytes)
            })
            .await
    }

    /// Downloads `raw_url` into `dest` and checks the digest, retrying transient failures.
    /// `url` is the redacted form used in messages.
    async fn download(
        &self,
        raw_url: &str,
        url: &str,
        digest: &ArtifactDigest,
        dest: &Path,
    ) -> Result<(), SourceError> {
        let mut retry = 0;
        loop {
            match self.attempt(raw_url, url, digest, dest).await {
                Ok(()) => return Ok(()),
                Err(Failure::Final(error)) => return Err(error),
                Err(Failure::Transient(cause)) if retry < self.config.retries => {
                    let wait = self.config.retry_wait(retry);
                    tracing::info!(url, cause, retry = retry + 1, wait = %duration::format(wait), "artifact download failed, retrying");
                    tokio::time::sleep(wait).await;
                    retry += 1;
                }
                Err(Failure::Transient(cause)) => {
                    let cause = if retry == 0 {
                        cause
                    } else {
                        format!("{cause} (giving up after {} attempts)", retry + 1)
                    };
                    return Err(SourceError::Download {
                        url: url.into(),
                        cause,
                    });
                }
            }
        }
    }

    async fn attempt(
        &self,
        raw_url: &str,
        url: &str,
        digest: &ArtifactDigest,
        dest: &Path,
    ) -> Result<(), Failure> {
        let final_download = |cause: String| {
            Failure::Final(SourceError::Download {
                url: url.into(),
                cause,
            })
        };
        let uri: hyper::Uri = raw_url
            .parse()
            .map_err(|e| final_download(format!("invalid URL: {e}")))?;
        let request = hyper::Request::get(uri)
            .header(
                header::USER_AGENT,
                concat!("kustomize-controller/", env!("CARGO_PKG_VERSION")),
            )
            .body(Empty::new())
            .map_err(|e| final_download(format!("invalid request: {e}")))?;
        let read_timeout = self.config.read_timeout;
        let response = match tokio::time::timeout(read_timeout, self.client.request(request)).await {
            Err(_) => {
                return Err(Failure::Transient(format!(
                    "no response within {}",
                    duration::format(read_timeout)
                )));
            }
            Ok(Err(e)) => return Err(Failure::Transient(error_chain(&e))),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Err(Failure::Final(SourceError::ArtifactNotFound { url: url.into() }));
        }
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            return Err(Failure::Transient(format!("status: {status}")));
        }
        if status != StatusCode::OK {
            return Err(final_download(format!("status: {status}")));
        }
        let limit = self.config.max_artifact_bytes;
        let too_large = || {
            Failure::Final(SourceError::TooLarge {
                url: url.into(),
                limit,
            })
        };
        let announced = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if announced.is_some_and(|len| len > limit) {
            return Err(too_large());
        }

        let storage = |context: &str, source| {
            Failure::Final(SourceError::Storage {
                context: context.into(),
                source,
            })
        };
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(|e| storage("create download file", e))?;
        let mut hasher: Hasher = digest.hasher();
        let mut received: u64 = 0;
        let mut body = response.into_body();
        loop {
            let frame = match tokio::time::timeout(read_timeout, body.frame()).await {
                Err(_) => {
                    return Err(Failure::Transient(format!(
                        "no data for {} after {received} bytes",
                        duration::format(read_timeout)
                    )));
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err(Failure::Transient(format!(
                        "reading body after {received} bytes: {}",
                        error_chain(&e)
                    )));
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else { continue };
            received += data.len() as u64;
            if received > limit {
                return Err(too_large());
            }
            hasher.update(&data);
            file.write_all(&data)
                .await
                .map_err(|e| storage("write download file", e))?;
        }
        file.flush()
            .await
            .map_err(|e| storage("write download file", e))?;
        digest.verify(hasher).map_err(|source| {
            Failure::Final(SourceError::Verify {
                url: url.into(),
                source,
            })
        })
    }
}

/// An error and its causes on one line: hyper's top-level texts alone say little.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
