//! Remote kustomize entries fetched over the network: Git repositories over smart HTTP
//! (a shallow fetch of one commit, checked out into a private cache) and plain HTTP(S)
//! files. Pure Rust, no `git` binary: the controller's image has none. Every fetch is
//! bounded in time and size; SSH URLs are refused because no credentials are available.

mod deny;
mod git;
mod http;
mod pack;
mod pktline;
mod tree;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;

use kustomize::remote::{RemoteResources, RepoSpec, parse_repo_spec};

use crate::deadline::{Deadline, Interrupted};

pub use deny::{Cidr, DeniedNetworks, RemoteLockdownArgs};

/// The connector of every remote fetch: TLS over a resolver that refuses denied addresses.
type Connector = HttpsConnector<HttpConnector<deny::GuardedResolver>>;

/// Bounds and switches of remote fetching.
#[derive(Clone, Debug)]
pub struct RemoteConfig {
    /// Whether Git bases may be fetched (false: Flux's `--no-remote-bases=true`).
    pub allow_git: bool,
    /// Whether HTTP file resources may be fetched (false: `--no-remote-bases=true` with
    /// `--no-remote-bases-include-http=true`).
    pub allow_http_files: bool,
    /// Networks neither files nor Git bases may reach.
    pub denied: DeniedNetworks,
    /// Time allowed for one HTTP file (Git bases use the URL's `?timeout=`, else 27 s); both
    /// are cut to what is left of the build's deadline.
    pub file_timeout: Duration,
    /// Most bytes downloaded for one file or one repository's pack.
    pub max_download_bytes: u64,
    /// Most bytes of a checked-out tree (and of the inflated pack objects).
    pub max_tree_bytes: u64,
    /// Most files and directories of a checked-out tree.
    pub max_tree_entries: u64,
    /// Most objects of a fetched pack. A shallow fetch holds the commit and the trees and
    /// blobs of one checkout (at most `max_tree_entries` + 1); the rest leaves room for a
    /// server without shallow fetches, which sends some history too.
    pub max_pack_objects: u32,
    /// Parent of the private checkout cache, removed when the fetcher is dropped.
    pub cache_dir: PathBuf,
    /// Checkouts kept; the oldest are removed beyond this many, or beyond `max_cache_bytes`.
    pub max_cached_trees: usize,
    pub max_cache_bytes: u64,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            allow_git: true,
            allow_http_files: true,
            denied: DeniedNetworks::default(),
            file_timeout: Duration::from_secs(60),
            max_download_bytes: 64 << 20,
            max_tree_bytes: 128 << 20,
            max_tree_entries: 50_000,
            max_pack_objects: 200_000,
            cache_dir: std::env::temp_dir(),
            max_cached_trees: 32,
            max_cache_bytes: 512 << 20,
        }
    }
}

/// Fetches remote entries for the kustomize engine; see [`RemoteResources`].
pub struct RemoteFetcher {
    config: RemoteConfig,
    connector: Connector,
    denied: Arc<DeniedNetworks>,
    cache_root: tempfile::TempDir,
    /// Checkouts by (repository URL, commit), oldest first.
    trees: Mutex<VecDeque<Checkout>>,
}

/// One cached checkout.
struct Checkout {
    url: String,
    commit: [u8; 20],
    path: PathBuf,
    bytes: u64,
}

impl std::fmt::Debug for RemoteFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteFetcher")
            .field("config", &self.config)
            .finish()
    }
}

impl RemoteFetcher {
    pub fn new(config: RemoteConfig) -> Result<Self, String> {
        let denied = Arc::new(config.denied.clone());
        let resolver = deny::GuardedResolver {
            denied: denied.clone(),
        };
        let connector = crate::source::fetch::tls_connector(
            HttpConnector::new_with_resolver(resolver),
            Duration::from_secs(10),
        )
        .map_err(|e| format!("TLS setup: {e}"))?;
        let cache_root = tempfile::Builder::new()
            .prefix("remote-bases-")
            .tempdir_in(&config.cache_dir)
            .map_err(|e| format!("{}: {e}", config.cache_dir.display()))?;
        Ok(RemoteFetcher {
            config,
            connector,
            denied,
            cache_root,
            trees: Mutex::default(),
        })
    }

    /// The fetcher as one build sees it: every fetch and checkout within `deadline`.
    pub fn until(self: &Arc<Self>, deadline: Deadline) -> Arc<dyn RemoteResources> {
        Arc::new(BuildRemote {
            fetcher: self.clone(),
            deadline,
        })
    }

    /// Runs `work` on a private single-threaded runtime within `wanted`, cut to what is left
    /// of `deadline`, and no longer than until shutdown. The engine calls in from synchronous
    /// code that may itself sit inside another runtime, so the work gets a thread of its own.
    fn run<T: Send>(
        &self,
        wanted: Duration,
        deadline: &Deadline,
        work: impl AsyncFnOnce(&http::Http) -> Result<T, String> + Send,
    ) -> Result<T, String> {
        let (timeout, cut) = deadline.cap(wanted);
        let timed_out = if cut {
            format!(
                "timed out after {}: the rest of the build's deadline",
                humantime(timeout)
            )
        } else {
            format!("timed out after {}", humantime(timeout))
        };
        if timeout.is_zero() {
            return Err(timed_out);
        }
        let connector = self.connector.clone();
        let denied = self.denied.clone();
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| format!("async runtime: {e}"))?;
                    runtime.block_on(async move {
                        let http = http::Http::new(connector, denied);
                        tokio::select! {
                            biased;
                            () = deadline.shutting_down() => Err(Interrupted::ShuttingDown.to_string()),
                            done = tokio::time::timeout(timeout, work(&http)) => done.unwrap_or_else(|_| Err(timed_out)),
                        }
                    })
                })
                .join()
                .unwrap_or_else(|_| Err("remote fetch panicked".into()))
        })
    }

    fn cached(&self, url: &str, commit: &[u8; 20]) -> Option<PathBuf> {
        let trees = self.trees.lock().unwrap_or_else(|e| e.into_inner());
        trees
            .iter()
            .find(|t| t.url == url && t.commit == *commit && t.path.is_dir())
            .map(|t| t.path.clone())
    }

    /// Adds a checkout, removing the oldest ones beyond the bounds (never the new one). A
    /// build still reading a removed tree fails and is retried, which beats an unbounded disk.
    fn remember(&self, checkout: Checkout) {
        let mut trees = self.trees.lock().unwrap_or_else(|e| e.into_inner());
        trees.push_back(checkout);
        let total = |trees: &VecDeque<Checkout>| trees.iter().map(|t| t.bytes).sum::<u64>();
        while trees.len() > 1
            && (trees.len() > self.config.max_cached_trees || total(&trees) > self.config.max_cache_bytes)
        {
            if let Some(old) = trees.pop_front() {
                let _ = std::fs::remove_dir_all(old.path);
            }
        }
    }

    /// Checks `commit` of `url` out from `pack` into a fresh cache directory.
    fn check_out(
        &self,
        url: &str,
        commit: [u8; 20],
        pack: &[u8],
        deadline: Deadline,
    ) -> Result<PathBuf, String> {
        let limits = pack::PackLimits {
            max_bytes: self.config.max_tree_bytes,
            max_objects: self.config.max_pack_objects,
            deadline: deadline.clone(),
        };
        let objects = pack::parse(pack, limits)?;
        let tree = tree::commit_tree(&objects, &commit)?;
        // A long random name: nobody can aim at a checkout, not even knowing the cache's
        // place, and the error (which would name the place) says only what went wrong.
        let dest = tempfile::Builder::new()
            .prefix(&hex::encode(&commit[..6]))
            .rand_bytes(16)
            .tempdir_in(self.cache_root.path())
            .map_err(|e| format!("checkout directory: {}", e.kind()))?;
        let limits = tree::TreeLimits {
            max_bytes: self.config.max_tree_bytes,
            max_entries: self.config.max_tree_entries,
            deadline,
        };
        let bytes = tree::checkout(&objects, &tree, dest.path(), limits)?;
        let path = dest.keep();
        self.remember(Checkout {
            url: url.to_string(),
            commit,
            path: path.clone(),
            bytes,
        });
        Ok(path)
    }
}

/// The message Flux's secure file system gives for a clone outside the artifact root,
/// which is how `--no-remote-bases=true` refuses a Git base.
fn refused_by_no_remote_bases(spec: &RepoSpec) -> String {
    let clone = format!("{}//{}", spec.clone_url(), spec.path);
    format!(
        "fs-security-constraint abs {clone}: path '{clone}' is not in or below the artifact root \
         (remote bases are disabled: --no-remote-bases=true)"
    )
}

/// A repository URL for HTTP requests: credentials, which we do not have, are dropped.
fn http_url(spec: &RepoSpec) -> String {
    let url = spec.clone_url();
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", &url));
    let rest = match rest.split_once('@') {
        Some((user, host)) if !user.contains('/') => host,
        _ => rest,
    };
    format!("{scheme}://{}", rest.trim_end_matches('/'))
}

fn humantime(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// The remote fetcher of one build, bounded by its deadline.
#[derive(Debug)]
struct BuildRemote {
    fetcher: Arc<RemoteFetcher>,
    deadline: Deadline,
}

impl RemoteResources for BuildRemote {
    fn repository(&self, spec: &RepoSpec) -> Result<PathBuf, String> {
        let (fetcher, deadline) = (&self.fetcher, &self.deadline);
        if !fetcher.config.allow_git {
            return Err(refused_by_no_remote_bases(spec));
        }
        if spec.is_ssh() {
            return Err(format!(
                "Git over SSH ('{}') is not supported: the controller has no SSH credentials; use an https:// URL",
                spec.clone_url()
            ));
        }
        if !spec.host.starts_with("https://") && !spec.host.starts_with("http://") {
            return Err(format!(
                "Git URL '{}' is not supported: only https:// and http:// are",
                spec.clone_url()
            ));
        }
        let url = http_url(spec);
        if let Some(commit) = git::full_commit_id(&spec.git_ref)
            && let Some(path) = fetcher.cached(&url, &commit)
        {
            return Ok(path);
        }
        let max = fetcher.config.max_download_bytes;
        let (commit, pack) = fetcher
            .run(spec.timeout, deadline, async |http| {
                let repository = git::Repository {
                    http,
                    url: url.clone(),
                };
                let cached = |commit: &[u8; 20]| fetcher.cached(&url, commit).is_some();
                repository.fetch(&spec.git_ref, cached, max).await
            })
            .map_err(|e| format!("fetching {url}: {e}"))?;
        match pack {
            None => fetcher
                .cached(&url, &commit)
                .ok_or_else(|| format!("{url}: the cached checkout disappeared")),
            Some(pack) => fetcher
                .check_out(&url, commit, &pack, deadline.clone())
                .map_err(|e| format!("checking out {url} at {}: {e}", hex::encode(commit))),
        }
    }

    fn file(&self, url: &str) -> Result<Vec<u8>, String> {
        let fetcher = &self.fetcher;
        if !fetcher.config.allow_http_files {
            return Err(format!(
                "HTTP resource '{url}' is refused: remote resources are disabled \
                 (--no-remote-bases=true --no-remote-bases-include-http=true)"
            ));
        }
        let max = fetcher.config.max_download_bytes;
        // A URL that may be a Git base is tried as a file first: its `?timeout=` bounds that too.
        let timeout = parse_repo_spec(url).map_or(fetcher.config.file_timeout, |s| {
            s.timeout.min(fetcher.config.file_timeout)
        });
        let (status, body) = fetcher.run(timeout, &self.deadline, async move |http| {
            let call = http::Call {
                method: hyper::Method::GET,
                url: url.to_string(),
                headers: &[],
                body: Vec::new(),
            };
            http.send(call, max).await
        })?;
        if !status.is_success() {
            return Err(format!(
                "HTTP Error: status code {} ({})",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            ));
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio_util::sync::CancellationToken;

    use super::*;

    /// Before, a remote fetch at SIGTERM ran on to its `?timeout=` or the build's deadline
    /// (a server trickling bytes held the build for minutes); now shutdown ends it.
    #[test]
    fn shutdown_ends_a_remote_fetch() {
        let fetcher = RemoteFetcher::new(RemoteConfig::default()).unwrap();
        let shutdown = CancellationToken::new();
        let deadline = Deadline::after(Duration::from_secs(600)).or_shutdown(&shutdown);
        let canceler = shutdown.clone();
        let cancel = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            canceler.cancel();
        });
        let hung = fetcher.run(Duration::from_secs(60), &deadline, async |_| {
            std::future::pending::<Result<(), String>>().await
        });
        cancel.join().unwrap();
        assert_eq!(
            hung.unwrap_err(),
            "the build was canceled: the controller is shutting down"
        );

        // Once shutdown has begun, no fetch starts.
        let started = AtomicBool::new(false);
        let late = fetcher.run(Duration::from_secs(60), &deadline, async |_| {
            started.store(true, Ordering::SeqCst);
            Ok(())
        });
        assert!(late.is_err());
        assert!(!started.load(Ordering::SeqCst));
    }
}
