//! Sources without a source-controller: artifacts served over HTTP by this program.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Artifacts served over HTTP, by path.
#[derive(Clone, Default)]
pub(crate) struct ArtifactServer {
    files: Arc<RwLock<HashMap<String, Vec<u8>>>>,
    base: String,
}

impl ArtifactServer {
    pub(crate) async fn start() -> ArtifactServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = ArtifactServer {
            files: Default::default(),
            base: format!("http://{}", listener.local_addr().unwrap()),
        };
        let files = server.files.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let files = files.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]);
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let body = files.read().unwrap().get(&path).cloned();
                    let response = match body {
                        Some(body) => [
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                                body.len()
                            )
                            .into_bytes(),
                            body,
                        ]
                        .concat(),
                        None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_vec(),
                    };
                    let _ = stream.write_all(&response).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        server
    }

    /// Publishes a tarball of `files` and returns the artifact status of a source serving it.
    pub(crate) fn publish(&self, path: &str, revision: &str, files: &[(String, String)]) -> Value {
        let bytes = tarball(files);
        let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
        let size = bytes.len();
        self.files.write().unwrap().insert(format!("/{path}"), bytes);
        json!({"path": path, "url": format!("{}/{path}", self.base), "revision": revision,
            "digest": digest, "size": size, "lastUpdateTime": now()})
    }
}

pub(crate) fn tarball(files: &[(String, String)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, path, content.as_bytes())
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

pub(crate) fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The files of one Kustomization's artifact: a kustomization.yaml and its objects.
pub(crate) fn artifact_files(objects: &[String]) -> Vec<(String, String)> {
    vec![
        ("kustomization.yaml".into(), "resources: [objects.yaml]\n".into()),
        ("objects.yaml".into(), objects.join("---\n")),
    ]
}

pub(crate) fn config_map(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n")
}

pub(crate) fn deployment(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - {{name: app, image: \"registry.invalid/app:1\"}}\n"
    )
}

/// The flux-benchmark application: ServiceAccount, Service, Deployment at 0 replicas, Ingress.
/// The Service is headless: the test control plane's service range has 254 addresses.
pub(crate) fn fleet_app(name: &str) -> Vec<String> {
    vec![
        format!("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n"),
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  clusterIP: None\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 80}}\n"
        ),
        deployment(name, 0),
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\nspec:\n  rules:\n  - host: {name}.bench.invalid\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          service: {{name: {name}, port: {{number: 80}}}}\n"
        ),
    ]
}
