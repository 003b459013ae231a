//! A real registry: Debian's docker-registry (CNCF distribution 2.8) started by
//! `e2e/registry/serve.sh` on a free port of 127.0.0.1, tags pushed by `e2e/registry/push.sh`
//! (raw distribution API calls with curl). The image reflector scans it; OCIRepository tests
//! push artifacts to it with the flux CLI. A missing registry fails the tests, never skips them.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// How the registry serves; the default is plain HTTP without auth.
#[derive(Default)]
pub struct Options {
    pub htpasswd: Option<(&'static str, &'static str)>,
    pub tls: bool,
    /// With `tls`: clients must show a certificate of the registry's CA.
    pub mtls: bool,
    /// Bearer auth: the token service's realm URL and its signing certificate (PEM file).
    pub token: Option<(String, PathBuf)>,
}

pub struct Registry {
    child: Child,
    state: tempfile::TempDir,
    pub port: u16,
    pub options: Options,
}

fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/registry")
}

impl Registry {
    pub fn start(options: Options) -> Self {
        Self::start_in(tempfile::tempdir().expect("registry state dir"), options)
    }

    /// Stops the registry and starts it again on the same storage with other options (tags
    /// pushed without auth, then served behind a token service).
    pub fn restart(mut self, options: Options) -> Self {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let state = std::mem::replace(&mut self.state, tempfile::tempdir().unwrap());
        Self::start_in(state, options)
    }

    fn start_in(state: tempfile::TempDir, options: Options) -> Self {
        let bin = std::env::var("REGISTRY_BIN").unwrap_or_else(|_| REGISTRY_BIN.into());
        assert!(
            Path::new(&bin).exists(),
            "{bin} is missing: these tests need a real registry, Debian's docker-registry \
             package (CNCF distribution 2.8) and apache2-utils for htpasswd: \
             `apt-get install docker-registry apache2-utils` (`make tools` checks them)"
        );
        let port = free_port();
        let mut command = Command::new(e2e_dir().join("serve.sh"));
        command.arg(state.path()).arg(port.to_string());
        if let Some((user, password)) = options.htpasswd {
            command.arg("--htpasswd").arg(format!("{user}:{password}"));
        }
        if let Some((realm, cert)) = &options.token {
            command.arg("--token").arg(realm).arg(cert);
        }
        if options.tls {
            command.arg("--tls");
        }
        if options.mtls {
            command.arg("--mtls");
        }
        let log = std::fs::File::create(state.path().join("registry.log")).unwrap();
        let child = command
            .env("REGISTRY_BIN", &bin)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start e2e/registry/serve.sh");
        let mut registry = Self {
            child,
            state,
            port,
            options,
        };
        registry.wait_ready();
        registry
    }

    fn wait_ready(&mut self) {
        // Generous: the registry starts in well under a second on an idle machine.
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the registry exited ({status}) before serving:\n{}", self.log());
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < until,
                "the registry did not listen within 60s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the registry printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("registry.log")).unwrap_or_default()
    }

    /// `127.0.0.1:<port>`, the registry part of an image or an artifact's address.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self) -> String {
        let scheme = if self.options.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.host())
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.state.path().join("ca.crt")).expect("the TLS registry's ca.crt")
    }

    /// A client certificate and key the mutual-TLS registry accepts (PEM).
    pub fn client_pem(&self) -> (Vec<u8>, Vec<u8>) {
        let read = |name: &str| std::fs::read(self.state.path().join(name)).expect("client certificate");
        (read("client.crt"), read("client.key"))
    }

    /// Pushes `tags` to `repository`; returns (tag, digest) as push.sh computed them.
    pub fn push(&self, repository: &str, tags: &[&str]) -> Vec<(String, String)> {
        self.push_salted(repository, "", tags)
    }

    /// As `push`, with `salt` in the manifests: the same tag re-pushed gets a new digest.
    pub fn push_salted(&self, repository: &str, salt: &str, tags: &[&str]) -> Vec<(String, String)> {
        let mut command = Command::new(e2e_dir().join("push.sh"));
        command.arg(self.url()).arg(repository).arg("--salt").arg(salt);
        if let Some((user, password)) = self.options.htpasswd {
            command.arg("--user").arg(format!("{user}:{password}"));
        }
        if self.options.tls {
            command.arg("--cacert").arg(self.state.path().join("ca.crt"));
        }
        if self.options.mtls {
            command.arg("--cert").arg(self.state.path().join("client.crt"));
            command.arg("--key").arg(self.state.path().join("client.key"));
        }
        let output = command.args(tags).output().expect("run e2e/registry/push.sh");
        assert!(
            output.status.success(),
            "push.sh failed: {}\n{}\nregistry log:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            self.log()
        );
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| {
                let (tag, digest) = line.split_once(' ').expect("TAG DIGEST");
                (tag.to_string(), digest.to_string())
            })
            .collect()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // serve.sh execs the registry, so this is the registry's own pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
