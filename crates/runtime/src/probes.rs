//! The probe and metrics server: `/metrics`, `/healthz` and `/readyz`, on Go-style listen
//! addresses (`--metrics-addr`, `--health-addr`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::telemetry::Metrics;

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("unable to listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    #[error("invalid listen address '{0}'")]
    Address(String),
}

/// Serves `/metrics` (when `metrics` is set), `/healthz` and `/readyz` on `addr`, from a task
/// of its own. An empty address or `0` serves nothing, as with Flux.
pub async fn serve_http(
    addr: &str,
    metrics: Option<Arc<Metrics>>,
    readiness: Readiness,
) -> Result<(), ServeError> {
    if addr.is_empty() || addr == "0" {
        return Ok(());
    }
    let socket = parse_listen_addr(addr).map_err(|_| ServeError::Address(addr.to_string()))?;
    let listener = tokio::net::TcpListener::bind(socket)
        .await
        .map_err(|source| ServeError::Listen {
            addr: addr.to_string(),
            source,
        })?;
    tokio::spawn(serve(listener, metrics, readiness));
    Ok(())
}

/// Whether the process is ready to serve (`/readyz`).
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Parses Go-style listen addresses: `:8080` means all interfaces.
pub(crate) fn parse_listen_addr(addr: &str) -> Result<SocketAddr, std::net::AddrParseError> {
    if let Some(port) = addr.strip_prefix(':') {
        format!("0.0.0.0:{port}").parse()
    } else {
        addr.parse()
    }
}

/// Serves `/metrics` (when `metrics` is set), `/healthz` and `/readyz` on one listener.
async fn serve(listener: TcpListener, metrics: Option<Arc<Metrics>>, readiness: Readiness) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        let readiness = readiness.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let response = route(&request, metrics.as_deref(), &readiness);
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn route(
    request: &Request<Incoming>,
    metrics: Option<&Metrics>,
    readiness: &Readiness,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String, content_type: &str| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = content_type.parse() {
            response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    };
    match (request.uri().path(), metrics) {
        ("/metrics", Some(metrics)) => text(
            StatusCode::OK,
            metrics.encode(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        ("/healthz", _) => text(StatusCode::OK, "ok".into(), "text/plain"),
        ("/readyz", _) if readiness.get() => text(StatusCode::OK, "ok".into(), "text/plain"),
        ("/readyz", _) => text(StatusCode::SERVICE_UNAVAILABLE, "not ready".into(), "text/plain"),
        _ => text(StatusCode::NOT_FOUND, "not found".into(), "text/plain"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_addresses_listen_on_all_interfaces() {
        assert_eq!(
            parse_listen_addr(":8080").unwrap(),
            "0.0.0.0:8080".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("127.0.0.1:9440").unwrap(),
            "127.0.0.1:9440".parse().unwrap()
        );
        assert!(parse_listen_addr("8080").is_err());
    }
}
