use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kustomize_controller::cli::{self, DiffArgs};
use kustomize_controller::controller::{self, options::RunOptions};

/// Reconciles Flux Kustomizations: fetch, build, apply, prune, health-check.
///
/// Without a subcommand the arguments are those of `run`, so Flux's own Deployment arguments
/// (`--watch-all-namespaces --log-encoding=json ...`) start the controller unchanged.
#[derive(Parser)]
#[command(name = "kustomize-controller", version, args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller (also what a command line without a subcommand means).
    #[command(args_override_self = true)]
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
        #[arg(long = "var", value_name = "KEY=VALUE", value_parser = cli::parse_var)]
        vars: Vec<(String, String)>,
        #[command(flatten)]
        remote: cli::RemoteArgs,
    },
    /// Build locally, server-side dry-run against the cluster of KUBECONFIG, and print a unified
    /// diff per object that would change (Secret values masked). Exits 0 when nothing would
    /// change, 1 when something would, 2 on errors.
    Diff(DiffArgs),
}

/// The subcommand names; anything else in first position is a flag of `run`.
const SUBCOMMANDS: [&str; 5] = ["run", "crds", "build", "diff", "help"];

fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            eprintln!("unable to start the async runtime: {error}");
            None
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse_from(flux_runtime::options::with_default_subcommand(
        std::env::args_os(),
        &SUBCOMMANDS,
    ))
    .command
    {
        Command::Run(options) => {
            let Some(runtime) = runtime() else {
                return ExitCode::FAILURE;
            };
            let result = runtime.block_on(controller::run(*options));
            // A build abandoned on a blocking thread must not hold the exit: dropping the
            // runtime would wait for it.
            runtime.shutdown_background();
            match result {
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
            remote,
        } => match cli::flux_build(
            &root,
            &dir,
            kustomization,
            vars,
            remote.config(),
            remote.build_timeout,
        ) {
            Ok(built) => {
                for warning in &built.warnings {
                    eprintln!("warning: {warning}");
                }
                let mut out = std::io::BufWriter::new(std::io::stdout().lock());
                match cli::write_yaml(&built.objects, &mut out) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("build failed: writing the output: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
            Err(e) => {
                eprintln!("build failed: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Diff(args) => {
            let Some(runtime) = runtime() else {
                return ExitCode::from(2);
            };
            match runtime.block_on(cli::diff(args)) {
                Ok(report) => {
                    print!("{}", report.text);
                    ExitCode::from(u8::from(report.drifted))
                }
                Err(e) => {
                    eprintln!("diff failed: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
