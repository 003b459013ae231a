//! OCIRepository sources on the real registry of the `test-support` crate (Debian's
//! docker-registry on plain HTTP at 127.0.0.1, the image reflector's tests run the same):
//! artifacts pushed to it by the real `flux push artifact`.

use kube::Client;
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::json;
use test_support::registry::Registry;
use test_support::{flux, flux_text};

use super::flux::apply_source;

/// What an OCIRepository test does with the registry.
pub trait Artifacts {
    /// `oci://<host>/<repository>`, an OCIRepository's URL.
    fn oci_url(&self, repository: &str) -> String;

    /// Pushes exactly `files` as an artifact to `repository:tag` with the real
    /// `flux push artifact`, recording `source` and `revision` (`<branch>@sha1:<commit>`) as its
    /// origin; returns the manifest digest the CLI reports (`sha256:...`).
    fn push_artifact(
        &self,
        repository: &str,
        tag: &str,
        files: &[(&str, &str)],
        source: &str,
        revision: &str,
    ) -> String;
}

impl Artifacts for Registry {
    fn oci_url(&self, repository: &str) -> String {
        format!("oci://{}/{repository}", self.host())
    }

    fn push_artifact(
        &self,
        repository: &str,
        tag: &str,
        files: &[(&str, &str)],
        source: &str,
        revision: &str,
    ) -> String {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let target = dir.path().join(path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(target, content).unwrap();
        }
        let reference = format!("{}:{tag}", self.oci_url(repository));
        let out = flux(&[
            "push",
            "artifact",
            &reference,
            &format!("--path={}", dir.path().display()),
            &format!("--source={source}"),
            &format!("--revision={revision}"),
            "--insecure-registry",
            "--output=json",
        ]);
        assert!(
            out.status.success(),
            "flux push artifact {reference} failed: {}\nregistry log:\n{}",
            flux_text(&out),
            self.log()
        );
        let pushed: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("flux push artifact printed no JSON ({e}): {}", flux_text(&out)));
        let digest = pushed["digest"].as_str().unwrap_or_default();
        assert!(
            digest.starts_with("sha256:"),
            "flux push artifact printed no digest: {pushed}"
        );
        digest.to_string()
    }
}

/// Creates OCIRepository `name` in `namespace` following `url`'s `tag` over plain HTTP, polled
/// every `interval`.
pub async fn apply_oci_repository(
    client: &Client,
    namespace: &str,
    name: &str,
    url: &str,
    tag: &str,
    interval: &str,
) {
    let spec = json!({"url": url, "ref": {"tag": tag}, "interval": interval, "insecure": true});
    apply_source(client, namespace, SourceKind::OCIRepository, name, spec).await;
}
