//! What the Kustomization controller's and the image reflector's integration tests share: the
//! real registry (`registry`), kubectl and the flux CLI from the e2e parts, and free ports.
//! A dev-dependency only; nothing here is optional at run time: a missing part fails the test.

pub mod registry;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A port of 127.0.0.1 free now, for a child process to listen on.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .unwrap()
        .port()
}

/// kubectl of the control-plane build (`E2E_BIN`); `KUBECONFIG` must name the control plane.
pub fn kubectl_path() -> PathBuf {
    let bin =
        std::env::var_os("E2E_BIN").expect("E2E_BIN is not set: `make test` sets it (it holds kubectl)");
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: `make test` points it at the e2e control plane"
    );
    Path::new(&bin).join("kubectl")
}

/// Runs kubectl with `args`, `stdin` (or nothing) on its standard input.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(kubectl_path())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kubectl");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().expect("kubectl runs")
}

/// The directory e2e/flux/build.sh printed (the flux CLI, source-controller, their CRDs).
pub fn flux_bin() -> PathBuf {
    let dir = std::env::var("E2E_FLUX_BIN").expect(
        "E2E_FLUX_BIN is not set: `make test` sets it from `e2e/flux/build.sh` \
         (or run `export E2E_FLUX_BIN=$(e2e/flux/build.sh)`)",
    );
    PathBuf::from(dir)
}

/// Runs the real flux CLI against the test control plane (KUBECONFIG) with a time limit.
pub fn flux(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("120")
        .arg(flux_bin().join("flux"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run flux")
}

/// stdout and stderr of `flux` together, for assertions and failure messages.
pub fn flux_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
