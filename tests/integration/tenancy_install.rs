//! The multi-tenant install (`config/` with `components/multi-tenant`) builds, validates on the
//! API server, and starts the controller with Flux's lockdown flags.

use std::collections::BTreeMap;
use std::path::Path;

use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kustomize::{BuildOptions, packed};
use kustomize_controller::api::KustomizationSpec;
use kustomize_controller::applier::{ApplyRequest, Owner};
use kustomize_controller::controller::options::RunOptions;
use kustomize_controller::flux;
use serde_json::json;

use crate::support::applier::applier;
use crate::support::client;

#[derive(Parser)]
struct Run {
    #[command(flatten)]
    options: RunOptions,
}

#[tokio::test]
async fn the_multi_tenant_component_locks_the_controller_down() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let spec: KustomizationSpec = serde_json::from_value(json!({
        "interval": "10m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "x"},
        "components": ["components/multi-tenant"],
    }))
    .unwrap();
    let built = flux::build(&config, &config, &spec, &BTreeMap::new(), &BuildOptions::new())
        .unwrap_or_else(|e| panic!("config/ with components/multi-tenant does not build: {e}"));
    let objects = packed::values(&built.objects);
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "kustomize-controller")
        .expect("the controller's Deployment");
    let args: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    // `run` is the subcommand; clap reads the first argument as the program's name.
    assert_eq!(args.first(), Some(&"run"), "{args:?}");
    let run = Run::try_parse_from(args.iter().copied())
        .unwrap_or_else(|e| panic!("the controller refuses the component's arguments {args:?}: {e}"));
    assert!(run.options.no_cross_namespace_refs, "{args:?}");
    assert!(run.options.no_remote_bases, "{args:?}");
    assert_eq!(run.options.default_service_account, "default", "{args:?}");

    // A real dry-run of the namespaced objects needs their namespace to exist.
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "flux-system"}})).unwrap();
    let _ = Api::<Namespace>::all(client().await)
        .create(&PostParams::default(), &ns)
        .await;
    let (applier, _, _) = applier().await;
    let request = ApplyRequest {
        owner: Owner::new("config", "flux-system"),
        objects,
        force: false,
        ignore: &[],
        revision: "",
    };
    applier
        .diff(request)
        .await
        .unwrap_or_else(|e| panic!("the multi-tenant install does not validate: {e}"));
}
