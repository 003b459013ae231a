//! A paging front for the real registry. Distribution 2.8 ignores `n` on `tags/list` and
//! never sends `Link` (checked by hand against 2.8.2: five tags and `n=2` give all five, no
//! header), so this front asks the registry for the whole list on every request and serves
//! it in pages of `n` after `last`, sorted, with a `Link` to the next page in the style
//! asked for. The tags are the registry's; only the paging is ours.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkStyle {
    /// `</v2/<repo>/tags/list?n=..&last=..>` (distribution 3, most registries).
    Relative,
    /// `<http://127.0.0.1:<port>/v2/...>`: the port must survive.
    AbsoluteWithPort,
    /// A next page on another host (`localhost` for `127.0.0.1`).
    CrossHost,
    /// A next page forever, each URL new.
    Endless,
}

pub struct PagingFront {
    pub port: u16,
    /// How many `tags/list` requests were served.
    pub requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PagingFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PagingFront {
    /// Serves on a free port of 127.0.0.1, in front of the plain-HTTP registry `upstream`
    /// (`127.0.0.1:<port>`).
    pub async fn start(upstream: String, style: LinkStyle) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        let task = tokio::spawn(async move {
            let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let client = client.clone();
                let upstream = upstream.clone();
                let counter = counter.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let client = client.clone();
                        let upstream = upstream.clone();
                        let counter = counter.clone();
                        async move {
                            Ok::<_, Infallible>(
                                serve(request, &client, &upstream, port, style, &counter).await,
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { port, requests, task }
    }
}

async fn serve(
    request: Request<Incoming>,
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    upstream: &str,
    port: u16,
    style: LinkStyle,
    counter: &AtomicUsize,
) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    if path == "/v2/" {
        return json(StatusCode::OK, "{}".into(), None);
    }
    let Some(repository) = path
        .strip_prefix("/v2/")
        .and_then(|p| p.strip_suffix("/tags/list"))
    else {
        return json(StatusCode::NOT_FOUND, r#"{"errors":[]}"#.into(), None);
    };
    counter.fetch_add(1, Ordering::SeqCst);
    let query: Vec<(String, String)> = request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let n: usize = param("n").and_then(|n| n.parse().ok()).unwrap_or(1000);
    let last = param("last").unwrap_or_default();
    let page_number: usize = param("page").and_then(|p| p.parse().ok()).unwrap_or(0);

    let uri = format!("http://{upstream}/v2/{repository}/tags/list");
    let response = client.get(uri.parse().unwrap()).await.expect("upstream registry");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let list: serde_json::Value = serde_json::from_slice(&body).expect("upstream tag list");
    let mut tags: Vec<String> = list["tags"]
        .as_array()
        .expect("upstream tags")
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    tags.sort();
    let rest: Vec<String> = tags.into_iter().filter(|t| *t > last).collect();
    let page: Vec<String> = rest.iter().take(n).cloned().collect();
    let more = rest.len() > page.len();
    let next_last = page.last().cloned().unwrap_or(last);
    let next = format!("/v2/{repository}/tags/list?n={n}&last={next_last}");
    let link = match style {
        _ if style != LinkStyle::Endless && !more => None,
        LinkStyle::Relative => Some(format!("<{next}>; rel=\"next\"")),
        LinkStyle::AbsoluteWithPort => Some(format!("<http://127.0.0.1:{port}{next}>; rel=\"next\"")),
        LinkStyle::CrossHost => Some(format!("<http://localhost:{port}{next}>; rel=\"next\"")),
        LinkStyle::Endless => Some(format!(
            "</v2/{repository}/tags/list?n={n}&last={next_last}&page={}>; rel=\"next\"",
            page_number + 1
        )),
    };
    let body = serde_json::json!({ "name": repository, "tags": page }).to_string();
    json(StatusCode::OK, body, link)
}

fn json(status: StatusCode, body: String, link: Option<String>) -> Response<Full<Bytes>> {
    let mut response = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(link) = link {
        response = response.header("link", link);
    }
    response.body(Full::new(Bytes::from(body))).unwrap()
}
