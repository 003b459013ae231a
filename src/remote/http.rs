//! One HTTP exchange with a size-bounded body: the remote fetcher's only network primitive.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode, header};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// How many redirects a GET follows, as Go's HTTP client does (it allows ten).
const MAX_REDIRECTS: usize = 10;

pub(crate) struct Http {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

/// A request to send.
pub(crate) struct Call<'a> {
    pub method: Method,
    pub url: String,
    pub headers: &'a [(&'static str, &'a str)],
    pub body: Vec<u8>,
}

impl Http {
    pub(crate) fn new(connector: HttpsConnector<HttpConnector>) -> Self {
        Http {
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// Sends `call`, following redirects of a GET, and reads at most `max_bytes` of the body.
    pub(crate) async fn send(
        &self,
        mut call: Call<'_>,
        max_bytes: u64,
    ) -> Result<(StatusCode, Vec<u8>), String> {
        for _ in 0..=MAX_REDIRECTS {
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
            let response = self.client.request(request).await.map_err(|e| describe(&e))?;
            let status = response.status();
            if status.is_redirection() && call.method == Method::GET {
                let location = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| format!("redirect {status} without a Location"))?;
                call.url = join_location(&call.url, location);
                continue;
            }
            let mut body = response.into_body();
            let mut out = Vec::new();
            while let Some(frame) = body.frame().await {
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

/// A redirect target: absolute, or a path on the same scheme and host.
fn join_location(current: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let after_scheme = current.find("://").map_or(0, |i| i + 3);
    let host_end = current[after_scheme..]
        .find('/')
        .map_or(current.len(), |i| after_scheme + i);
    format!("{}{}", &current[..host_end], location)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_redirects_keep_scheme_and_host() {
        assert_eq!(join_location("https://h:1/a/b?q", "/c"), "https://h:1/c");
        assert_eq!(join_location("https://h/a", "http://o/x"), "http://o/x");
    }
}
