use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Reconciles Flux Kustomizations: fetch, build, apply, prune, health-check.
#[derive(Parser)]
#[command(name = "kustomize-controller", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the Kustomization CustomResourceDefinition as YAML.
    Crds,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Crds => {
            print!("{}", kustomize_controller::api::kustomization::crd_yaml());
            ExitCode::SUCCESS
        }
    }
}
