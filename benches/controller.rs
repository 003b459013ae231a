//! Controller benchmark: N Kustomizations of M ConfigMaps each, from nothing to all Ready, on
//! the control plane KUBECONFIG names. Reports wall time and the controller's peak RSS.
//!
//! `cargo bench --bench controller -- [kustomizations] [objects]` (defaults 100 10);
//! the controller binary is `$BENCH_CONTROLLER` or target/release/kustomize-controller.

use std::io::Write;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kustomize_controller::api::Kustomization;
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::json;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn tarball(kustomizations: usize, objects: usize) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let mut add = |path: String, content: String| {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, path, content.as_bytes())
            .unwrap();
    };
    for k in 0..kustomizations {
        let docs: Vec<String> = (0..objects)
            .map(|o| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app{k}-cm{o}\ndata:\n  value: \"{o}\"\n"))
            .collect();
        add(format!("app{k}/objects.yaml"), docs.join("---\n"));
        add(
            format!("app{k}/kustomization.yaml"),
            "resources: [objects.yaml]\n".to_string(),
        );
    }
    builder.into_inner().unwrap().finish().unwrap()
}

async fn serve(bytes: Vec<u8>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let bytes = bytes.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let _ = stream.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    bytes.len()
                );
                let _ = stream.write_all(&[head.into_bytes(), bytes].concat()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    format!("http://{addr}/artifact.tar.gz")
}

fn source_crd() -> serde_json::Value {
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gitrepositories.source.toolkit.fluxcd.io"},
        "spec": {"group": "source.toolkit.fluxcd.io", "scope": "Namespaced",
            "names": {"kind": "GitRepository", "listKind": "GitRepositoryList", "plural": "gitrepositories", "singular": "gitrepository"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": open, "status": open}}}}]}})
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (count, objects) = (
        args.first().copied().unwrap_or(100),
        args.get(1).copied().unwrap_or(10),
    );
    let client = Client::try_default().await.expect("KUBECONFIG");
    let apply = PatchParams::apply("bench").force();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&()),
    );
    for crd in [
        serde_json::to_value(kustomize_controller::api::kustomization::crd()).unwrap(),
        source_crd(),
    ] {
        let name = crd["metadata"]["name"].as_str().unwrap().to_string();
        crds.patch(&name, &apply, &Patch::Apply(crd)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    let ns = format!("bench-ctl-{}", std::process::id());
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();

    let bytes = tarball(count, objects);
    let url = serve(bytes.clone()).await;
    let repos: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &SourceKind::GitRepository.api_resource());
    let repo = json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": ns}, "spec": {}});
    repos.patch("repo", &apply, &Patch::Apply(repo)).await.unwrap();
    let artifact = json!({"status": {"artifact": {"url": url, "revision": "main@sha1:bench",
        "digest": format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)))}}});
    repos
        .patch_status("repo", &PatchParams::default(), &Patch::Merge(artifact))
        .await
        .unwrap();

    let binary =
        std::env::var("BENCH_CONTROLLER").unwrap_or_else(|_| "target/release/kustomize-controller".into());
    let mut controller = std::process::Command::new(binary)
        .args([
            "run",
            "--watch-all-namespaces=false",
            "--metrics-addr=127.0.0.1:0",
            "--health-addr=127.0.0.1:0",
            "--log-level=error",
        ])
        .env("RUNTIME_NAMESPACE", &ns)
        .spawn()
        .expect("start the controller");

    let started = Instant::now();
    let kustomizations: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    for k in 0..count {
        let ks = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": format!("app{k}"), "namespace": ns},
            "spec": {"interval": "10m", "prune": true, "path": format!("./app{k}"), "targetNamespace": ns,
                "sourceRef": {"kind": "GitRepository", "name": "repo"}}});
        kustomizations
            .patch(&format!("app{k}"), &apply, &Patch::Apply(ks))
            .await
            .unwrap();
    }
    loop {
        let list = kustomizations.list(&Default::default()).await.unwrap();
        let ready = list
            .items
            .iter()
            .filter(|ks| {
                ks.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
            })
            .count();
        if ready == count {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            eprintln!("only {ready}/{count} Ready after 600s");
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let elapsed = started.elapsed();
    let rss = peak_rss_kib(controller.id());
    println!(
        "{count} Kustomizations x {objects} ConfigMaps: all Ready in {:.1}s; controller peak RSS {} MiB",
        elapsed.as_secs_f64(),
        rss.map_or("?".into(), |kib| format!("{:.1}", kib as f64 / 1024.0))
    );
    let _ = std::io::stdout().flush();
    // Clean up through the controller, so the finalizers are honoured.
    for ks in kustomizations.list(&Default::default()).await.unwrap().items {
        let _ = kustomizations.delete(&ks.name_any(), &Default::default()).await;
    }
    let cleanup = Instant::now();
    while !kustomizations
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .is_empty()
        && cleanup.elapsed() < Duration::from_secs(120)
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = controller.kill();
    let _ = controller.wait();
    let _ = namespaces.delete(&ns, &Default::default()).await;
}
