//! `proxySecretRef`: every connection of a scan goes through an HTTP(S) proxy (a `CONNECT`
//! tunnel) or a SOCKS5 proxy (names resolved by the proxy), as Flux's transport does with
//! `http.ProxyURL`. TLS to the registry runs inside the tunnel; TLS to an `https` proxy uses
//! the same trust as the registry.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine as _;
use hyper::Uri;
use hyper::header::HeaderValue;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::{SocksV5, Tunnel};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower::Service;
use url::Url;

use super::response::error_chain;

/// Flux's limit on the address (`MaxProxyURLLength`).
const MAX_ADDRESS: usize = 2048;

type BoxError = Box<dyn StdError + Send + Sync>;
pub(crate) type Stream = MaybeHttpsStream<TokioIo<TcpStream>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyScheme {
    Http,
    Https,
    Socks5,
}

/// A proxy from a Secret's `address`, `username` and `password`.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    pub scheme: ProxyScheme,
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    pub password: Option<String>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("address", &self.address())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Proxy {
    /// Parses `address` as Flux does (schemes `http`, `https`, `socks5`; at most 2048
    /// characters); `username` and `password` override credentials in the address. The
    /// error is the text after Flux's `secret '<ns>/<name>': `.
    pub fn parse(address: &str, username: Option<String>, password: Option<String>) -> Result<Self, String> {
        if address.is_empty() {
            return Err("proxy address is empty".into());
        }
        if address.len() > MAX_ADDRESS {
            return Err(format!(
                "proxy URL exceeds maximum length of {MAX_ADDRESS} characters"
            ));
        }
        let url =
            Url::parse(address).map_err(|e| format!("failed to parse proxy address '{address}': {e}"))?;
        let (scheme, default_port) = match url.scheme() {
            "http" => (ProxyScheme::Http, 80),
            "https" => (ProxyScheme::Https, 443),
            "socks5" => (ProxyScheme::Socks5, 1080),
            other => {
                return Err(format!(
                    "proxy URL must use one of the supported schemes (http, https, socks5), got '{other}'"
                ));
            }
        };
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("proxy address '{address}' has no host"))?;
        let decode = |s: &str| {
            percent_decode(s).ok_or_else(|| format!("proxy address '{address}': invalid user info"))
        };
        let (username, password) = match username {
            Some(user) => (Some(user), password),
            None if !url.username().is_empty() => (
                Some(decode(url.username())?),
                url.password().map(decode).transpose()?,
            ),
            None => (None, None),
        };
        Ok(Self {
            scheme,
            // IPv6 literals keep their brackets for URIs; SOCKS strips them itself.
            host: host.to_string(),
            port: url.port().unwrap_or(default_port),
            username,
            password,
        })
    }

    /// `scheme://host:port`, without credentials: safe for messages.
    pub fn address(&self) -> String {
        let scheme = match self.scheme {
            ProxyScheme::Http => "http",
            ProxyScheme::Https => "https",
            ProxyScheme::Socks5 => "socks5",
        };
        format!("{scheme}://{}:{}", self.host, self.port)
    }

    fn basic_auth(&self) -> Option<HeaderValue> {
        let user = self.username.as_deref()?;
        let pair = format!("{user}:{}", self.password.as_deref().unwrap_or_default());
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
        HeaderValue::from_str(&format!("Basic {encoded}")).ok()
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The destination with its port spelled out: the proxy protocols need one, and hyper-util's
/// tunnels would otherwise assume 443 for a plain-HTTP registry.
fn with_port(dst: &Uri) -> Result<Uri, BoxError> {
    if dst.port().is_some() {
        return Ok(dst.clone());
    }
    let port = if dst.scheme_str() == Some("http") { 80 } else { 443 };
    let host = dst.host().ok_or("destination has no host")?;
    let scheme = dst.scheme_str().unwrap_or("https");
    Ok(format!("{scheme}://{host}:{port}/").parse()?)
}

/// The connector under the registry's TLS: straight to the registry, or through the proxy.
#[derive(Clone)]
pub(crate) struct Route {
    tcp: HttpConnector,
    /// TCP, with TLS for an `https` proxy.
    to_proxy: HttpsConnector<HttpConnector>,
    proxy: Option<Proxy>,
}

impl Route {
    pub(crate) fn new(
        tcp: HttpConnector,
        to_proxy: HttpsConnector<HttpConnector>,
        proxy: Option<Proxy>,
    ) -> Self {
        Self { tcp, to_proxy, proxy }
    }
}

impl Service<Uri> for Route {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let Some(proxy) = self.proxy.clone() else {
            let mut tcp = self.tcp.clone();
            return Box::pin(async move {
                let io = tcp.call(dst).await?;
                Ok(MaybeHttpsStream::Http(io))
            });
        };
        let tcp = self.tcp.clone();
        let to_proxy = self.to_proxy.clone();
        Box::pin(async move {
            let dst = with_port(&dst)?;
            let through = |e: &dyn StdError| -> BoxError {
                format!("proxy {}: {}", proxy.address(), error_chain(e)).into()
            };
            match proxy.scheme {
                ProxyScheme::Http | ProxyScheme::Https => {
                    let scheme = if proxy.scheme == ProxyScheme::Https {
                        "https"
                    } else {
                        "http"
                    };
                    let uri: Uri = format!("{scheme}://{}:{}/", proxy.host, proxy.port).parse()?;
                    let mut tunnel = Tunnel::new(uri, to_proxy);
                    if let Some(auth) = proxy.basic_auth() {
                        tunnel = tunnel.with_auth(auth);
                    }
                    tunnel.call(dst).await.map_err(|e| through(&e))
                }
                ProxyScheme::Socks5 => {
                    let uri: Uri = format!("http://{}:{}/", proxy.host, proxy.port).parse()?;
                    let mut socks = SocksV5::new(uri, tcp);
                    if let Some(user) = &proxy.username {
                        socks = socks.with_auth(user.clone(), proxy.password.clone().unwrap_or_default());
                    }
                    let io = socks.call(dst).await.map_err(|e| through(&e))?;
                    Ok(MaybeHttpsStream::Http(io))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flux_schemes_with_default_ports_and_credentials() {
        let p = Proxy::parse("http://proxy.local", None, None).unwrap();
        assert_eq!((p.scheme, p.port, p.username), (ProxyScheme::Http, 80, None));
        let p = Proxy::parse("https://proxy.local", Some("u".into()), Some("p".into())).unwrap();
        assert_eq!((p.scheme, p.port), (ProxyScheme::Https, 443));
        assert_eq!(p.basic_auth().unwrap(), "Basic dTpw");
        let p = Proxy::parse("socks5://10.0.0.1:9050", Some("u".into()), None).unwrap();
        assert_eq!((p.scheme, p.port), (ProxyScheme::Socks5, 9050));
        assert_eq!(p.address(), "socks5://10.0.0.1:9050");
        let p = Proxy::parse("http://a%40b:p%3Aq@h:3128", None, None).unwrap();
        assert_eq!(
            (p.username.as_deref(), p.password.as_deref()),
            (Some("a@b"), Some("p:q"))
        );
        let p = Proxy::parse("http://a:b@h:3128", Some("c".into()), Some("d".into())).unwrap();
        assert_eq!(p.basic_auth().unwrap(), "Basic Yzpk");
    }

    #[test]
    fn rejects_what_flux_rejects_with_its_words() {
        assert_eq!(
            Proxy::parse("ftp://h:21", None, None).unwrap_err(),
            "proxy URL must use one of the supported schemes (http, https, socks5), got 'ftp'"
        );
        assert_eq!(
            Proxy::parse("", None, None).unwrap_err(),
            "proxy address is empty"
        );
        let long = format!("http://{}", "a".repeat(2048));
        assert!(Proxy::parse(&long, None, None).unwrap_err().contains("2048"));
        assert!(
            Proxy::parse("127.0.0.1:3128", None, None)
                .unwrap_err()
                .starts_with("failed to parse proxy address '127.0.0.1:3128'")
        );
    }

    #[test]
    fn debug_hides_the_password() {
        let p = Proxy::parse("http://h:1", Some("u".into()), Some("secret".into())).unwrap();
        assert!(!format!("{p:?}").contains("secret"));
    }

    #[test]
    fn destinations_get_their_scheme_port() {
        let port = |s: &str| with_port(&s.parse().unwrap()).unwrap().port_u16();
        assert_eq!(port("http://r.example/v2/"), Some(80));
        assert_eq!(port("https://r.example/v2/"), Some(443));
        assert_eq!(port("http://127.0.0.1:5000/v2/"), Some(5000));
    }
}
