//! From `spec.sourceRef` to a verified local directory: resolve the source object, download
//! its artifact, verify the digest, extract it safely, and cache the tree by digest.
//!
//! ```text
//! get_artifact(client, ks, ..)  -> ResolvedSource { artifact, .. }     (resolve.rs)
//! Fetcher::fetch(&artifact)     -> ArtifactTree (cached by digest)      (fetch.rs, extract.rs, cache.rs)
//! resolve_path(tree.root(), spec.path) -> directory to build            (path.rs)
//! ```

mod cache;
mod digest;
pub mod extract;
pub(crate) mod fetch;
pub mod path;
pub mod resolve;
pub(crate) mod symlinks;
#[cfg(test)]
pub(crate) mod test_archive;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::api::conditions::reason;
use crate::api::duration;
use crate::api::source::Artifact;
use crate::error::{Retry, StepError};

pub use cache::ArtifactTree;
pub(crate) use cache::CACHE_PREFIX;
pub use digest::{ArtifactDigest, DigestError};
pub use extract::{ExtractError, ExtractLimits, ExtractStats, extract};
pub use path::resolve_path;
pub(crate) use resolve::{CachedSources, get_artifact_cached};
pub use resolve::{ResolvedSource, SourceAccess, get_artifact};

/// Limits and timeouts of artifact fetching.
#[derive(Clone, Debug)]
pub struct FetcherConfig {
    /// Parent of the cache directory; a fresh private directory is made inside and removed
    /// when the fetcher is dropped.
    pub cache_dir: PathBuf,
    /// Maximum size of a downloaded (compressed) artifact.
    pub max_artifact_bytes: u64,
    /// Bound on the extracted trees kept on disk; least recently used trees not in use are
    /// evicted beyond it.
    pub max_cache_bytes: u64,
    /// Bounds on one extracted archive.
    pub extract_limits: ExtractLimits,
    /// Retries after a failed download attempt (Flux's `--http-retry`).
    pub retries: u32,
    /// Wait before the first retry; doubled per retry up to `retry_wait_max`.
    pub retry_wait_min: Duration,
    pub retry_wait_max: Duration,
    /// Time allowed to open the connection.
    pub connect_timeout: Duration,
    /// Time allowed between bytes: for the response headers and for each body chunk. A
    /// stalled server fails the attempt instead of hanging the reconcile.
    pub read_timeout: Duration,
    /// Replaces `host[:port]` of artifact URLs, for running the controller outside the cluster.
    pub host_override: LocalHosts,
}

/// Flux's `SOURCE_CONTROLLER_LOCALHOST` and `SOURCE_WATCHER_LOCALHOST`: the `host[:port]` that
/// replaces the host of artifact URLs served by source-controller, or by source-watcher.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalHosts {
    pub source_controller: Option<String>,
    pub source_watcher: Option<String>,
}

impl LocalHosts {
    /// From the environment as Flux reads it; an empty variable is unset.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Self {
        let read = |name: &str| var(name).filter(|host| !host.is_empty());
        Self {
            source_controller: read("SOURCE_CONTROLLER_LOCALHOST"),
            source_watcher: read("SOURCE_WATCHER_LOCALHOST"),
        }
    }

    /// The host for `url`: source-watcher's for its URLs (Flux tells them by `//source-watcher`
    /// in the URL), source-controller's for every other.
    pub fn for_url(&self, url: &str) -> Option<&str> {
        if url.contains("//source-watcher") {
            self.source_watcher.as_deref()
        } else {
            self.source_controller.as_deref()
        }
    }
}

impl FetcherConfig {
    /// The wait before retry number `retry` (from 0): doubling from `retry_wait_min`, capped
    /// at `retry_wait_max`.
    pub fn retry_wait(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.min(16));
        self.retry_wait_min
            .saturating_mul(factor)
            .min(self.retry_wait_max)
    }
}

impl Default for FetcherConfig {
    fn default() -> Self {
        Self {
            cache_dir: std::env::temp_dir(),
            max_artifact_bytes: 512 << 20,
            max_cache_bytes: 1 << 30,
            extract_limits: ExtractLimits::default(),
            // Flux's defaults: --http-retry=9, waits between 5s and 30s.
            retries: 9,
            retry_wait_min: Duration::from_secs(5),
            retry_wait_max: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
            host_override: LocalHosts::default(),
        }
    }
}

/// Why the source step failed. Knows its Flux condition reason and how to retry.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// `--no-cross-namespace-refs` forbids this sourceRef.
    #[error("can't access '{kind}/{namespace}/{name}', cross-namespace references have been blocked")]
    CrossNamespaceBlocked {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// `sourceRef.kind: ExternalArtifact` while the `ExternalArtifact` gate is off.
    #[error("can't access 'ExternalArtifact/{namespace}/{name}', ExternalArtifact feature gate is disabled")]
    ExternalArtifactDisabled { namespace: String, name: String },
    /// The source object does not exist; the message is the API server's.
    #[error("{message}")]
    SourceNotFound {
        kind: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
    /// Reading the source object failed for another reason (transient).
    #[error("unable to get source '{namespace}/{name}': {source}")]
    SourceUnreadable {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// `status.artifact` is there but not readable.
    #[error("unable to get source '{namespace}/{name}': invalid status.artifact: {source}")]
    InvalidArtifact {
        namespace: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    /// The source has no artifact yet.
    #[error("Source artifact not found for '{kind}/{namespace}/{name}'")]
    NoArtifact {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// The artifact server answered 404: the source is being updated.
    #[error("artifact not found at {url}")]
    ArtifactNotFound { url: String },
    /// Connection, timeout or HTTP status failure after the retries.
    #[error("failed to download archive from {url}: {cause}")]
    Download { url: String, cause: String },
    #[error(
        "failed to download archive from {url}: artifact is larger than the max download size of {limit} bytes"
    )]
    TooLarge { url: String, limit: u64 },
    #[error("failed to verify archive from {url}: {source}")]
    Verify {
        url: String,
        #[source]
        source: DigestError,
    },
    #[error("failed to extract archive from {url}: {source}")]
    Extract {
        url: String,
        #[source]
        source: ExtractError,
    },
    /// Local disk trouble while storing the artifact.
    #[error("tmp dir error: {context}: {source}")]
    Storage {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// Flux's message, with `path` relative to the artifact root.
    #[error("kustomization path not found: stat {}: {}", .path.display(), io_text(*.cause))]
    PathNotFound {
        path: PathBuf,
        cause: std::io::ErrorKind,
    },
    #[error("kustomization path '{spec_path}': too many levels of symbolic links")]
    PathSymlinkLoop { spec_path: String },
}

/// Go's wording for the stat errors users see in Flux's messages.
fn io_text(kind: std::io::ErrorKind) -> String {
    match kind {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::NotADirectory => "not a directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        other => other.to_string(),
    }
}

impl StepError for SourceError {
    fn reason(&self) -> &'static str {
        match self {
            Self::CrossNamespaceBlocked { .. } | Self::ExternalArtifactDisabled { .. } => {
                reason::ACCESS_DENIED
            }
            Self::Storage { .. } => reason::DIRECTORY_CREATION_FAILED,
            _ => reason::ARTIFACT_FAILED,
        }
    }

    /// Flux's requeue rules: a blocked source is a configuration error; a source whose
    /// artifact is not there yet (or not the one its status names) is waited for like a
    /// dependency; a source that cannot be
    /// read or an artifact that cannot be understood backs off; the rest retry on the
    /// Kustomization's retry interval.
    fn retry(&self) -> Retry {
        match self {
            Self::CrossNamespaceBlocked { .. } | Self::ExternalArtifactDisabled { .. } => Retry::Terminal,
            Self::SourceUnreadable { .. } | Self::InvalidArtifact { .. } => Retry::Backoff,
            Self::NoArtifact { .. } | Self::ArtifactNotFound { .. } => Retry::Dependency,
            Self::Verify { source, .. } if source.is_mismatch() => Retry::Dependency,
            _ => Retry::RetryInterval,
        }
    }

    /// Flux's exact text: it states the retry delay instead of the details where the
    /// artifact is not there yet.
    fn condition_message(&self, requeue_dependency: Duration) -> String {
        let after = duration::format(requeue_dependency);
        match self {
            Self::NoArtifact { .. } => format!("Source artifact not found, retrying in {after}"),
            Self::ArtifactNotFound { .. } => {
                format!("Source is not ready, artifact not found, retrying in {after}")
            }
            // The source moved on while this pass read it: its status names the new artifact
            // soon (Flux v1.10.1).
            Self::Verify { source, .. } if source.is_mismatch() => {
                format!("Source is not ready, artifact digest changed, retrying in {after}")
            }
            other => other.to_string(),
        }
    }

    /// Flux says nothing about a source or artifact that does not exist yet, and warns about
    /// access errors.
    fn warns(&self) -> bool {
        self.is_terminal()
    }
}

/// Downloads artifacts and hands out their extracted trees, cached by digest. Cheap to
/// clone; clones share the cache. Dropping the last clone removes the cache directory (trees
/// still in use go when their [`ArtifactTree`] is dropped).
#[derive(Clone)]
pub struct Fetcher {
    inner: Arc<fetch::FetchInner>,
}

impl Fetcher {
    pub fn new(config: FetcherConfig) -> Result<Self, SourceError> {
        Ok(Self {
            inner: Arc::new(fetch::FetchInner::new(config)?),
        })
    }

    /// What this fetcher was made with.
    pub fn config(&self) -> &FetcherConfig {
        &self.inner.config
    }

    /// The extracted tree of `artifact`: from the cache when its digest was fetched before,
    /// else downloaded, verified and extracted. Concurrent calls for one digest download once.
    /// The work runs in its own task, so a cancelled caller leaves no half-written tree.
    pub async fn fetch(&self, artifact: &Artifact) -> Result<ArtifactTree, SourceError> {
        let inner = self.inner.clone();
        let artifact = artifact.clone();
        match tokio::spawn(async move { inner.fetch(&artifact).await }).await {
            Ok(result) => result,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(join) => Err(SourceError::Storage {
                context: "artifact fetch task".into(),
                source: std::io::Error::other(join),
            }),
        }
    }
}

/// `url` with its `host[:port]` replaced by `host`; credentials and the rest are kept.
pub(crate) fn override_host(url: &str, host: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest
        .find(['/', '?', '#'])
        .map_or((rest, ""), |i| rest.split_at(i));
    let userinfo = authority
        .rsplit_once('@')
        .map(|(user, _)| format!("{user}@"))
        .unwrap_or_default();
    format!("{scheme}://{userinfo}{host}{path}")
}

/// The URL without credentials or query (which may carry tokens), for errors and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let path = match path.split_once('?') {
        Some((path, _)) => format!("{path}?<redacted>"),
        None => path.to_string(),
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{host}{path}"),
        None => format!("{host}{path}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_waits_double_within_bounds() {
        let config = FetcherConfig::default();
        let waits: Vec<u64> = (0..5).map(|r| config.retry_wait(r).as_secs()).collect();
        // Flux's retry client waits between 5s and 30s.
        assert_eq!(waits, [5, 10, 20, 30, 30]);
    }

    #[test]
    fn urls_lose_credentials_and_queries() {
        assert_eq!(
            redact_url("https://user:pa55@bucket.example/a/b.tar.gz?X-Amz-Signature=s3cr3t"),
            "https://bucket.example/a/b.tar.gz?<redacted>"
        );
        assert_eq!(
            redact_url("http://source-controller.flux-system.svc/gitrepository/ns/app/1.tar.gz"),
            "http://source-controller.flux-system.svc/gitrepository/ns/app/1.tar.gz"
        );
    }

    #[test]
    fn the_host_override_replaces_host_and_port_only() {
        let url = "http://source-controller.flux-system.svc.cluster.local./gitrepository/ns/app/abc.tar.gz";
        assert_eq!(
            override_host(url, "localhost:9090"),
            "http://localhost:9090/gitrepository/ns/app/abc.tar.gz"
        );
        assert_eq!(override_host("https://u:p@h:1?x=1", "l"), "https://u:p@l?x=1");
    }

    // Before, neither variable was read: a controller run outside the cluster could not reach
    // the artifacts.
    #[test]
    fn local_hosts_are_read_as_flux_reads_them() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| value.to_string())
            }
        };
        let hosts = LocalHosts::from_env(env(&[
            ("SOURCE_CONTROLLER_LOCALHOST", "localhost:9090"),
            ("SOURCE_WATCHER_LOCALHOST", "localhost:9091"),
        ]));
        let controller =
            "http://source-controller.flux-system.svc.cluster.local./gitrepository/ns/app/a.tar.gz";
        let watcher =
            "http://source-watcher.flux-system.svc.cluster.local./artifactgenerator/ns/app/a.tar.gz";
        assert_eq!(hosts.for_url(controller), Some("localhost:9090"));
        assert_eq!(hosts.for_url(watcher), Some("localhost:9091"));
        // Only source-controller's set: source-watcher's URLs keep their host, as in Flux.
        let hosts = LocalHosts::from_env(env(&[
            ("SOURCE_CONTROLLER_LOCALHOST", "localhost:9090"),
            ("SOURCE_WATCHER_LOCALHOST", ""),
        ]));
        assert_eq!(hosts.for_url(watcher), None);
        assert_eq!(hosts.for_url(controller), Some("localhost:9090"));
        assert_eq!(LocalHosts::from_env(env(&[])), LocalHosts::default());
    }

    #[test]
    fn flux_requeue_rules() {
        let dep = Duration::from_secs(30);
        let no_artifact = SourceError::NoArtifact {
            kind: "GitRepository",
            namespace: "ns".into(),
            name: "app".into(),
        };
        let gone = SourceError::ArtifactNotFound {
            url: "http://x/a.tar.gz".into(),
        };
        let missing = SourceError::SourceNotFound {
            kind: "GitRepository",
            namespace: "ns".into(),
            name: "app".into(),
            message: "gitrepositories.source.toolkit.fluxcd.io \"app\" not found".into(),
        };
        let blocked = SourceError::CrossNamespaceBlocked {
            kind: "GitRepository",
            namespace: "other".into(),
            name: "app".into(),
        };
        let changed = SourceError::Verify {
            url: "http://x/a.tar.gz".into(),
            source: DigestError::Mismatch {
                expected: "sha256:abc".into(),
            },
        };
        let malformed = SourceError::Verify {
            url: "http://x/a.tar.gz".into(),
            source: DigestError::InvalidFormat("sha256:abc".into()),
        };
        let retries = [
            (&no_artifact, Retry::Dependency),
            (&changed, Retry::Dependency),
            (&malformed, Retry::RetryInterval),
            (&gone, Retry::Dependency),
            (&missing, Retry::RetryInterval),
            (&blocked, Retry::Terminal),
        ];
        for (error, retry) in retries {
            assert_eq!(error.retry(), retry, "{error}");
        }
        assert_eq!(
            no_artifact.condition_message(dep),
            "Source artifact not found, retrying in 30s"
        );
        assert_eq!(
            gone.condition_message(dep),
            "Source is not ready, artifact not found, retrying in 30s"
        );
        // Before, a digest mismatch waited the retry interval with the fetch error.
        assert_eq!(
            changed.condition_message(dep),
            "Source is not ready, artifact digest changed, retrying in 30s"
        );
        assert_eq!(changed.reason(), "ArtifactFailed");
        assert_eq!(missing.reason(), "ArtifactFailed");
        assert!(blocked.is_terminal());
        assert_eq!(blocked.reason(), "AccessDenied");
    }
}
