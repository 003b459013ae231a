//! `image-reflector-controller`: the CLI of Flux's image reflection. For now it prints the
//! CRDs; the controller itself (`run`, with `options::RunOptions`, Flux's flags) comes with
//! the repository and policy pipelines.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use image_reflector::api::crd;

/// Reflects container image tags into ImageRepository and ImagePolicy objects.
#[derive(Parser)]
#[command(name = "image-reflector-controller", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the ImageRepository and ImagePolicy CustomResourceDefinitions as YAML.
    Crds {
        /// Write each CRD to its own file in DIR instead (what `make crds` commits).
        #[arg(long = "output-dir", value_name = "DIR")]
        output_dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
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
