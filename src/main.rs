use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kustomize_controller::controller::{self, options::RunOptions};

/// Reconciles Flux Kustomizations: fetch, build, apply, prune, health-check.
#[derive(Parser)]
#[command(name = "kustomize-controller", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller.
    Run(Box<RunOptions>),
    /// Print the Kustomization CustomResourceDefinition as YAML.
    Crds,
    /// Build a directory offline and print the final YAML, as the controller would apply it
    /// (generated kustomization.yaml when there is none, Flux's overrides, post-build
    /// substitution, commonMetadata).
    Build {
        /// The directory holding the kustomization (or the resources) to build.
        dir: std::path::PathBuf,
        /// The artifact root that confines every file read (default: the current directory).
        #[arg(long, default_value = ".")]
        root: std::path::PathBuf,
        /// A Flux Kustomization object (YAML) whose spec overrides are applied
        /// (targetNamespace, namePrefix/Suffix, patches, images, components, postBuild,
        /// commonMetadata, ...). Its spec.path and sourceRef are ignored: DIR is built.
        #[arg(long, value_name = "KS_YAML")]
        kustomization: Option<std::path::PathBuf>,
        /// A post-build variable, standing in for the values of postBuild.substituteFrom
        /// (the inline postBuild.substitute still wins, as in Flux). Repeatable. Without
        /// --kustomization, giving a variable turns post-build substitution on.
        #[arg(long = "var", value_name = "KEY=VALUE", value_parser = parse_var)]
        vars: Vec<(String, String)>,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(options) => {
            let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("unable to start the async runtime: {error}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(controller::run(*options)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(%error, "controller stopped");
                    eprintln!("kustomize-controller: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Crds => {
            print!("{}", kustomize_controller::api::kustomization::crd_yaml());
            ExitCode::SUCCESS
        }
        Command::Build {
            dir,
            root,
            kustomization,
            vars,
        } => match flux_build(&root, &dir, kustomization, vars) {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("build failed: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn parse_var(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .ok_or_else(|| format!("'{text}' is not KEY=VALUE"))
}

/// Builds `dir` through Flux's layer with the spec of the Kustomization file, if any.
fn flux_build(
    root: &std::path::Path,
    dir: &std::path::Path,
    kustomization: Option<std::path::PathBuf>,
    vars: Vec<(String, String)>,
) -> Result<String, String> {
    use kustomize_controller::api::KustomizationSpec;
    use kustomize_controller::build::{self, flux};

    // The fields the CRD requires but an offline build does not use.
    let mut spec = serde_json::json!({
        "interval": "10m",
        "prune": false,
        "sourceRef": {"kind": "GitRepository", "name": "offline"},
    });
    if let Some(file) = &kustomization {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let object: serde_json::Value =
            serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        if let Some(fields) = object.get("spec").and_then(serde_json::Value::as_object) {
            for (key, value) in fields {
                spec[key] = value.clone();
            }
        }
    } else if !vars.is_empty() {
        spec["postBuild"] = serde_json::json!({});
    }
    let spec: KustomizationSpec =
        serde_json::from_value(spec).map_err(|e| format!("Kustomization spec: {e}"))?;
    let inline = spec.post_build.as_ref().and_then(|p| p.substitute.as_ref());
    let vars = flux::merge_vars(vec![vars.into_iter().collect()], inline);
    let built =
        flux::build(root, dir, &spec, &vars, &build::BuildOptions::new()).map_err(|e| e.to_string())?;
    Ok(build::to_yaml(&built.objects))
}
