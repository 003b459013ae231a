//! A control plane of a test's own: e2e/cluster.sh with a state directory under /tmp, for
//! tests that take parts of it down or load it for long (the shared one is never touched).
//! Stopped and deleted when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube::{Client, Config};

use super::unique_suffix;

pub struct OwnControlPlane {
    state: PathBuf,
}

impl OwnControlPlane {
    /// Starts one whose state directory name begins with `prefix`.
    pub fn up(prefix: &str) -> Self {
        let state = std::env::temp_dir().join(format!("{prefix}-{}", unique_suffix()));
        let plane = Self { state };
        plane.cluster(&["up"]);
        plane
    }

    /// Runs e2e/cluster.sh on this control plane (`up`, `stop <component>`, `start <component>`).
    pub fn cluster(&self, args: &[&str]) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/cluster.sh");
        let output = Command::new(script)
            .args(args)
            .env("E2E_STATE", &self.state)
            .output()
            .expect("run e2e/cluster.sh");
        assert!(
            output.status.success(),
            "cluster.sh {args:?} failed for {}: {}",
            self.state.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.state.join("admin.kubeconfig")
    }

    pub async fn client(&self) -> Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig()).expect("own kubeconfig");
        let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("own kubeconfig is valid");
        Client::try_from(config).expect("kube client")
    }
}

impl Drop for OwnControlPlane {
    fn drop(&mut self) {
        // Not `cluster`: a failed stop must not panic inside a drop that may run during a panic.
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/cluster.sh");
        let _ = Command::new(script)
            .arg("down")
            .env("E2E_STATE", &self.state)
            .status();
    }
}
