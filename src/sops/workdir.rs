//! Where decrypted generator sources are written: one session directory per process (see
//! [`crate::tmpdir`]), `kustomize-controller-decrypted-<random>` in the temp dir, so that the
//! plaintext a killed process left is removed at the next start.

use std::io;
use std::sync::OnceLock;

use crate::tmpdir::Session;

/// The names of session directories.
pub(crate) const PREFIX: &str = "kustomize-controller-decrypted-";

static SESSION: OnceLock<Session> = OnceLock::new();

/// A new private directory (mode 0700) for one build's decrypted copy, removed when dropped.
pub(crate) fn build_dir() -> io::Result<tempfile::TempDir> {
    let session = match SESSION.get() {
        Some(session) => session,
        // Two first builds may both open one; the loser's is dropped, and removed with it.
        None => {
            let opened = Session::open(&std::env::temp_dir(), PREFIX)?;
            SESSION.get_or_init(|| opened)
        }
    };
    tempfile::Builder::new()
        .prefix("build-")
        .tempdir_in(session.path())
}
