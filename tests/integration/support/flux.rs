//! The real Flux parts built by e2e/flux/build.sh: source-controller and its own CRDs, the flux
//! CLI, and a Git server over HTTP; plus our controller started the way Flux starts it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kustomize_controller::api::kustomization::SourceKind;
use serde::Deserialize as _;
use serde_json::json;
use tokio::sync::OnceCell;

use kustomize_controller::api::Kustomization;

use super::controller::{
    ControllerProcess, apply_kustomization, condition, config_map_value, get_kustomization,
};
use super::{TestNamespace, eventually};
use test_support::{flux, flux_bin, free_port};

/// Installs source-controller's own CRDs (config/crd/bases of its module), once per binary.
pub async fn source_controller_crds(client: &Client) {
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| install_source_controller_crds(client))
        .await;
}

/// Installs source-controller's own CRDs on the control plane of `client`, e.g. one a test
/// started for itself.
pub async fn install_source_controller_crds(client: &Client) {
    let dir = flux_bin().join("crds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let crd = CustomResourceDefinition::deserialize(serde_yaml::Deserializer::from_str(&text))
            .unwrap_or_else(|e| panic!("{} is not a CRD: {e}", file.display()));
        super::install_crd(client, &crd).await;
    }
}

/// A child process killed when dropped, its stderr and stdout in a log file.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn spawn(command: &mut Command, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).expect("log file");
        let child = command
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
        Self { child, log }
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The real source-controller watching one namespace, serving artifacts from a temporary
/// storage directory on a loopback port.
pub struct SourceController {
    daemon: Daemon,
    _storage: tempfile::TempDir,
}

impl SourceController {
    pub fn start(namespace: &str) -> Self {
        Self::start_with_args(namespace, &[])
    }

    /// [`SourceController::start`] with `extra` arguments after ours; a repeated flag keeps
    /// its last value, so `--watch-all-namespaces=true` with a `--watch-label-selector`
    /// widens it to labelled sources in every namespace.
    pub fn start_with_args(namespace: &str, extra: &[String]) -> Self {
        let storage = tempfile::tempdir().unwrap();
        let storage_addr = format!("127.0.0.1:{}", free_port());
        let log = std::env::temp_dir().join(format!("source-controller-{namespace}.log"));
        let daemon = Daemon::spawn(
            Command::new(flux_bin().join("source-controller"))
                .arg("--watch-all-namespaces=false")
                .arg("--enable-leader-election=false")
                .arg(format!("--storage-path={}", storage.path().display()))
                .arg(format!("--storage-addr={storage_addr}"))
                .arg(format!("--storage-adv-addr={storage_addr}"))
                .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
                .arg(format!("--health-addr=127.0.0.1:{}", free_port()))
                .arg("--log-level=debug")
                .args(extra)
                .env("RUNTIME_NAMESPACE", namespace),
            log,
        );
        Self {
            daemon,
            _storage: storage,
        }
    }

    pub fn logs(&self) -> String {
        self.daemon.logs()
    }
}

/// Our controller, started with exactly Flux's Deployment arguments and environment, scoped
/// to the test's namespace: a repeated flag keeps its last value, as pflag's do, so the added
/// `--watch-all-namespaces=false` keeps other tests' Kustomizations out of its sight.
pub fn start_our_controller(namespace: &str) -> ControllerProcess {
    super::flux_deployment::start_as_flux(
        namespace,
        "kustomize-controller-0",
        &["--watch-all-namespaces=false".to_string()],
    )
}

/// A Git smart-HTTP server (`git http-backend`) over a temporary directory of bare repositories.
pub struct GitServer {
    daemon: Daemon,
    root: tempfile::TempDir,
    addr: String,
}

impl GitServer {
    pub async fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        let addr_file = root.path().join(".addr");
        let daemon = Daemon::spawn(
            Command::new(flux_bin().join("git-http"))
                .arg(format!("-root={}", root.path().display()))
                .arg(format!("-addr-file={}", addr_file.display())),
            std::env::temp_dir().join(format!("git-http-{}.log", super::unique_suffix())),
        );
        let addr = eventually("git-http listening", Duration::from_secs(10), || async {
            std::fs::read_to_string(&addr_file).ok()
        })
        .await;
        Self { daemon, root, addr }
    }

    /// A new repository `name` on the server with a working clone to commit from.
    pub fn repository(&self, name: &str) -> GitRepo {
        let bare = self.root.path().join(format!("{name}.git"));
        git(
            self.root.path(),
            &[
                "init",
                "--quiet",
                "--bare",
                "--initial-branch=main",
                &path_arg(&bare),
            ],
        );
        let work = tempfile::tempdir().unwrap();
        git(work.path(), &["init", "--quiet", "--initial-branch=main"]);
        git(work.path(), &["remote", "add", "origin", &path_arg(&bare)]);
        GitRepo {
            url: format!("http://{}/{name}.git", self.addr),
            work,
        }
    }

    pub fn logs(&self) -> String {
        self.daemon.logs()
    }
}

fn path_arg(path: &Path) -> String {
    path.display().to_string()
}

/// Runs git in `dir` with a fixed identity; panics with git's output on failure.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=e2e",
            "-c",
            "user.email=e2e@example.invalid",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository on the [`GitServer`] and the clone tests commit from.
pub struct GitRepo {
    /// The clone URL source-controller uses.
    pub url: String,
    work: tempfile::TempDir,
}

impl GitRepo {
    /// Commits exactly `files` (everything else is removed), pushes main and returns the commit.
    pub fn commit(&self, files: &[(&str, &str)]) -> String {
        self.write_tree(files);
        git(
            self.work.path(),
            &["commit", "--quiet", "--allow-empty", "-m", "e2e commit"],
        );
        git(self.work.path(), &["push", "--quiet", "origin", "main"]);
        git(self.work.path(), &["rev-parse", "HEAD"])
    }

    /// Replaces the last commit with one holding `files` and force-pushes it.
    pub fn amend_and_force_push(&self, files: &[(&str, &str)]) -> String {
        self.write_tree(files);
        git(
            self.work.path(),
            &["commit", "--quiet", "--amend", "-m", "e2e rewritten commit"],
        );
        git(
            self.work.path(),
            &["push", "--quiet", "--force", "origin", "main"],
        );
        git(self.work.path(), &["rev-parse", "HEAD"])
    }

    /// Runs git in the working clone (tagging, pushing a branch), returning its output.
    pub fn git(&self, args: &[&str]) -> String {
        git(self.work.path(), args)
    }

    fn write_tree(&self, files: &[(&str, &str)]) {
        let work = self.work.path();
        for entry in std::fs::read_dir(work).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|n| n != ".git") {
                if path.is_dir() {
                    std::fs::remove_dir_all(&path).unwrap();
                } else {
                    std::fs::remove_file(&path).unwrap();
                }
            }
        }
        for (path, content) in files {
            let target = work.join(path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(target, content).unwrap();
        }
        git(work, &["add", "--all"]);
    }
}

/// Creates GitRepository `name` in `namespace` pointing at `url`'s main branch, polled every
/// `interval`.
pub async fn apply_git_repository(client: &Client, namespace: &str, name: &str, url: &str, interval: &str) {
    let spec = json!({"url": url, "interval": interval, "ref": {"branch": "main"}});
    apply_source(client, namespace, SourceKind::GitRepository, name, spec).await;
}

/// Creates or updates source `kind`/`name` in `namespace` with `spec`, as the tests' manager.
pub async fn apply_source(
    client: &Client,
    namespace: &str,
    kind: SourceKind,
    name: &str,
    spec: serde_json::Value,
) {
    let resource = kind.api_resource();
    let object = json!({
        "apiVersion": resource.api_version, "kind": resource.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    });
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource)
        .patch(
            name,
            &PatchParams::apply("e2e-tests").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {} {namespace}/{name}: {e}", resource.kind));
}

/// The revision source-controller reports for a commit on main.
pub fn main_revision(commit: &str) -> String {
    format!("main@sha1:{commit}")
}

/// One test's GitOps loop against the real parts: a namespace, a Git repository served over
/// HTTP, GitRepository `repo` on it, the real source-controller and our controller, all scoped
/// to that namespace.
pub struct GitOps {
    pub client: Client,
    pub repo: GitRepo,
    pub source: SourceController,
    pub controller: ControllerProcess,
    git: GitServer,
    ns: TestNamespace,
}

impl GitOps {
    /// Everything started; `interval` is how often source-controller polls the repository.
    pub async fn start(prefix: &str, interval: &str) -> Self {
        let client = super::client().await;
        super::kustomization_crd(&client).await;
        source_controller_crds(&client).await;
        let ns = TestNamespace::new(&client, prefix).await;
        let git = GitServer::start().await;
        let repo = git.repository("app");
        apply_git_repository(&client, &ns.name, "repo", &repo.url, interval).await;
        Self {
            source: SourceController::start(&ns.name),
            controller: start_our_controller(&ns.name),
            client,
            repo,
            git,
            ns,
        }
    }

    pub fn namespace(&self) -> &str {
        &self.ns.name
    }

    /// Creates Kustomization `name` from GitRepository `repo`, pruned, into this namespace.
    pub async fn apply_kustomization(&self, name: &str, path: &str) {
        let spec = json!({
            "interval": "10m", "retryInterval": "5s", "prune": true, "timeout": "30s", "path": path,
            "targetNamespace": self.namespace(), "sourceRef": {"kind": "GitRepository", "name": "repo"},
        });
        apply_kustomization(&self.client, self.namespace(), name, spec).await;
    }

    /// Waits until Kustomization `name` is Ready=`status` with `message` in its message; on a
    /// time-out the failure shows both controllers' logs.
    pub async fn wait_ready(&self, name: &str, status: &str, message: &str) -> Kustomization {
        let what = format!("{}/{name} Ready={status} '{message}'", self.namespace());
        let found = tokio::time::timeout(Duration::from_secs(90), async {
            loop {
                if let Some(ks) = get_kustomization(&self.client, self.namespace(), name).await
                    && condition(&ks, "Ready")
                        .is_some_and(|c| c.status == status && c.message.contains(message))
                {
                    return ks;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
        .await;
        if let Ok(ks) = found {
            return ks;
        }
        let last = get_kustomization(&self.client, self.namespace(), name)
            .await
            .and_then(|k| k.status);
        panic!(
            "timed out waiting for {what}; last status: {last:?}\nGitRepository status: {}\n\
             our log:\n{}\nsource-controller log:\n{}\ngit-http log:\n{}",
            self.git_repository_status(),
            self.controller.logs(),
            self.source.logs(),
            self.git.logs()
        )
    }

    fn git_repository_status(&self) -> String {
        let out = test_support::kubectl(
            &[
                "-n",
                self.namespace(),
                "get",
                "gitrepository",
                "repo",
                "-o",
                "jsonpath={.status}",
            ],
            None,
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The `value` key of ConfigMap `name`, `None` when it is missing.
    pub async fn config_map_value(&self, name: &str) -> Option<String> {
        config_map_value(&self.client, self.namespace(), name).await
    }

    /// Runs `flux` with `args` in this namespace.
    pub fn flux(&self, args: &[&str]) -> Output {
        let mut all = args.to_vec();
        all.extend(["--namespace", self.namespace()]);
        flux(&all)
    }

    pub async fn delete(self) {
        self.ns.delete().await;
    }
}
