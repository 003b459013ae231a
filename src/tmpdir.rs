//! Private directories in the temp dir that outlive no process: each process keeps its files
//! in one session directory, `<prefix><random>`, holding a `lock` file the process keeps
//! locked (`flock`) while it runs. The kernel drops that lock however the process ends, so a
//! session whose lock can be taken belongs to a process that died before it could remove it
//! (killed, out of memory); the controller removes those at start. A session is made under a
//! hidden name and renamed once locked, so a sweep never sees a live session unlocked. Locks,
//! not process ids: after a container restart the new controller has the dead one's pid 1 and
//! the same /tmp. Only names with one of our prefixes are ever looked at.

use std::fs::{self, File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

const LOCK: &str = "lock";

/// One process's session directory, locked while the process lives; removed when dropped.
#[derive(Debug)]
pub(crate) struct Session {
    dir: PathBuf,
    _lock: File,
}

impl Session {
    /// A new locked session directory `<prefix><random>` in `parent`.
    pub(crate) fn open(parent: &Path, prefix: &str) -> io::Result<Session> {
        let staging = tempfile::Builder::new()
            .prefix(&format!(".{prefix}"))
            .tempdir_in(parent)?;
        let lock = File::create_new(staging.path().join(LOCK))?;
        lock.lock()?;
        let name = staging.path().file_name().unwrap_or_default().to_string_lossy();
        let dir = parent.join(name.trim_start_matches('.'));
        fs::rename(staging.keep(), &dir)?;
        Ok(Session { dir, _lock: lock })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Removes the session directories named `<prefix>...` in `parent` of processes that are
/// gone, and returns them. A session that cannot be checked is left alone.
pub(crate) fn remove_stale(parent: &Path, prefix: &str) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(parent)? {
        let entry = entry?;
        if !entry.file_name().to_string_lossy().starts_with(prefix)
            || !entry.file_type().is_ok_and(|t| t.is_dir())
        {
            continue;
        }
        let dir = entry.path();
        let lock = match File::open(dir.join(LOCK)) {
            Ok(lock) => Some(lock),
            // Sessions are renamed into view with their lock: one without is a wreck.
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(_) => continue,
        };
        match lock.as_ref().map(File::try_lock) {
            Some(Err(TryLockError::WouldBlock)) | Some(Err(TryLockError::Error(_))) => continue,
            Some(Ok(())) | None => {
                if fs::remove_dir_all(&dir).is_ok() {
                    removed.push(dir);
                }
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "kustomize-controller-test-";

    /// What a killed controller leaves: its session with files in it, and a lock file nobody
    /// holds (the kernel released it with the process).
    fn dead_session(parent: &Path, name: &str) -> PathBuf {
        let dir = parent.join(name);
        fs::create_dir_all(dir.join("build-1/secrets")).unwrap();
        fs::write(dir.join(LOCK), "").unwrap();
        fs::write(dir.join("build-1/secrets/db.env"), "PASSWORD=plaintext\n").unwrap();
        dir
    }

    #[test]
    fn a_dead_process_s_sessions_are_removed_and_live_ones_kept() {
        let parent = tempfile::tempdir().unwrap();
        let dead = dead_session(parent.path(), &format!("{PREFIX}dead01"));
        let wreck = parent.path().join(format!("{PREFIX}nolock"));
        fs::create_dir(&wreck).unwrap();
        let live = Session::open(parent.path(), PREFIX).unwrap();
        fs::create_dir(live.dir.join("build-2")).unwrap();
        // Not ours: another prefix (Flux's own, another program's), or not a directory.
        let unrelated = dead_session(parent.path(), "kustomization-123");
        let other = dead_session(parent.path(), "kustomize-controller-other-1");
        let log = parent.path().join(format!("{PREFIX}x.log"));
        fs::write(&log, "").unwrap();

        let mut removed = remove_stale(parent.path(), PREFIX).unwrap();
        removed.sort();

        assert_eq!(removed, [dead.clone(), wreck.clone()]);
        assert!(!dead.exists() && !wreck.exists());
        assert!(live.dir.join("build-2").is_dir(), "a live session is kept");
        assert!(unrelated.is_dir() && other.is_dir() && log.is_file());
        let live_dir = live.dir.clone();
        drop(live);
        assert!(!live_dir.exists(), "a session is removed when it ends");
    }

    #[test]
    fn a_session_is_named_for_the_sweep_and_holds_its_lock() {
        let parent = tempfile::tempdir().unwrap();
        let session = Session::open(parent.path(), PREFIX).unwrap();
        let name = session.dir.file_name().unwrap().to_string_lossy().to_string();
        assert!(name.starts_with(PREFIX), "{name}");
        assert_eq!(session.dir.parent(), Some(parent.path()));
        let other = File::open(session.dir.join(LOCK)).unwrap();
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        let entries: Vec<_> = fs::read_dir(parent.path()).unwrap().collect();
        assert_eq!(entries.len(), 1, "no staging directory is left behind");
    }
}
