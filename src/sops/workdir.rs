//! Where decrypted generator sources are written, and how a dead process's are removed.
//!
//! Each process keeps its build copies in one session directory,
//! `kustomize-controller-decrypted-<random>` in the temp dir, holding a `lock` file the process
//! keeps locked (`flock`) while it runs. The kernel drops that lock however the process ends,
//! so a session whose lock can be taken belongs to a process that died before it could remove
//! its plaintext (killed, out of memory); the controller removes those at start. A session is
//! made under a hidden name and renamed once locked, so a sweep never sees a live session
//! unlocked. Locks, not process ids: after a container restart the new controller has the
//! dead one's pid 1 and the same /tmp.

use std::fs::{self, File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The names of session directories.
pub(crate) const PREFIX: &str = "kustomize-controller-decrypted-";
const LOCK: &str = "lock";

/// This process's session directory, locked while the process lives.
#[derive(Debug)]
pub(crate) struct Session {
    dir: PathBuf,
    _lock: File,
}

impl Session {
    /// A new locked session directory in `parent`.
    pub(crate) fn open(parent: &Path) -> io::Result<Session> {
        let staging = tempfile::Builder::new()
            .prefix(&format!(".{PREFIX}"))
            .tempdir_in(parent)?;
        let lock = File::create_new(staging.path().join(LOCK))?;
        lock.lock()?;
        let name = staging.path().file_name().unwrap_or_default().to_string_lossy();
        let dir = parent.join(name.trim_start_matches('.'));
        fs::rename(staging.keep(), &dir)?;
        Ok(Session { dir, _lock: lock })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

static SESSION: OnceLock<Session> = OnceLock::new();

/// A new private directory (mode 0700) for one build's decrypted copy, removed when dropped.
pub(crate) fn build_dir() -> io::Result<tempfile::TempDir> {
    let session = match SESSION.get() {
        Some(session) => session,
        // Two first builds may both open one; the loser's is dropped, and removed with it.
        None => {
            let opened = Session::open(&std::env::temp_dir())?;
            SESSION.get_or_init(|| opened)
        }
    };
    tempfile::Builder::new().prefix("build-").tempdir_in(&session.dir)
}

/// Removes the session directories in `parent` of processes that are gone, and returns them.
/// A session that cannot be checked is left alone.
pub(crate) fn remove_stale(parent: &Path) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(parent)? {
        let entry = entry?;
        if !entry.file_name().to_string_lossy().starts_with(PREFIX)
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

    /// What a killed controller leaves: its session with a build copy holding plaintext, and
    /// a lock file nobody holds (the kernel released it with the process).
    fn dead_session(parent: &Path, name: &str) -> PathBuf {
        let dir = parent.join(name);
        fs::create_dir_all(dir.join("build-1/secrets")).unwrap();
        fs::write(dir.join(LOCK), "").unwrap();
        fs::write(dir.join("build-1/secrets/db.env"), "PASSWORD=plaintext\n").unwrap();
        dir
    }

    // Before, each build's copy was a plain temp dir (`.tmpXXXXXX`) that nothing removed
    // after a crash: the decrypted `db.env` stayed in /tmp.
    #[test]
    fn a_dead_process_s_sessions_are_removed_and_live_ones_kept() {
        let parent = tempfile::tempdir().unwrap();
        let dead = dead_session(parent.path(), &format!("{PREFIX}dead01"));
        let wreck = parent.path().join(format!("{PREFIX}nolock"));
        fs::create_dir(&wreck).unwrap();
        let live = Session::open(parent.path()).unwrap();
        fs::create_dir(live.dir.join("build-2")).unwrap();
        let unrelated = parent.path().join("artifacts-abc");
        fs::create_dir(&unrelated).unwrap();
        let log = parent.path().join(format!("{PREFIX}x.log"));
        fs::write(&log, "").unwrap();

        let mut removed = remove_stale(parent.path()).unwrap();
        removed.sort();

        assert_eq!(removed, [dead.clone(), wreck.clone()]);
        assert!(!dead.exists() && !wreck.exists());
        assert!(live.dir.join("build-2").is_dir(), "a live session is kept");
        assert!(unrelated.is_dir() && log.is_file());
        let live_dir = live.dir.clone();
        drop(live);
        assert!(!live_dir.exists(), "a session is removed when it ends");
    }

    #[test]
    fn a_session_is_named_for_the_sweep_and_holds_its_lock() {
        let parent = tempfile::tempdir().unwrap();
        let session = Session::open(parent.path()).unwrap();
        let name = session.dir.file_name().unwrap().to_string_lossy().to_string();
        assert!(name.starts_with(PREFIX), "{name}");
        assert_eq!(session.dir.parent(), Some(parent.path()));
        let other = File::open(session.dir.join(LOCK)).unwrap();
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        let entries: Vec<_> = fs::read_dir(parent.path()).unwrap().collect();
        assert_eq!(entries.len(), 1, "no staging directory is left behind");
    }
}
