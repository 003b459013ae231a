//! `image-reflector-controller`: the controller (`run`, also what flags alone mean, as Flux's
//! Deployment starts it) and its CRDs (`crds`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use image_reflector::api::crd;
use image_reflector::controller;
use image_reflector::options::RunOptions;

/// Reflects container image tags into ImageRepository and ImagePolicy objects.
///
/// Without a subcommand the arguments are those of `run`, so Flux's own Deployment arguments
/// (`--watch-all-namespaces --log-encoding=json ...`) start the controller unchanged.
#[derive(Parser)]
#[command(name = "image-reflector-controller", version, args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller (also what a command line without a subcommand means).
    #[command(args_override_self = true)]
    Run(Box<RunOptions>),
    /// Print the ImageRepository and ImagePolicy CustomResourceDefinitions as YAML.
    Crds {
        /// Write each CRD to its own file in DIR instead (what `make crds` commits).
        #[arg(long = "output-dir", value_name = "DIR")]
        output_dir: Option<PathBuf>,
    },
}

/// The subcommand names; anything else in first position is a flag of `run`.
const SUBCOMMANDS: [&str; 3] = ["run", "crds", "help"];

fn run(options: RunOptions) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("unable to start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(controller::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "controller stopped");
            eprintln!("image-reflector-controller: {error}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args = flux_runtime::options::with_default_subcommand(std::env::args_os(), &SUBCOMMANDS);
    match Cli::parse_from(args).command {
        Command::Run(options) => run(*options),
        Command::Crds { output_dir: None } => {
            print!("{}", crd::all_yaml());
            ExitCode::SUCCESS
        }
        Command::Crds {
            output_dir: Some(dir),
        } => match crd::write_files(&dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("image-reflector-controller crds: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
