//! Our controller started the way Flux starts its kustomize-controller: the container
//! arguments and environment of Flux's own `config/manager/deployment.yaml`, read from the
//! pinned module that `e2e/fluxpeer/build.sh` copies beside the Flux peers it builds.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::controller::ControllerProcess;
use test_support::free_port;

/// The directory `e2e/fluxpeer/build.sh` printed: the event receiver, the `flux logs` line
/// checker and Flux's Deployment. A missing variable fails the test: `make test` sets it.
pub fn fluxpeer_bin() -> PathBuf {
    let dir = std::env::var("E2E_FLUXPEER_BIN").expect(
        "E2E_FLUXPEER_BIN is not set: `make test` exports it from e2e/fluxpeer/build.sh \
         (or run `export E2E_FLUXPEER_BIN=$(e2e/fluxpeer/build.sh)`)",
    );
    PathBuf::from(dir)
}

/// The manager container of Flux's kustomize-controller Deployment, as the module ships it.
pub struct FluxDeployment {
    /// The container's `args`, in order.
    pub args: Vec<String>,
    /// Environment variables the pod sets from `metadata.namespace` (RUNTIME_NAMESPACE).
    pub namespace_env: Vec<String>,
    /// The container ports by name (`http-prom` 8080, `healthz` 9440).
    pub ports: Vec<(String, u16)>,
    /// The readiness and liveness probe paths.
    pub probes: Vec<String>,
}

/// Reads Flux's Deployment from the peer directory.
pub fn flux_deployment() -> FluxDeployment {
    let path = fluxpeer_bin().join("flux-kustomize-controller/deployment.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (built by e2e/fluxpeer/build.sh)", path.display()));
    let deployment: Value = serde_yaml::from_str(&text).expect("Flux's deployment.yaml");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let namespace_env = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace")
        .filter_map(|e| e["name"].as_str().map(str::to_string))
        .collect();
    let ports = container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p["name"].as_str()?.to_string(),
                u16::try_from(p["containerPort"].as_u64()?).ok()?,
            ))
        })
        .collect();
    let probes = ["readinessProbe", "livenessProbe"]
        .iter()
        .filter_map(|probe| container[probe]["httpGet"]["path"].as_str().map(str::to_string))
        .collect();
    FluxDeployment {
        args: strings(&container["args"]),
        namespace_env,
        ports,
        probes,
    }
}

/// Starts our binary with exactly Flux's container arguments and environment, as a pod in
/// `namespace` named `pod_name` would run it (the kubelet sets HOSTNAME to the pod name).
/// Added on a shared machine, and only these: the metrics and health addresses (Flux's
/// ports 8080 and 9440 need not be free here), and `extra` arguments, which a test uses for
/// what it must add, such as a `--watch-label-selector` so that Flux's
/// `--watch-all-namespaces` leaves other tests' Kustomizations alone, or `--events-addr`
/// (Flux's install adds that one too).
pub fn start_as_flux(namespace: &str, pod_name: &str, extra: &[String]) -> ControllerProcess {
    let deployment = flux_deployment();
    let (metrics_port, health_port) = (free_port(), free_port());
    let mut command = Command::new(env!("CARGO_BIN_EXE_kustomize-controller"));
    command
        .args(&deployment.args)
        .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
        .arg(format!("--health-addr=127.0.0.1:{health_port}"))
        .args(extra)
        .env_remove("RUST_LOG")
        .env_remove("POD_NAME")
        .env("HOSTNAME", pod_name);
    for name in &deployment.namespace_env {
        command.env(name, namespace);
    }
    ControllerProcess::spawn(command, namespace, metrics_port, health_port)
}
