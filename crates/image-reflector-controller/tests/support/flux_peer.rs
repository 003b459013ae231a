//! Flux's own image-reflector-controller (built by `e2e/fluxirc/build.sh`, `E2E_FLUX_IRC_BIN`)
//! watching only one namespace, its storage and log in a temporary directory.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use test_support::{free_port, kubectl};

pub struct Peer {
    child: Child,
    dir: tempfile::TempDir,
}

impl Peer {
    /// Started with its storage, probes and `namespace` as the only one watched, then `flags`.
    pub fn start(namespace: &str, flags: &[&str]) -> Self {
        let bin = PathBuf::from(std::env::var_os("E2E_FLUX_IRC_BIN").expect(
            "E2E_FLUX_IRC_BIN is not set: `make test` sets it from `e2e/fluxirc/build.sh` \
             (or run `export E2E_FLUX_IRC_BIN=$(e2e/fluxirc/build.sh)`)",
        ))
        .join("image-reflector-controller");
        assert!(
            bin.is_file(),
            "{} is missing: run e2e/fluxirc/build.sh",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("data");
        std::fs::create_dir(&storage).unwrap();
        let log = std::fs::File::create(dir.path().join("peer.log")).unwrap();
        let child = Command::new(&bin)
            .arg(format!("--storage-path={}", storage.display()))
            .args(["--watch-all-namespaces=false", "--log-encoding=json"])
            .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
            .arg(format!("--health-addr=127.0.0.1:{}", free_port()))
            .args(flags)
            .env("RUNTIME_NAMESPACE", namespace)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start Flux's image-reflector-controller");
        Self { child, dir }
    }

    /// Its `--storage-path`.
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("peer.log")).unwrap_or_default()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deletes `namespace` without waiting, Flux's finalizers first: after a failure the peer is
/// gone, nobody would remove them and the namespace would hang in Terminating.
pub fn delete_namespace(namespace: &str) {
    for kind in ["imagepolicies", "imagerepositories"] {
        let list = kubectl(&["get", kind, "-n", namespace, "-o", "name"], None);
        for object in String::from_utf8_lossy(&list.stdout).lines() {
            let unfinalized = r#"{"metadata":{"finalizers":null}}"#;
            let _ = kubectl(
                &[
                    "patch",
                    "-n",
                    namespace,
                    object,
                    "--type=merge",
                    "-p",
                    unfinalized,
                ],
                None,
            );
        }
    }
    let _ = kubectl(&["delete", "namespace", namespace, "--wait=false"], None);
}
