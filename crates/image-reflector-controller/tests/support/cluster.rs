//! The controller binary on the e2e control plane (`KUBECONFIG`, and `E2E_BIN` for kubectl):
//! kubectl helpers and a harness that runs the controller for a namespace of the test.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::Value;

use test_support::{free_port, kubectl};

pub fn ok(args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl(args, stdin);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "kubectl {args:?} failed:\n{stdout}{stderr}");
    stdout.into_owned()
}

pub fn install_crds() {
    let crds = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crds");
    for plural in ["imagerepositories", "imagepolicies"] {
        let file = format!("{crds}/image.toolkit.fluxcd.io_{plural}.yaml");
        ok(
            &["apply", "--server-side", "--force-conflicts", "-f", &file],
            None,
        );
        ok(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{plural}.image.toolkit.fluxcd.io"),
            ],
            None,
        );
    }
}

/// A namespace of the test, with the controller binary watching only it; both go on drop.
pub struct Harness {
    pub namespace: String,
    controller: Child,
    pub storage: tempfile::TempDir,
    health_port: u16,
    metrics_port: u16,
    log: PathBuf,
}

impl Harness {
    pub fn start(name: &str) -> Self {
        Self::launch(name, None, &[])
    }

    /// With more flags, after the harness's own (a later flag wins).
    pub fn start_with(name: &str, flags: &[&str]) -> Self {
        Self::launch(name, None, flags)
    }

    /// As Flux's Deployment starts it: Flux's args, `RUNTIME_NAMESPACE=flux-system` and the
    /// given kubeconfig (a ServiceAccount's), then `flags`.
    pub fn start_as_flux(name: &str, kubeconfig: &Path, flags: &[&str]) -> Self {
        Self::launch(name, Some(kubeconfig), flags)
    }

    /// The controller in a namespace of the test with `--watch-all-namespaces=false` (its own
    /// Lease there), or, given a kubeconfig, with Flux's args as `start_as_flux` says.
    fn launch(name: &str, kubeconfig: Option<&Path>, flags: &[&str]) -> Self {
        install_crds();
        let namespace = format!("irc-repo-{name}-{}", std::process::id());
        ok(&["create", "namespace", &namespace], None);
        let storage = tempfile::tempdir().unwrap();
        let (health_port, metrics_port) = (free_port(), free_port());
        let log = storage.path().join("controller.log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_image-reflector-controller"));
        match kubeconfig {
            // Flags alone, as Flux's Deployment passes them.
            None => command
                .args([
                    "--watch-all-namespaces=false",
                    "--enable-leader-election",
                    "--log-encoding=console",
                ])
                .env("RUNTIME_NAMESPACE", &namespace),
            Some(path) => command
                .args([
                    "--watch-all-namespaces",
                    "--log-level=info",
                    "--log-encoding=json",
                    "--enable-leader-election",
                ])
                .env("RUNTIME_NAMESPACE", "flux-system")
                .env("KUBECONFIG", path),
        };
        let controller = command
            .args(["--min-retry-delay=200ms", "--max-retry-delay=2s"])
            .arg(format!("--health-addr=127.0.0.1:{health_port}"))
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .arg(format!(
                "--storage-path={}",
                storage.path().join("data").display()
            ))
            .args(flags)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::options().append(true).open(&log).unwrap())
            .spawn()
            .expect("start image-reflector-controller");
        Self {
            namespace,
            controller,
            storage,
            health_port,
            metrics_port,
            log,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn apply(&self, object: Value) {
        ok(
            &["apply", "-n", &self.namespace, "-f", "-"],
            Some(&object.to_string()),
        );
    }

    pub fn get(&self, kind: &str, name: &str) -> Option<Value> {
        let out = kubectl(&["get", "-n", &self.namespace, kind, name, "-o", "json"], None);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).unwrap())
    }

    /// Polls until `check` holds for the ImageRepository; fails with the object and the log.
    pub fn wait_for(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        self.wait_for_kind("imagerepository", name, what, check)
    }

    /// Polls until `check` holds for the object; fails with the object and the log.
    pub fn wait_for_kind(&self, kind: &str, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let object = self.get(kind, name);
            if let Some(object) = &object
                && check(object)
            {
                return object.clone();
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; object:\n{}\ncontroller log:\n{}",
                serde_json::to_string_pretty(&object).unwrap(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The status code of a GET on the probe port.
    pub fn http_status(&self, path: &str) -> String {
        let reply = http_get(self.health_port, path);
        let line = reply.lines().next().unwrap_or_default();
        line.split(' ').nth(1).unwrap_or(line).to_string()
    }

    /// The `gotk_reconcile_duration_seconds` observations of one object of the test's
    /// namespace (Flux's labels: kind, name, namespace), from `/metrics`; 0 when absent.
    pub fn reconciles_timed(&self, kind: &str, name: &str) -> u64 {
        let series = format!(
            r#"gotk_reconcile_duration_seconds_count{{kind="{kind}",name="{name}",namespace="{}"}} "#,
            self.namespace
        );
        let metrics = http_get(self.metrics_port, "/metrics");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&series))
            .map_or(0, |count| count.trim().parse().expect("a count"))
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        // While the controller runs: it removes the finalizers that would hold the namespace.
        let _ = kubectl(
            &[
                "delete",
                "imagepolicies,imagerepositories",
                "--all",
                "-n",
                &self.namespace,
                "--timeout=30s",
            ],
            None,
        );
        let _ = self.controller.kill();
        let _ = self.controller.wait();
        let _ = kubectl(&["delete", "namespace", &self.namespace, "--wait=false"], None);
    }
}

/// The whole reply to an HTTP/1.0 GET of `path` on a port of 127.0.0.1.
fn http_get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the controller");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply
}

pub fn ready(object: &Value) -> Option<&Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

pub fn ready_is(object: &Value, status: &str, reason: &str) -> bool {
    ready(object).is_some_and(|c| c["status"] == status && c["reason"] == reason)
}
