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
    /// Build a kustomization directory offline and print the objects as YAML.
    Build {
        /// The directory holding the kustomization (or the resources) to build.
        dir: std::path::PathBuf,
        /// The artifact root that confines every file read (default: the current directory).
        #[arg(long, default_value = ".")]
        root: std::path::PathBuf,
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
        Command::Build { dir, root } => {
            use kustomize_controller::build;
            match build::build(&root, &dir, &build::BuildOptions::new()) {
                Ok(objects) => {
                    print!("{}", build::to_yaml(&objects));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("build failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
