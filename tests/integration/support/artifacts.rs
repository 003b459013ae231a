//! Source-controller stand-ins: an HTTP artifact server, and publishing an
//! artifact by patching a source object's status, as source-controller does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kustomize_controller::api::kustomization::SourceKind;
use sha2::Digest as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "../../../src/source/test_archive.rs"]
pub mod test_archive;

/// What the server does for one path.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200 with the bytes and a Content-Length.
    Serve(Vec<u8>),
    /// 200 without Content-Length: the body runs until the connection closes.
    ServeUnsized(Vec<u8>),
    /// Announces the full length, sends the first `cut` bytes, closes.
    Truncate(Vec<u8>, usize),
    /// A bare status code with an empty body.
    Status(u16),
    /// Reads the request, never answers.
    StallBeforeHeaders,
    /// Sends headers and the first half of the body, then goes silent.
    StallMidBody(Vec<u8>),
}

#[derive(Default)]
struct Routes {
    replies: HashMap<String, Reply>,
    hits: HashMap<String, usize>,
}

/// An HTTP/1.1 server on a random loopback port, written on raw TCP so that it can misbehave
/// precisely. Unknown paths get 404. Every request is counted per path.
#[derive(Clone)]
pub struct ArtifactServer {
    addr: SocketAddr,
    routes: Arc<Mutex<Routes>>,
}

impl ArtifactServer {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind artifact server");
        let addr = listener.local_addr().unwrap();
        let routes = Arc::new(Mutex::new(Routes::default()));
        let shared = routes.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        Self { addr, routes }
    }

    /// Sets the reply for `path` (which starts with `/`) and returns its URL.
    pub fn route(&self, path: &str, reply: Reply) -> String {
        self.routes
            .lock()
            .unwrap()
            .replies
            .insert(path.to_string(), reply);
        self.url(path)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `host:port` of the server.
    pub fn authority(&self) -> String {
        self.addr.to_string()
    }

    /// Requests received for `path` so far.
    pub fn hits(&self, path: &str) -> usize {
        self.routes.lock().unwrap().hits.get(path).copied().unwrap_or(0)
    }
}

async fn serve(mut stream: TcpStream, routes: Arc<Mutex<Routes>>) {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&request);
    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
    let reply = {
        let mut routes = routes.lock().unwrap();
        *routes.hits.entry(path.clone()).or_default() += 1;
        routes.replies.get(&path).cloned().unwrap_or(Reply::Status(404))
    };
    let head = |len: Option<usize>| {
        let length = len
            .map(|l| format!("Content-Length: {l}\r\n"))
            .unwrap_or_default();
        format!("HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\n{length}Connection: close\r\n\r\n")
            .into_bytes()
    };
    let _ = match reply {
        Reply::Serve(body) => write_all(&mut stream, &[head(Some(body.len())), body].concat()).await,
        Reply::ServeUnsized(body) => write_all(&mut stream, &[head(None), body].concat()).await,
        Reply::Truncate(body, cut) => {
            write_all(
                &mut stream,
                &[head(Some(body.len())), body[..cut].to_vec()].concat(),
            )
            .await
        }
        Reply::Status(code) => {
            let status =
                format!("HTTP/1.1 {code} Status {code}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            write_all(&mut stream, status.as_bytes()).await
        }
        Reply::StallBeforeHeaders => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(())
        }
        Reply::StallMidBody(body) => {
            // Written without closing: the client sees an open, silent connection.
            let _ = stream
                .write_all(&[head(Some(body.len())), body[..body.len() / 2].to_vec()].concat())
                .await;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(())
        }
    };
}

async fn write_all(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(bytes).await?;
    stream.shutdown().await
}

/// `sha256:<hex>` of `bytes`, as source-controller computes it.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

pub const ALL_SOURCE_KINDS: [SourceKind; 4] = [
    SourceKind::GitRepository,
    SourceKind::OCIRepository,
    SourceKind::Bucket,
    SourceKind::ExternalArtifact,
];

/// Installs the source CRDs, once per test binary: source-controller's own (see
/// [`super::flux::source_controller_crds`]), so every test sees the schema the real
/// source-controller tests run against and none changes it halfway through a run.
pub async fn source_crds(client: &Client) {
    super::flux::source_controller_crds(client).await;
}

pub fn source_api(client: &Client, kind: SourceKind, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &kind.api_resource())
}

/// A spec that source-controller's own CRDs accept.
fn stand_in_spec(kind: SourceKind) -> serde_json::Value {
    match kind {
        SourceKind::GitRepository => {
            serde_json::json!({"interval": "1m", "url": "https://example.invalid/repo"})
        }
        SourceKind::OCIRepository => {
            serde_json::json!({"interval": "1m", "url": "oci://example.invalid/repo"})
        }
        SourceKind::Bucket => {
            serde_json::json!({"interval": "1m", "bucketName": "repo", "endpoint": "example.invalid"})
        }
        SourceKind::ExternalArtifact => serde_json::json!({}),
    }
}

/// Creates (or updates) a source object with no status.
pub async fn create_source(client: &Client, kind: SourceKind, namespace: &str, name: &str) {
    let resource = kind.api_resource();
    let object = serde_json::json!({
        "apiVersion": resource.api_version, "kind": resource.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": stand_in_spec(kind),
    });
    source_api(client, kind, namespace)
        .patch(
            name,
            &PatchParams::apply("e2e-source-controller").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("create {} {namespace}/{name}: {e}", kind.as_str()));
}

/// Publishes `artifact` (a `status.artifact` JSON object) on the source, creating the source
/// if needed, by patching the status subresource.
pub async fn publish_artifact(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    artifact: serde_json::Value,
) {
    create_source(client, kind, namespace, name).await;
    let status = serde_json::json!({"status": {"artifact": artifact}});
    source_api(client, kind, namespace)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap_or_else(|e| panic!("publish artifact on {} {namespace}/{name}: {e}", kind.as_str()));
}

/// The `status.artifact` source-controller would write for `bytes` served at `url`.
pub fn artifact_json(url: &str, revision: &str, bytes: &[u8]) -> serde_json::Value {
    serde_json::json!({
        "url": url,
        "revision": revision,
        "digest": sha256_digest(bytes),
        "path": url.rsplit_once("//").map_or(url, |(_, rest)| rest),
        "size": bytes.len(),
        "lastUpdateTime": "2026-01-01T00:00:00Z",
    })
}
