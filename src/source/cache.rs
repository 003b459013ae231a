//! Extracted artifact trees, kept by digest on disk with least-recently-used eviction.
//!
//! A tree is shared through an `Arc`: eviction only drops the cache's reference, and the
//! directory is deleted when the last [`ArtifactTree`] handed out for it is dropped, so a
//! reader never sees its tree vanish.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::SourceError;
use crate::tmpdir::Session;

/// The names of artifact cache directories in the temp dir.
pub(crate) const CACHE_PREFIX: &str = "kustomize-controller-artifacts-";

/// An extracted artifact. Read-only by contract: other reconciles may share it. Keeps its
/// directory alive while held.
#[derive(Clone, Debug)]
pub struct ArtifactTree {
    dir: Arc<TreeDir>,
}

impl ArtifactTree {
    /// The directory holding the artifact's files.
    pub fn root(&self) -> &Path {
        &self.dir.path
    }
}

impl std::ops::Deref for ArtifactTree {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.root()
    }
}

/// One tree directory; removed from disk when dropped.
#[derive(Debug)]
struct TreeDir {
    path: PathBuf,
    // Keeps the cache directory alive as long as any tree in it.
    _root: Arc<Session>,
}

impl Drop for TreeDir {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(path = %self.path.display(), error = %e, "failed to remove artifact tree")
            }
            _ => {}
        }
    }
}

struct Entry {
    dir: Arc<TreeDir>,
    bytes: u64,
    last_used: u64,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    /// One lock per digest being filled, so concurrent callers download once.
    filling: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
    clock: u64,
}

/// The cache of extracted trees.
pub(crate) struct TreeCache {
    root: Arc<Session>,
    max_bytes: u64,
    next_dir: AtomicU64,
    state: Mutex<State>,
}

impl TreeCache {
    /// Creates a private cache directory inside `parent`: a session directory (see
    /// [`crate::tmpdir`]), so that a killed process's trees are removed at the next start.
    pub(crate) fn new(parent: &Path, max_bytes: u64) -> Result<Self, SourceError> {
        std::fs::create_dir_all(parent)
            .and_then(|()| Session::open(parent, CACHE_PREFIX))
            .map(|root| Self {
                root: Arc::new(root),
                max_bytes,
                next_dir: AtomicU64::new(0),
                state: Mutex::default(),
            })
            .map_err(|source| SourceError::Storage {
                context: format!("create cache directory in {}", parent.display()),
                source,
            })
    }

    /// Where downloads are staged before extraction (inside the cache, same filesystem).
    pub(crate) fn staging_dir(&self) -> &Path {
        self.root.path()
    }

    /// The tree for `key`, filling it with `fill(dir)` (which returns the bytes it wrote) if it
    /// is not cached. `dir` does not exist yet; on error it is removed.
    pub(crate) async fn get_or_fill<F, Fut>(&self, key: &str, fill: F) -> Result<ArtifactTree, SourceError>
    where
        F: FnOnce(PathBuf) -> Fut,
        Fut: Future<Output = Result<u64, SourceError>>,
    {
        if let Some(tree) = self.lookup(key) {
            return Ok(tree);
        }
        let lock = self.state().filling.entry(key.to_string()).or_default().clone();
        let _filling = lock.lock().await;
        if let Some(tree) = self.lookup(key) {
            return Ok(tree);
        }
        // A random suffix: a counter let whoever learnt the cache's place name the next tree.
        let n = self.next_dir.fetch_add(1, Ordering::Relaxed);
        let path = self
            .root
            .path()
            .join(format!("tree-{n}-{:016x}", rand::random::<u64>()));
        // Owning the directory from the start means an error cleans it up by drop.
        let dir = Arc::new(TreeDir {
            path: path.clone(),
            _root: self.root.clone(),
        });
        let result = fill(path).await;
        let mut state = self.state();
        state.filling.remove(key);
        let bytes = result?;
        state.clock += 1;
        let last_used = state.clock;
        state.entries.insert(
            key.to_string(),
            Entry {
                dir: dir.clone(),
                bytes,
                last_used,
            },
        );
        evict(&mut state, self.max_bytes);
        Ok(ArtifactTree { dir })
    }

    fn lookup(&self, key: &str) -> Option<ArtifactTree> {
        let mut state = self.state();
        state.clock += 1;
        let now = state.clock;
        let entry = state.entries.get_mut(key)?;
        entry.last_used = now;
        Some(ArtifactTree {
            dir: entry.dir.clone(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps inconsistent: keep going.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[cfg(test)]
    fn cached_keys(&self) -> Vec<String> {
        let mut keys: Vec<_> = self.state().entries.keys().cloned().collect();
        keys.sort();
        keys
    }
}

/// Drops least recently used trees nobody holds until the total fits. Trees in use stay, even
/// if that keeps the cache over its bound for a while.
fn evict(state: &mut State, max_bytes: u64) {
    let mut total: u64 = state.entries.values().map(|e| e.bytes).sum();
    while total > max_bytes {
        let victim = state
            .entries
            .iter()
            .filter(|(_, e)| Arc::strong_count(&e.dir) == 1)
            .min_by_key(|(_, e)| e.last_used)
            .map(|(key, _)| key.clone());
        let Some(key) = victim else { break };
        if let Some(entry) = state.entries.remove(&key) {
            total -= entry.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache of at most `max_bytes` in a fresh temporary parent directory.
    fn new_cache(max_bytes: u64) -> (tempfile::TempDir, TreeCache) {
        let parent = tempfile::tempdir().unwrap();
        let cache = TreeCache::new(parent.path(), max_bytes).unwrap();
        (parent, cache)
    }

    async fn fill_with(cache: &TreeCache, key: &str, bytes: usize) -> ArtifactTree {
        cache
            .get_or_fill(key, |dir| async move {
                std::fs::create_dir(&dir).unwrap();
                std::fs::write(dir.join("data"), vec![b'x'; bytes]).unwrap();
                Ok(bytes as u64)
            })
            .await
            .unwrap()
    }

    // Before, the cache was a plain `artifacts-XXXX` temp dir: a killed process left its
    // extracted trees in /tmp for good, and no sweep could tell them from another program's.
    #[tokio::test]
    async fn a_killed_process_s_cache_is_swept_at_start_and_a_live_one_kept() {
        let parent = tempfile::tempdir().unwrap();
        let live = TreeCache::new(parent.path(), 1000).unwrap();
        let tree = fill_with(&live, "sha256:a", 10).await;
        // What a killed process leaves: its cache with its trees, the lock held by nobody
        // (the kernel drops it with the process; here, with the handle, the directory moved
        // aside so that the drop does not remove it).
        let dead = TreeCache::new(parent.path(), 1000).unwrap();
        fill_with(&dead, "sha256:b", 10).await;
        let dead_dir = dead.staging_dir().to_path_buf();
        let aside = parent.path().join("aside");
        std::fs::rename(&dead_dir, &aside).unwrap();
        drop(dead);
        std::fs::rename(&aside, &dead_dir).unwrap();
        let name = dead_dir.file_name().unwrap().to_string_lossy().to_string();
        assert!(name.starts_with("kustomize-controller-artifacts-"), "{name}");

        let removed = crate::tmpdir::remove_stale(parent.path(), CACHE_PREFIX).unwrap();

        assert_eq!(removed, std::slice::from_ref(&dead_dir));
        assert!(!dead_dir.exists());
        assert!(tree.root().join("data").exists(), "the live cache is kept");
    }

    #[tokio::test]
    async fn a_cached_digest_is_not_filled_again() {
        let (_parent, cache) = new_cache(1000);
        let first = fill_with(&cache, "sha256:a", 10).await;
        let second = cache
            .get_or_fill("sha256:a", |_| async { panic!("filled twice") })
            .await
            .unwrap();
        assert_eq!(first.root(), second.root());
    }

    #[tokio::test]
    async fn tree_directories_cannot_be_guessed() {
        // Before, the first tree of every cache was `tree-0`, the next `tree-1`, and so on.
        let (_p1, one) = new_cache(1000);
        let (_p2, other) = new_cache(1000);
        let name = |tree: &ArtifactTree| tree.root().file_name().unwrap().to_owned();
        let (a, b) = (fill_with(&one, "a", 1).await, fill_with(&other, "a", 1).await);
        assert_ne!(name(&a), name(&b));
    }

    #[tokio::test]
    async fn least_recently_used_unheld_trees_are_evicted_and_removed() {
        let (_parent, cache) = new_cache(25);
        let a = fill_with(&cache, "a", 10).await.root().to_path_buf();
        let b = fill_with(&cache, "b", 10).await.root().to_path_buf();
        drop(cache.lookup("a")); // a is now more recent than b
        let _c = fill_with(&cache, "c", 10).await;
        assert_eq!(cache.cached_keys(), ["a", "c"]);
        assert!(a.exists());
        assert!(!b.exists(), "evicted tree removed from disk");
    }

    #[tokio::test]
    async fn a_tree_in_use_survives_eviction_until_released() {
        let (_parent, cache) = new_cache(15);
        let held = fill_with(&cache, "a", 10).await;
        let _b = fill_with(&cache, "b", 10).await;
        // Both are held: nothing can go, the cache is over its bound for now.
        assert_eq!(cache.cached_keys(), ["a", "b"]);
        drop(_b);
        let _c = fill_with(&cache, "c", 10).await;
        assert_eq!(cache.cached_keys(), ["a", "c"]);
        assert!(held.root().join("data").exists());
        let path = held.root().to_path_buf();
        drop(held);
        assert!(path.exists(), "still cached");
        drop(cache);
        assert!(!path.exists(), "dropping the cache removes unheld trees");
    }

    #[tokio::test]
    async fn dropping_the_cache_removes_its_directory_once_trees_are_released() {
        let (parent, cache) = new_cache(1000);
        let tree = fill_with(&cache, "a", 10).await;
        drop(cache);
        assert!(
            tree.root().join("data").exists(),
            "a held tree outlives the cache"
        );
        drop(tree);
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn a_failed_fill_leaves_nothing_behind() {
        let (_parent, cache) = new_cache(1000);
        let err = cache
            .get_or_fill("a", |dir| async move {
                std::fs::create_dir(&dir).unwrap();
                std::fs::write(dir.join("partial"), "x").unwrap();
                Err(SourceError::Download {
                    url: "http://x".into(),
                    cause: "boom".into(),
                })
            })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("boom"));
        let left: Vec<_> = std::fs::read_dir(cache.staging_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|name| name != "lock")
            .collect();
        assert!(left.is_empty(), "{left:?}");
        assert!(cache.cached_keys().is_empty());
    }
}
