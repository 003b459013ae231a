//! A token service for the registry's Bearer auth, as Docker Hub's or Harbor's: Basic
//! credentials in, an ES256 JWT out, whose `x5c` certificate the registry trusts
//! (`rootcertbundle`) and whose `access` claim grants pull on the scopes asked for. The
//! registry verifies every token itself, so a wrong scope or signature fails the listing.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;

/// What one token request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest {
    pub scopes: Vec<String>,
    pub service: Option<String>,
    /// The Basic user, `None` for an anonymous request.
    pub user: Option<String>,
}

pub struct TokenServer {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<TokenRequest>>>,
    cert: PathBuf,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Signer {
    key: EcdsaKeyPair,
    x5c: String,
    user: &'static str,
    password: &'static str,
}

impl TokenServer {
    pub async fn start(user: &'static str, password: &'static str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (key, cert) = make_key(dir.path());
        let signer = Arc::new(Signer {
            key,
            x5c: STANDARD.encode(CertificateDer::from_pem_file(&cert).unwrap()),
            user,
            password,
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let signer = signer.clone();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let response = issue(&request, &signer, &seen);
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            port,
            requests,
            cert,
            _dir: dir,
            task,
        }
    }

    pub fn realm(&self) -> String {
        format!("http://127.0.0.1:{}/token", self.port)
    }

    pub fn cert(&self) -> PathBuf {
        self.cert.clone()
    }
}

/// A P-256 key and its self-signed certificate, made with openssl.
fn make_key(dir: &Path) -> (EcdsaKeyPair, PathBuf) {
    let key = dir.join("token.key");
    let cert = dir.join("token.crt");
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args([
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=test-token-issuer",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (see README Requirements)");
    assert!(
        status.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let der = PrivatePkcs8KeyDer::from_pem_file(&key).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(
        &ECDSA_P256_SHA256_FIXED_SIGNING,
        der.secret_pkcs8_der(),
        &SystemRandom::new(),
    )
    .unwrap();
    (pair, cert)
}

fn issue(
    request: &Request<Incoming>,
    signer: &Signer,
    seen: &Mutex<Vec<TokenRequest>>,
) -> Response<Full<Bytes>> {
    let query = request.uri().query().unwrap_or_default();
    let mut scopes = Vec::new();
    let mut service = None;
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "scope" => scopes.push(value.into_owned()),
            "service" => service = Some(value.into_owned()),
            _ => {}
        }
    }
    let basic = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|v| STANDARD.decode(v).ok())
        .and_then(|v| String::from_utf8(v).ok());
    let user = basic
        .as_ref()
        .map(|b| b.split(':').next().unwrap_or_default().to_string());
    seen.lock().unwrap().push(TokenRequest {
        scopes: scopes.clone(),
        service: service.clone(),
        user: user.clone(),
    });
    let granted = match basic {
        None => false,
        Some(pair) if pair == format!("{}:{}", signer.user, signer.password) => true,
        Some(_) => {
            return reply(
                StatusCode::UNAUTHORIZED,
                r#"{"errors":[{"code":"UNAUTHORIZED","message":"invalid username or password"}]}"#.into(),
            );
        }
    };
    // Anonymous callers get a valid token that grants nothing, as Docker Hub's service does
    // for a private repository.
    let access: Vec<serde_json::Value> = if granted {
        scopes
            .iter()
            .filter_map(|scope| {
                let mut parts = scope.splitn(3, ':');
                let (kind, name, actions) = (parts.next()?, parts.next()?, parts.next()?);
                Some(serde_json::json!({
                    "type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()
                }))
            })
            .collect()
    } else {
        Vec::new()
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let header = serde_json::json!({ "typ": "JWT", "alg": "ES256", "x5c": [signer.x5c] });
    let claims = serde_json::json!({
        "iss": "test-token-issuer",
        "sub": user.unwrap_or_default(),
        "aud": service.unwrap_or_default(),
        "exp": now + 300,
        "nbf": now - 10,
        "iat": now,
        "jti": format!("{now}-{}", scopes.len()),
        "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = signer
        .key
        .sign(&SystemRandom::new(), signing_input.as_bytes())
        .unwrap();
    let token = format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()));
    reply(StatusCode::OK, serde_json::json!({ "token": token }).to_string())
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}
