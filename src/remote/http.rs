//! One HTTP exchange with a size-bounded body: the remote fetcher's only network primitive.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode, header};
use std::net::IpAddr;
use std::sync::Arc;

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use url::{Host, Position, Url};

use super::Connector;
use super::deny::DeniedNetworks;

/// How many redirects a GET follows, as Go's HTTP client does (it allows ten).
const MAX_REDIRECTS: usize = 10;

/// The longest a server may stay silent: for the response head, then between two pieces of
/// its body. The whole exchange is bounded too, by the fetch's timeout.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) struct Http {
    client: Client<Connector, Full<Bytes>>,
    /// Checked here for IP literals, which the connector does not resolve; the connector's
    /// resolver checks names.
    denied: Arc<DeniedNetworks>,
    read_timeout: Duration,
}

/// A request to send.
pub(crate) struct Call<'a> {
    pub method: Method,
    pub url: String,
    pub headers: &'a [(&'static str, &'a str)],
    pub body: Vec<u8>,
}

impl Http {
    pub(crate) fn new(connector: Connector, denied: Arc<DeniedNetworks>) -> Self {
        Http {
            client: Client::builder(TokioExecutor::new()).build(connector),
            denied,
            read_timeout: READ_TIMEOUT,
        }
    }

    /// Sends `call`, following redirects of a GET, and reads at most `max_bytes` of the body.
    pub(crate) async fn send(
        &self,
        mut call: Call<'_>,
        max_bytes: u64,
    ) -> Result<(StatusCode, Vec<u8>), String> {
        for _ in 0..=MAX_REDIRECTS {
            check_literal(&self.denied, &call.url)?;
            let mut request = Request::builder()
                .method(call.method.clone())
                .uri(&call.url)
                .header(header::USER_AGENT, "kustomize-controller");
            for (name, value) in call.headers {
                request = request.header(*name, *value);
            }
            let request = request
                .body(Full::new(Bytes::from(call.body.clone())))
                .map_err(|e| format!("invalid URL: {e}"))?;
            let response = self
                .read(self.client.request(request))
                .await?
                .map_err(|e| describe(&e))?;
            let status = response.status();
            if status.is_redirection() && call.method == Method::GET {
                let location = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| format!("redirect {status} without a Location"))?;
                call.url = redirect_target(&call.url, location)?;
                continue;
            }
            let mut body = response.into_body();
            let mut out = Vec::new();
            while let Some(frame) = self.read(body.frame()).await? {
                let frame = frame.map_err(|e| describe(&e))?;
                if let Some(data) = frame.data_ref() {
                    if (out.len() + data.len()) as u64 > max_bytes {
                        return Err(format!(
                            "the response is larger than the limit of {max_bytes} bytes"
                        ));
                    }
                    out.extend_from_slice(data);
                }
            }
            return Ok((status, out));
        }
        Err(format!("more than {MAX_REDIRECTS} redirects"))
    }

    /// `read` unless the server stays silent for longer than the read timeout.
    async fn read<T>(&self, read: impl Future<Output = T>) -> Result<T, String> {
        tokio::time::timeout(self.read_timeout, read)
            .await
            .map_err(|_| format!("the server sent nothing for {}s", self.read_timeout.as_secs_f64()))
    }
}

/// Refuses a URL whose host is a denied IP address (redirect targets included).
fn check_literal(denied: &DeniedNetworks, url: &str) -> Result<(), String> {
    let Ok(url) = Url::parse(url) else {
        return Ok(()); // the request fails on it
    };
    let ip = match url.host() {
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip),
        _ => return Ok(()),
    };
    denied.check(url.host_str().unwrap_or_default(), ip)
}

/// An error with its causes, which hyper keeps in the source chain.
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// A redirect target: `location` resolved against the URL that answered (RFC 3986 section 5),
/// without its fragment, which is never sent. Only http and https are followed, as Go's client
/// refuses other schemes.
fn redirect_target(current: &str, location: &str) -> Result<String, String> {
    let base = Url::parse(current).map_err(|e| format!("invalid URL {current:?}: {e}"))?;
    let target = base
        .join(location)
        .map_err(|e| format!("invalid redirect Location {location:?}: {e}"))?;
    if !matches!(target.scheme(), "http" | "https") {
        return Err(format!(
            "redirect to {location:?}: unsupported scheme {:?}",
            target.scheme()
        ));
    }
    Ok(target[..Position::AfterQuery].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 3986 section 5.4's examples against its base `http://a/b/c/d;p?q`, with the
    /// fragment dropped (it is never sent). `//g` gives `http://g/`: an empty http path is `/`
    /// (section 6.2.3). Before, a Location without a leading `/` or `scheme://` was glued to
    /// the host (`g` -> `http://ag`), `//g` became `http://a//g` and `?y` `http://a?y`.
    #[test]
    fn locations_resolve_as_rfc_3986_says() {
        let base = "http://a/b/c/d;p?q";
        let table = [
            // 5.4.1 normal examples
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g/"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q"),
            ("g#s", "http://a/b/c/g"),
            ("g?y#s", "http://a/b/c/g?y"),
            (";x", "http://a/b/c/;x"),
            ("g;x", "http://a/b/c/g;x"),
            ("g;x?y#s", "http://a/b/c/g;x?y"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("./", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../", "http://a/"),
            ("../../g", "http://a/g"),
            // 5.4.2 abnormal examples
            ("../../../g", "http://a/g"),
            ("../../../../g", "http://a/g"),
            ("/./g", "http://a/g"),
            ("/../g", "http://a/g"),
            ("g.", "http://a/b/c/g."),
            (".g", "http://a/b/c/.g"),
            ("g..", "http://a/b/c/g.."),
            ("..g", "http://a/b/c/..g"),
            ("./../g", "http://a/b/g"),
            ("./g/.", "http://a/b/c/g/"),
            ("g/./h", "http://a/b/c/g/h"),
            ("g/../h", "http://a/b/c/h"),
            ("g;x=1/./y", "http://a/b/c/g;x=1/y"),
            ("g;x=1/../y", "http://a/b/c/y"),
            ("g?y/./x", "http://a/b/c/g?y/./x"),
            ("g?y/../x", "http://a/b/c/g?y/../x"),
            ("g#s/./x", "http://a/b/c/g"),
            ("g#s/../x", "http://a/b/c/g"),
            // the RFC allows this backward-compatible reading for a base of the same scheme
            ("http:g", "http://a/b/c/g"),
        ];
        for (location, want) in table {
            assert_eq!(
                redirect_target(base, location).as_deref(),
                Ok(want),
                "Location {location:?}"
            );
        }
    }

    #[test]
    fn locations_keep_port_and_change_host_or_scheme() {
        let table = [
            ("https://h:1/a/b?q", "/c", "https://h:1/c"),
            ("https://h:1/a/b?q", "c", "https://h:1/a/c"),
            ("https://h:1/a/b?q", "//o/x", "https://o/x"),
            ("https://h/a", "http://o/x", "http://o/x"),
            ("https://h/a", "HTTP://O:8080/x", "http://o:8080/x"),
        ];
        for (base, location, want) in table {
            assert_eq!(
                redirect_target(base, location).as_deref(),
                Ok(want),
                "{base} + {location:?}"
            );
        }
    }

    /// Before, a server that sent its head and then nothing held the fetch until the whole
    /// timeout (the tenant's `?timeout=`) ran out; now silence ends it after the read timeout.
    #[tokio::test]
    async fn a_silent_server_is_left_after_the_read_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/x", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut stream, _) = listener.accept().unwrap();
            let _ = stream.read(&mut [0u8; 4096]);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0");
            std::thread::sleep(std::time::Duration::from_secs(60));
        });
        let denied = Arc::new(DeniedNetworks::default());
        let resolver = super::super::deny::GuardedResolver {
            denied: denied.clone(),
        };
        let connector = crate::source::fetch::tls_connector(
            hyper_util::client::legacy::connect::HttpConnector::new_with_resolver(resolver),
            Duration::from_secs(5),
        )
        .unwrap();
        let http = Http {
            read_timeout: Duration::from_millis(200),
            ..Http::new(connector, denied)
        };
        let call = Call {
            method: Method::GET,
            url,
            headers: &[],
            body: Vec::new(),
        };
        // The outer bound only turns a hang into a failure.
        let sent = tokio::time::timeout(Duration::from_secs(30), http.send(call, 1 << 20)).await;
        assert_eq!(
            sent.expect("not left").unwrap_err(),
            "the server sent nothing for 0.2s"
        );
    }

    #[test]
    fn locations_to_other_schemes_are_refused() {
        for location in ["file:///etc/passwd", "g:h", "ftp://a/b"] {
            let error = redirect_target("http://a/b/c/d;p?q", location).unwrap_err();
            assert!(error.contains("unsupported scheme"), "{location}: {error}");
        }
    }
}
