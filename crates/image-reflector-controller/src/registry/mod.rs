//! Talking to an OCI registry the way go-containerregistry's `remote` package does for Flux:
//! the `/v2/` ping and its challenge, Basic or Bearer-token auth, the tag list with `Link`
//! paging, and a manifest's digest. Every request is bounded in time (a per-request timeout
//! and the scan's deadline) and every body in size; messages name the URL, never credentials.

mod challenge;
mod client;
mod link;
mod proxy;
mod reference;
mod response;

use std::time::Duration;

use thiserror::Error;
use url::Url;

pub use client::{Credentials, Limits, RegistryClient, TlsOptions};
pub use proxy::{Proxy, ProxyScheme};
pub use reference::{ImageError, ImageRef};

/// Why a registry operation failed. Only an invalid image is terminal; the rest are worth a
/// retry (Flux's `ReadOperationFailed` with backoff).
#[derive(Debug, Error)]
pub enum RegistryError {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error("invalid TLS configuration: {0}")]
    Tls(String),
    #[error("invalid tag '{tag}'")]
    InvalidTag { tag: String },
    /// No HTTP response: connection refused, DNS, TLS handshake, reset.
    #[error("{method} {url}: {cause}")]
    Transport {
        method: &'static str,
        url: String,
        cause: String,
    },
    #[error("{method} {url}: {cause}")]
    Timeout {
        method: &'static str,
        url: String,
        cause: String,
    },
    /// An HTTP status other than the one expected; `detail` is the registry's error codes
    /// (`NAME_UNKNOWN: repository name not known to registry`) or the status line.
    #[error("{method} {url}: {detail}")]
    Status {
        method: &'static str,
        url: String,
        status: u16,
        detail: String,
        retry_after: Option<Duration>,
    },
    /// A response that is not what the protocol says: HTML, bad JSON, a bad challenge or Link.
    #[error("{method} {url}: {cause}")]
    InvalidResponse {
        method: &'static str,
        url: String,
        cause: String,
    },
    #[error("{method} {url}: response body larger than {limit} bytes")]
    BodyTooLarge {
        method: &'static str,
        url: String,
        limit: usize,
    },
    #[error(
        "GET {url}: more than {limit} pages of tags (raise the page limit or check the registry's Link headers)"
    )]
    TooManyPages { url: String, limit: u32 },
    #[error("GET {url}: more than {limit} tags")]
    TooManyTags { url: String, limit: usize },
}

impl RegistryError {
    /// Whether retrying cannot help until the object changes.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Image(_) | Self::Tls(_))
    }

    /// The HTTP status the registry answered with, if any.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The registry's `Retry-After` (seconds) on a 429 or 503.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A URL for messages and logs: without user info (a realm or Link could carry some).
pub(crate) fn display_url(url: &Url) -> String {
    if url.username().is_empty() && url.password().is_none() {
        return url.to_string();
    }
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}
