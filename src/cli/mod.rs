//! The offline and preview commands: `build` prints what the controller would apply, `diff`
//! shows what applying it would change in a cluster. The controller itself is `controller::run`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kustomize::packed::{self, Packed};
use serde_json::Value;

use crate::api::{Kustomization, KustomizationSpec};
use crate::applier::{Action, Applier, ApplierOptions, ApplyRequest, Owner};
use crate::deadline::Deadline;
use crate::flux;
use crate::kube_ext::ResourceResolver;
use crate::remote::{RemoteConfig, RemoteFetcher};

pub fn parse_var(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .ok_or_else(|| format!("'{text}' is not KEY=VALUE"))
}

/// The spec an offline build uses: the fields of `spec` (from a Kustomization file or object)
/// over the required ones an offline build ignores.
fn offline_spec(spec_fields: Option<&Value>, has_vars: bool) -> Result<KustomizationSpec, String> {
    let mut spec = serde_json::json!({
        "interval": "10m",
        "prune": false,
        "sourceRef": {"kind": "GitRepository", "name": "offline"},
    });
    match spec_fields.and_then(Value::as_object) {
        Some(fields) => {
            for (key, value) in fields {
                spec[key] = value.clone();
            }
        }
        // Giving variables without a Kustomization turns post-build substitution on.
        None if has_vars => spec["postBuild"] = serde_json::json!({}),
        None => {}
    }
    serde_json::from_value(spec).map_err(|e| format!("Kustomization spec: {e}"))
}

fn read_object(file: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// Builds `dir` through Flux's layer, as the controller would, with remote entries fetched
/// as `remote` says.
fn build_objects(
    root: &Path,
    dir: &Path,
    spec: &KustomizationSpec,
    vars: Vec<(String, String)>,
    remote: RemoteConfig,
    timeout: Option<Duration>,
) -> Result<flux::Built, String> {
    let inline = spec.post_build.as_ref().and_then(|p| p.substitute.as_ref());
    let vars: BTreeMap<String, String> = flux::merge_vars(vec![vars.into_iter().collect()], inline);
    let deadline = Deadline::after(timeout.unwrap_or_else(|| spec.timeout()));
    let remote = Arc::new(RemoteFetcher::new(remote)?);
    let options = kustomize::BuildOptions::new().with_remote(remote.until(deadline.clone()));
    flux::build_until(root, dir, spec, &vars, &options, deadline).map_err(|e| e.to_string())
}

/// Builds `dir` through Flux's layer with the spec of the Kustomization file, if any.
pub fn flux_build(
    root: &Path,
    dir: &Path,
    kustomization: Option<PathBuf>,
    vars: Vec<(String, String)>,
    remote: RemoteConfig,
    timeout: Option<Duration>,
) -> Result<flux::Built, String> {
    let object = kustomization.as_deref().map(read_object).transpose()?;
    let spec = offline_spec(object.as_ref().and_then(|o| o.get("spec")), !vars.is_empty())?;
    build_objects(root, dir, &spec, vars, remote, timeout)
}

/// Flags of `build` for remote bases and HTTP files.
#[derive(clap::Args, Debug)]
pub struct RemoteArgs {
    /// Refuse remote Git bases, as the controller's --no-remote-bases does.
    #[arg(long = "no-remote-bases", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub no_remote_bases: bool,
    /// Time allowed for fetching one HTTP file resource (Git bases: their `?timeout=`).
    #[arg(long = "remote-timeout", default_value = "60s", value_parser = parse_duration)]
    pub timeout: std::time::Duration,
    /// Most bytes downloaded for one remote entry, and most bytes of a checked-out repository.
    #[arg(long = "remote-max-bytes", default_value_t = 64 << 20)]
    pub max_bytes: u64,
    /// As the controller's: refuse HTTP files with --no-remote-bases, deny networks.
    #[command(flatten)]
    pub lockdown: crate::remote::RemoteLockdownArgs,
    /// Time the whole build may take, remote fetches included, as spec.timeout bounds the
    /// controller's (default: the Kustomization's spec.timeout).
    #[arg(long = "timeout", value_parser = parse_duration)]
    pub build_timeout: Option<Duration>,
}

impl RemoteArgs {
    pub fn config(&self) -> RemoteConfig {
        self.lockdown.apply(RemoteConfig {
            allow_git: !self.no_remote_bases,
            file_timeout: self.timeout,
            max_download_bytes: self.max_bytes,
            max_tree_bytes: self.max_bytes,
            ..RemoteConfig::default()
        })
    }
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    crate::api::duration::parse(text)
        .ok_or_else(|| format!("invalid duration '{text}' (expected e.g. 30s, 5m)"))
}

/// Writes objects as a YAML stream a document at a time: a big build never exists twice in
/// memory, once as objects and once as text.
pub fn write_yaml(objects: &[Packed], out: &mut impl std::io::Write) -> std::io::Result<()> {
    kustomize::printer::document_pieces(objects.iter().map(Packed::to_value))
        .try_for_each(|piece| out.write_all(piece.as_bytes()))?;
    out.flush()
}

/// Arguments of `kustomize-controller diff`.
#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// The directory holding the kustomization (or the resources) to build, relative to --root.
    pub dir: PathBuf,
    /// The artifact root that confines every file read (default: the current directory).
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    /// The Kustomization whose spec and ownership apply: a YAML file, or `namespace/name` of
    /// one in the cluster.
    #[arg(long, value_name = "FILE|NAMESPACE/NAME")]
    pub kustomization: String,
    /// A post-build variable, standing in for postBuild.substituteFrom. Repeatable.
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = parse_var)]
    pub vars: Vec<(String, String)>,
}

/// What `diff` found.
pub struct DiffReport {
    /// Per object that would change: `Kind/namespace/name action` and its unified diff.
    pub text: String,
    /// Whether anything would be created or configured.
    pub drifted: bool,
}

/// Builds locally and server-side dry-runs the result: the preview before a push.
pub async fn diff(args: DiffArgs) -> Result<DiffReport, String> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("kube client: {e}"))?;
    let object = if Path::new(&args.kustomization).is_file() {
        read_object(Path::new(&args.kustomization))?
    } else {
        let (namespace, name) = args.kustomization.split_once('/').ok_or_else(|| {
            format!(
                "--kustomization '{}' is neither a file nor namespace/name",
                args.kustomization
            )
        })?;
        let ks = Api::<Kustomization>::namespaced(client.clone(), namespace)
            .get(name)
            .await
            .map_err(|e| format!("Kustomization {namespace}/{name}: {e}"))?;
        serde_json::to_value(ks).map_err(|e| e.to_string())?
    };
    let metadata = |field: &str| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
    };
    let owner = Owner::new(
        metadata("name").ok_or("the Kustomization has no metadata.name")?,
        metadata("namespace").unwrap_or("flux-system"),
    );
    let spec = offline_spec(object.get("spec"), !args.vars.is_empty())?;
    let objects = packed::values(
        &build_objects(
            &args.root,
            &args.dir,
            &spec,
            args.vars,
            RemoteConfig::default(),
            None,
        )?
        .objects,
    );

    let applier = Applier::new(ResourceResolver::new(client), ApplierOptions::default());
    let request = ApplyRequest {
        owner,
        objects,
        force: spec.force,
        ignore: &spec.ignore,
        revision: "",
    };
    let diffs = applier.diff(request).await.map_err(|e| e.to_string())?;
    let mut report = DiffReport {
        text: String::new(),
        drifted: false,
    };
    for d in diffs
        .iter()
        .filter(|d| matches!(d.action, Action::Created | Action::Configured))
    {
        report.drifted = true;
        report
            .text
            .push_str(&format!("{} {}\n{}", d.object, d.action, d.diff));
        if !d.diff.ends_with('\n') {
            report.text.push('\n');
        }
    }
    Ok(report)
}
