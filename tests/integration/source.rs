//! The source step end to end: source objects in the control plane, artifacts over HTTP from a
//! misbehaving-on-demand server, extraction into the fetcher's cache.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kustomize_controller::api::kustomization::{Kustomization, SourceKind};
use kustomize_controller::api::source::Artifact;
use kustomize_controller::error::{Retry, StepError};
use kustomize_controller::source::{
    Fetcher, FetcherConfig, SourceAccess, SourceError, get_artifact, resolve_path,
};

use crate::support::artifacts::test_archive::{Member, file, gzip, tar_gz};
use crate::support::artifacts::{
    ALL_SOURCE_KINDS, ArtifactServer, Reply, artifact_json, create_source, publish_artifact, sha256_digest,
    source_crds,
};
use crate::support::{TestNamespace, client};

/// Every source kind (gate ExternalArtifact on), cross-namespace references allowed.
const EVERY_KIND: SourceAccess = SourceAccess {
    no_cross_namespace_refs: false,
    external_artifact: true,
};
/// Every source kind, cross-namespace references blocked.
const EVERY_KIND_SAME_NAMESPACE: SourceAccess = SourceAccess {
    no_cross_namespace_refs: true,
    external_artifact: true,
};

const REQUEUE_DEPENDENCY: Duration = Duration::from_secs(30);

fn kustomization(namespace: &str, source_ref: serde_json::Value) -> Kustomization {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": namespace},
        "spec": {"interval": "10m", "retryInterval": "1m", "prune": true, "path": "./deploy", "sourceRef": source_ref}
    }))
    .unwrap()
}

/// A fetcher whose cache lives in a fresh parent, with quick retries so failing cases end fast.
struct Harness {
    parent: tempfile::TempDir,
    fetcher: Fetcher,
}

impl Harness {
    fn new(tune: impl FnOnce(&mut FetcherConfig)) -> Self {
        let parent = tempfile::tempdir().unwrap();
        let mut config = FetcherConfig {
            cache_dir: parent.path().to_path_buf(),
            retries: 2,
            retry_wait_min: Duration::from_millis(10),
            retry_wait_max: Duration::from_millis(20),
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(5),
            ..FetcherConfig::default()
        };
        tune(&mut config);
        Self {
            fetcher: Fetcher::new(config).unwrap(),
            parent,
        }
    }

    /// Everything under the cache parent: one private cache directory and what it holds.
    fn files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                out.push(path.clone());
                if path.is_dir() && !path.is_symlink() {
                    walk(&path, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(self.parent.path(), &mut out);
        out
    }

    /// After a failure nothing may remain but the cache directory with its lock.
    fn assert_clean(&self) {
        let files = self.files();
        assert_eq!(files.len(), 2, "leftovers: {files:?}");
        assert!(
            files[0]
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("kustomize-controller-artifacts-"),
            "{files:?}"
        );
        assert_eq!(files[1], files[0].join("lock"));
    }

    /// Guards against hangs: every fetch in these tests must finish on its own.
    async fn fetch(
        &self,
        artifact: &Artifact,
    ) -> Result<kustomize_controller::source::ArtifactTree, SourceError> {
        tokio::time::timeout(Duration::from_secs(60), self.fetcher.fetch(artifact))
            .await
            .expect("fetch hung")
    }
}

fn artifact(url: &str, bytes: &[u8]) -> Artifact {
    serde_json::from_value(artifact_json(
        url,
        "main@sha1:0123456789abcdef0123456789abcdef01234567",
        bytes,
    ))
    .unwrap()
}

fn app_archive() -> Vec<u8> {
    tar_gz(&[
        Member::Dir("deploy/"),
        file("deploy/kustomization.yaml", "resources:\n- cm.yaml\n"),
        file(
            "deploy/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n",
        ),
        Member::Symlink("current", "deploy"),
    ])
}

#[tokio::test]
async fn every_source_kind_resolves_and_fetches() {
    let client = client().await;
    source_crds(&client).await;
    let ns = TestNamespace::new(&client, "source-kinds").await;
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|_| {});
    let archive = app_archive();
    for kind in ALL_SOURCE_KINDS {
        let name = format!("{}-src", kind.as_str().to_lowercase());
        let url = server.route(&format!("/{name}/latest.tar.gz"), Reply::Serve(archive.clone()));
        publish_artifact(
            &client,
            kind,
            &ns.name,
            &name,
            artifact_json(&url, "latest@sha256:abc", &archive),
        )
        .await;

        let ks = kustomization(&ns.name, serde_json::json!({"kind": kind.as_str(), "name": name}));
        let resolved = get_artifact(&client, &ks, EVERY_KIND_SAME_NAMESPACE)
            .await
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(
            (resolved.kind, resolved.namespace.as_str(), resolved.name.as_str()),
            (kind, ns.name.as_str(), name.as_str())
        );
        assert_eq!(resolved.artifact.url, url);
        assert_eq!(resolved.artifact.revision, "latest@sha256:abc");
        assert_eq!(
            resolved.artifact.digest.as_deref(),
            Some(sha256_digest(&archive).as_str())
        );

        let tree = harness
            .fetch(&resolved.artifact)
            .await
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let dir = resolve_path(tree.root(), ks.spec.path.as_deref()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap(),
            "resources:\n- cm.yaml\n"
        );
        assert_eq!(
            resolve_path(tree.root(), Some("current")).unwrap(),
            dir,
            "in-root symlinks are followed"
        );
    }
    ns.delete().await;
}

#[tokio::test]
async fn cross_namespace_refs_can_be_blocked() {
    let client = client().await;
    source_crds(&client).await;
    let own = TestNamespace::new(&client, "source-own").await;
    let other = TestNamespace::new(&client, "source-other").await;
    let archive = app_archive();
    publish_artifact(
        &client,
        SourceKind::GitRepository,
        &other.name,
        "shared",
        artifact_json("http://127.0.0.1:1/a.tar.gz", "r", &archive),
    )
    .await;
    let ks = kustomization(
        &own.name,
        serde_json::json!({"kind": "GitRepository", "name": "shared", "namespace": other.name}),
    );

    let err = get_artifact(&client, &ks, EVERY_KIND_SAME_NAMESPACE)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "can't access 'GitRepository/{}/shared', cross-namespace references have been blocked",
            other.name
        )
    );
    assert_eq!((err.reason(), err.is_terminal()), ("AccessDenied", true));
    assert_eq!(
        get_artifact(&client, &ks, EVERY_KIND).await.unwrap().namespace,
        other.name
    );
    own.delete().await;
    other.delete().await;
}

#[tokio::test]
async fn a_missing_source_retries_after_the_retry_interval() {
    let client = client().await;
    source_crds(&client).await;
    let ns = TestNamespace::new(&client, "source-missing").await;
    let ks = kustomization(&ns.name, serde_json::json!({"kind": "Bucket", "name": "nope"}));
    let err = get_artifact(&client, &ks, EVERY_KIND).await.unwrap_err();
    // Flux puts the API server's text in the condition.
    assert_eq!(
        err.to_string(),
        "buckets.source.toolkit.fluxcd.io \"nope\" not found"
    );
    assert_eq!(err.reason(), "ArtifactFailed");
    assert_eq!(err.retry(), Retry::RetryInterval);
    assert!(!err.is_terminal());
    ns.delete().await;
}

#[tokio::test]
async fn a_source_without_artifact_retries_after_requeue_dependency() {
    let client = client().await;
    source_crds(&client).await;
    let ns = TestNamespace::new(&client, "source-noartifact").await;
    create_source(&client, SourceKind::OCIRepository, &ns.name, "pending").await;
    let ks = kustomization(
        &ns.name,
        serde_json::json!({"kind": "OCIRepository", "name": "pending"}),
    );
    let err = get_artifact(&client, &ks, EVERY_KIND).await.unwrap_err();
    assert!(matches!(err, SourceError::NoArtifact { .. }), "{err}");
    assert_eq!(
        err.condition_message(REQUEUE_DEPENDENCY),
        "Source artifact not found, retrying in 30s"
    );
    assert_eq!(err.retry(), Retry::Dependency);
    assert_eq!(err.reason(), "ArtifactFailed");
    ns.delete().await;
}

#[tokio::test]
async fn the_same_digest_is_downloaded_once() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|_| {});
    let archive = app_archive();
    let url = server.route("/app/1.tar.gz", Reply::Serve(archive.clone()));
    let artifact = artifact(&url, &archive);
    let first = harness.fetch(&artifact).await.unwrap();
    let concurrent = futures::future::join_all((0..4).map(|_| harness.fetch(&artifact))).await;
    for tree in concurrent {
        assert_eq!(tree.unwrap().root(), first.root());
    }
    // Another URL with the same digest is the same content.
    let mirror = server.route("/mirror/1.tar.gz", Reply::Serve(archive.clone()));
    harness.fetch(&self::artifact(&mirror, &archive)).await.unwrap();
    assert_eq!(
        (server.hits("/app/1.tar.gz"), server.hits("/mirror/1.tar.gz")),
        (1, 0)
    );
}

#[tokio::test]
async fn the_host_override_sends_in_cluster_urls_to_a_local_server() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|c| c.host_override.source_controller = Some(server.authority()));
    let archive = app_archive();
    server.route("/gitrepository/ns/app/3.tar.gz", Reply::Serve(archive.clone()));
    let in_cluster = "http://source-controller.flux-system.svc.cluster.local./gitrepository/ns/app/3.tar.gz";
    let tree = harness.fetch(&artifact(in_cluster, &archive)).await.unwrap();
    assert!(tree.root().join("deploy/cm.yaml").is_file());
    assert_eq!(server.hits("/gitrepository/ns/app/3.tar.gz"), 1);
}

#[tokio::test]
async fn dropping_the_fetcher_removes_its_cache_once_trees_are_released() {
    let server = ArtifactServer::start().await;
    let Harness { parent, fetcher } = Harness::new(|_| {});
    let archive = app_archive();
    let url = server.route("/app/4.tar.gz", Reply::Serve(archive.clone()));
    let tree = fetcher.fetch(&artifact(&url, &archive)).await.unwrap();
    drop(fetcher);
    assert!(
        tree.root().join("deploy/cm.yaml").is_file(),
        "a tree in use outlives the fetcher"
    );
    drop(tree);
    assert_eq!(
        std::fs::read_dir(parent.path()).unwrap().count(),
        0,
        "cache directory removed"
    );
}

#[tokio::test]
async fn concurrent_first_fetches_download_once() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|_| {});
    let archive = app_archive();
    let url = server.route("/app/2.tar.gz", Reply::Serve(archive.clone()));
    let artifact = artifact(&url, &archive);
    let trees = futures::future::join_all((0..6).map(|_| harness.fetch(&artifact))).await;
    assert!(trees.iter().all(|t| t.is_ok()));
    assert_eq!(server.hits("/app/2.tar.gz"), 1);
}

#[tokio::test]
async fn a_digest_mismatch_is_artifact_failed_with_url_and_cause() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|_| {});
    let archive = app_archive();
    let url = server.route("/app/tampered.tar.gz", Reply::Serve(archive.clone()));
    let mut artifact = artifact(&url, &archive);
    let claimed = sha256_digest(b"something else");
    artifact.digest = Some(claimed.clone());
    let err = harness.fetch(&artifact).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("failed to verify archive from {url}: computed digest doesn't match provided '{claimed}'")
    );
    assert_eq!(err.reason(), "ArtifactFailed");
    // The source moved on: waited for like a dependency, as Flux v1.10.1 does.
    assert_eq!(err.retry(), Retry::Dependency);
    assert_eq!(
        err.condition_message(Duration::from_secs(30)),
        "Source is not ready, artifact digest changed, retrying in 30s"
    );
    assert_eq!(
        server.hits("/app/tampered.tar.gz"),
        1,
        "a mismatch is not retried"
    );
    harness.assert_clean();
}

#[tokio::test]
async fn truncated_and_corrupt_gzip_are_refused() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|_| {});
    let archive = tar_gz(&[Member::File(
        "big.bin",
        (0..50_000u32).map(|i| (i * 7919 % 251) as u8).collect(),
    )]);
    let truncated = archive[..archive.len() / 2].to_vec();
    let mut corrupt = archive.clone();
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0x55;
    // The published digest matches the bad bytes: extraction is what must catch them.
    for (path, bytes) in [
        ("/truncated.tar.gz", truncated),
        ("/corrupt.tar.gz", corrupt),
        ("/not-tar.tar.gz", gzip(&[9u8; 4096])),
    ] {
        let url = server.route(path, Reply::Serve(bytes.clone()));
        let err = harness.fetch(&artifact(&url, &bytes)).await.unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("failed to extract archive from {url}: corrupt archive")),
            "{message}"
        );
        harness.assert_clean();
    }
}

#[tokio::test]
async fn a_body_cut_short_by_the_server_is_retried_then_fails() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|_| {});
    let archive = app_archive();
    let url = server.route("/cut.tar.gz", Reply::Truncate(archive.clone(), archive.len() / 2));
    let err = harness.fetch(&artifact(&url, &archive)).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("failed to download archive from {url}: ")),
        "{err}"
    );
    assert!(err.to_string().contains("giving up after 3 attempts"), "{err}");
    assert_eq!(server.hits("/cut.tar.gz"), 3, "1 attempt + 2 retries");
    harness.assert_clean();
}

#[tokio::test]
async fn hostile_entries_are_refused_and_nothing_escapes() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|_| {});
    let cases: [(&str, Vec<Member>, &str); 6] = [
        (
            "/dotdot.tar.gz",
            vec![file("../x", "pwned")],
            "tar entry '../x': '..' path components are not allowed",
        ),
        (
            "/absolute.tar.gz",
            vec![file("/etc/x", "pwned")],
            "tar entry '/etc/x': absolute paths are not allowed",
        ),
        (
            "/symlink.tar.gz",
            vec![Member::Symlink("passwd", "/etc/passwd")],
            "tar entry 'passwd': link target '/etc/passwd' leads outside the extraction root",
        ),
        (
            "/hardlink.tar.gz",
            vec![Member::HardLink("passwd", "../../../../../../etc/passwd")],
            "tar entry 'passwd': link target '../../../../../../etc/passwd' leads outside the extraction root",
        ),
        (
            "/device.tar.gz",
            vec![Member::CharDevice("null")],
            "tar entry 'null': character device entries are not allowed",
        ),
        (
            "/fifo.tar.gz",
            vec![Member::Fifo("pipe")],
            "tar entry 'pipe': fifo entries are not allowed",
        ),
    ];
    for (path, members, cause) in cases {
        let mut members = members;
        members.insert(0, file("ok.yaml", "fine: true\n"));
        let bytes = tar_gz(&members);
        let url = server.route(path, Reply::Serve(bytes.clone()));
        let err = harness.fetch(&artifact(&url, &bytes)).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("failed to extract archive from {url}: {cause}")
        );
        assert_eq!(err.reason(), "ArtifactFailed");
        harness.assert_clean();
    }
}

#[tokio::test]
async fn artifacts_over_the_size_limit_are_refused() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|c| c.max_artifact_bytes = 1024);
    let bytes = tar_gz(&[Member::File(
        "noise.bin",
        (0..20_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect(),
    )]);
    assert!(bytes.len() > 1024);
    // Announced by Content-Length, and discovered while streaming when the server does not say.
    for (path, reply) in [
        ("/sized.tar.gz", Reply::Serve(bytes.clone())),
        ("/unsized.tar.gz", Reply::ServeUnsized(bytes.clone())),
    ] {
        let url = server.route(path, reply);
        let mut artifact = artifact(&url, &bytes);
        artifact.size = None;
        let err = harness.fetch(&artifact).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "failed to download archive from {url}: artifact is larger than the max download size of 1024 bytes"
            )
        );
        harness.assert_clean();
    }
    // A size published by the source is trusted to refuse before downloading anything.
    let url = server.route("/announced.tar.gz", Reply::Serve(bytes.clone()));
    let err = harness.fetch(&artifact(&url, &bytes)).await.unwrap_err();
    assert!(matches!(err, SourceError::TooLarge { limit: 1024, .. }), "{err}");
    assert_eq!(server.hits("/announced.tar.gz"), 0);
    // The extraction bound applies to what the archive expands to.
    let harness = Harness::new(|c| c.extract_limits.max_bytes = 8 * 1024);
    let bomb = tar_gz(&[Member::File("zeros.bin", vec![0; 1 << 20])]);
    let url = server.route("/bomb.tar.gz", Reply::Serve(bomb.clone()));
    let err = harness.fetch(&artifact(&url, &bomb)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "failed to extract archive from {url}: archive expands beyond the limit of 8192 bytes (at tar entry 'zeros.bin')"
        )
    );
    harness.assert_clean();
}

#[tokio::test]
async fn http_404_means_the_source_is_not_ready() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|_| {});
    let archive = app_archive();
    let url = server.url("/gone.tar.gz");
    let err = harness.fetch(&artifact(&url, &archive)).await.unwrap_err();
    assert!(matches!(err, SourceError::ArtifactNotFound { .. }), "{err}");
    assert_eq!(
        err.condition_message(REQUEUE_DEPENDENCY),
        "Source is not ready, artifact not found, retrying in 30s"
    );
    assert_eq!(err.retry(), Retry::Dependency);
    assert_eq!(server.hits("/gone.tar.gz"), 1, "404 is not retried");
    harness.assert_clean();
}

#[tokio::test]
async fn server_errors_are_retried_a_bounded_number_of_times() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|c| c.retries = 3);
    let archive = app_archive();
    let url = server.route("/flaky.tar.gz", Reply::Status(503));
    let err = harness.fetch(&artifact(&url, &archive)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "failed to download archive from {url}: status: 503 Service Unavailable (giving up after 4 attempts)"
        )
    );
    assert_eq!(server.hits("/flaky.tar.gz"), 4);
    // Other client errors are final.
    let url = server.route("/forbidden.tar.gz", Reply::Status(403));
    let err = harness.fetch(&artifact(&url, &archive)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("failed to download archive from {url}: status: 403 Forbidden")
    );
    assert_eq!(server.hits("/forbidden.tar.gz"), 1);
    harness.assert_clean();
}

#[tokio::test]
async fn a_stalling_server_times_out_instead_of_hanging() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|c| {
        c.read_timeout = Duration::from_millis(300);
        c.retries = 1;
    });
    let archive = app_archive();
    let url = server.route("/silent.tar.gz", Reply::StallBeforeHeaders);
    let err = harness.fetch(&artifact(&url, &archive)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "failed to download archive from {url}: no response within 300ms (giving up after 2 attempts)"
        )
    );
    assert_eq!(server.hits("/silent.tar.gz"), 2);

    let url = server.route("/slow.tar.gz", Reply::StallMidBody(archive.clone()));
    let err = harness.fetch(&artifact(&url, &archive)).await.unwrap_err();
    let half = archive.len() / 2;
    assert_eq!(
        err.to_string(),
        format!(
            "failed to download archive from {url}: no data for 300ms after {half} bytes (giving up after 2 attempts)"
        )
    );
    harness.assert_clean();
}

#[tokio::test]
async fn spec_path_is_clamped_to_the_artifact() {
    let server = ArtifactServer::start().await;
    let harness = Harness::new(|_| {});
    let archive = tar_gz(&[
        Member::Dir("base/"),
        file("base/kustomization.yaml", "resources: []\n"),
        Member::Dir("overlays/prod/"),
        Member::Symlink("overlays/shared", "../base"),
    ]);
    let url = server.route("/paths.tar.gz", Reply::Serve(archive.clone()));
    let tree = harness.fetch(&artifact(&url, &archive)).await.unwrap();
    let root = tree.root();
    assert_eq!(
        resolve_path(root, Some("overlays/shared")).unwrap(),
        root.join("base")
    );
    // Escapes are clamped to the artifact root, as Flux's SecureJoin does.
    for (escape, inside) in [
        ("../..", ""),
        ("overlays/../../x/../base", "base"),
        ("overlays/shared/../../..", ""),
        ("overlays/shared/../../../overlays", "overlays"),
    ] {
        assert_eq!(
            resolve_path(root, Some(escape)).unwrap(),
            root.join(inside),
            "{escape}"
        );
    }
    let err = resolve_path(root, Some("./overlays/staging")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "kustomization path not found: stat overlays/staging: no such file or directory"
    );
    // Nothing was created by the lookups.
    assert!(!root.join("overlays/staging").exists());
}
