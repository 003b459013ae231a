//! A real OCI registry for OCIRepository sources: Debian's docker-registry (CNCF distribution)
//! started by e2e/registry/serve.sh, the script the image reflector's tests start theirs with,
//! on plain HTTP at 127.0.0.1; artifacts pushed to it by the real `flux push artifact`.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::Client;
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::json;

use super::controller::free_port;
use super::flux::{apply_source, flux, flux_text};

const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

pub struct Registry {
    child: Child,
    state: tempfile::TempDir,
    /// `127.0.0.1:<port>`, the registry part of an artifact's address.
    pub host: String,
}

impl Registry {
    /// Starts the registry and waits until it listens. A missing registry fails the test.
    pub fn start() -> Self {
        let bin = std::env::var("REGISTRY_BIN").unwrap_or_else(|_| REGISTRY_BIN.into());
        assert!(
            std::path::Path::new(&bin).exists(),
            "{bin} is missing: OCI source tests need a real registry, Debian's docker-registry \
             package (CNCF distribution): `apt-get install docker-registry` (`make tools` checks it)"
        );
        let state = tempfile::tempdir().expect("registry state dir");
        let port = free_port();
        let log = std::fs::File::create(state.path().join("registry.log")).unwrap();
        let child = Command::new(script())
            .arg(state.path())
            .arg(port.to_string())
            .env("REGISTRY_BIN", &bin)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start e2e/registry/serve.sh");
        let mut registry = Self {
            child,
            state,
            host: format!("127.0.0.1:{port}"),
        };
        registry.wait_listening();
        registry
    }

    fn wait_listening(&mut self) {
        // Generous: the registry starts in well under a second on an idle machine.
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the registry exited ({status}) before serving:\n{}", self.logs());
            }
            if TcpStream::connect(&self.host).is_ok() {
                return;
            }
            assert!(
                Instant::now() < until,
                "the registry did not listen within 60s:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.state.path().join("registry.log")).unwrap_or_default()
    }

    /// `oci://<host>/<repository>`, an OCIRepository's URL.
    pub fn url(&self, repository: &str) -> String {
        format!("oci://{}/{repository}", self.host)
    }

    /// Pushes exactly `files` as an artifact to `repository:tag` with the real
    /// `flux push artifact`, recording `source` and `revision` (`<branch>@sha1:<commit>`) as its
    /// origin; returns the manifest digest the CLI reports (`sha256:...`).
    pub fn push_artifact(
        &self,
        repository: &str,
        tag: &str,
        files: &[(&str, &str)],
        source: &str,
        revision: &str,
    ) -> String {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let target = dir.path().join(path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(target, content).unwrap();
        }
        let reference = format!("{}:{tag}", self.url(repository));
        let out = flux(&[
            "push",
            "artifact",
            &reference,
            &format!("--path={}", dir.path().display()),
            &format!("--source={source}"),
            &format!("--revision={revision}"),
            "--insecure-registry",
            "--output=json",
        ]);
        assert!(
            out.status.success(),
            "flux push artifact {reference} failed: {}\nregistry log:\n{}",
            flux_text(&out),
            self.logs()
        );
        let pushed: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("flux push artifact printed no JSON ({e}): {}", flux_text(&out)));
        let digest = pushed["digest"].as_str().unwrap_or_default();
        assert!(
            digest.starts_with("sha256:"),
            "flux push artifact printed no digest: {pushed}"
        );
        digest.to_string()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // serve.sh execs the registry: this is the registry's own pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/registry/serve.sh")
}

/// Creates OCIRepository `name` in `namespace` following `url`'s `tag` over plain HTTP, polled
/// every `interval`.
pub async fn apply_oci_repository(
    client: &Client,
    namespace: &str,
    name: &str,
    url: &str,
    tag: &str,
    interval: &str,
) {
    let spec = json!({"url": url, "ref": {"tag": tag}, "interval": interval, "insecure": true});
    apply_source(client, namespace, SourceKind::OCIRepository, name, spec).await;
}
