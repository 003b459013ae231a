//! A local HTTPS listener that records the request heads it receives, to see which credentials
//! a client sends to a server a tenant names. Its CA is generated per listener with openssl.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub struct RecordingServer {
    pub port: u16,
    /// The CA that signed the listener's certificate, PEM.
    pub ca_pem: String,
    heads: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

/// Runs openssl in `dir` with `args`, split at whitespace (no argument contains any).
fn openssl(dir: &Path, args: &str) {
    let args: Vec<&str> = args.split_whitespace().collect();
    let out = Command::new("openssl")
        .args(&args)
        .current_dir(dir)
        .output()
        .expect("openssl is required");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl RecordingServer {
    /// Serves 127.0.0.1 on a free port; every request is answered 401 and its head kept.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        openssl(d, "ecparam -name prime256v1 -genkey -noout -out ca.key");
        openssl(
            d,
            "req -x509 -new -key ca.key -sha256 -days 1 -subj /CN=recorder-ca \
             -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign -out ca.crt",
        );
        openssl(d, "ecparam -name prime256v1 -genkey -noout -out leaf.ec");
        openssl(d, "pkcs8 -topk8 -nocrypt -in leaf.ec -out leaf.key");
        openssl(d, "req -new -key leaf.key -subj /CN=recorder -out leaf.csr");
        std::fs::write(
            d.join("leaf.ext"),
            "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
        )
        .unwrap();
        openssl(
            d,
            "x509 -req -in leaf.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -sha256 \
             -extfile leaf.ext -out leaf.crt",
        );
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(d.join("leaf.crt"))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(d.join("leaf.key")).unwrap();
        let config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads: Arc<Mutex<Vec<String>>> = Arc::default();
        let recorded = heads.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (config, recorded) = (config.clone(), recorded.clone());
                std::thread::spawn(move || {
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, stream);
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
                        match tls.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    recorded
                        .lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&head).into_owned());
                    let _ = tls.write_all(
                        b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    let _ = tls.flush();
                });
            }
        });
        Self {
            port,
            ca_pem: std::fs::read_to_string(d.join("ca.crt")).unwrap(),
            heads,
            _dir: dir,
        }
    }

    /// The request heads received so far.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}
