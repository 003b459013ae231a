//! A registry that misbehaves: HTML instead of JSON, a 100 MB tag list, 429 with
//! Retry-After, a 500 HTML page. Each gives a message naming the URL, within bounded memory.

mod support;

use std::time::Duration;

use image_reflector::registry::{ImageRef, Limits, RegistryClient, RegistryError, TlsOptions};
use support::raw::{Reply, serve};
use tokio::time::Instant;

fn hostile(path: &str) -> Reply {
    match path {
        "/v2/" => Reply::new("200 OK", "application/json", "{}"),
        "/v2/html/app/tags/list" => Reply::new("200 OK", "text/html", "<html><body>Sign in</body></html>"),
        "/v2/huge/app/tags/list" => {
            let chunk = vec![b' '; 1024 * 1024];
            Reply {
                head: format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}",
                    100 * chunk.len()
                ),
                chunk,
                repeat: 100,
            }
        }
        "/v2/limited/app/tags/list" => Reply {
            head: "HTTP/1.1 429 Too Many Requests\r\nretry-after: 30\r\ncontent-length: 0".into(),
            chunk: Vec::new(),
            repeat: 0,
        },
        "/v2/broken/app/tags/list" => Reply::new(
            "500 Internal Server Error",
            "text/html",
            "<!DOCTYPE html><h1>oops</h1>",
        ),
        _ => Reply::new("404 Not Found", "application/json", r#"{"errors":[]}"#),
    }
}

async fn list(port: u16, repository: &str) -> RegistryError {
    let client = RegistryClient::new(&TlsOptions::default(), Limits::default()).unwrap();
    let image = ImageRef::parse(&format!("127.0.0.1:{port}/{repository}"), false).unwrap();
    client
        .list_tags(&image, None, Instant::now() + Duration::from_secs(30))
        .await
        .unwrap_err()
}

#[tokio::test]
async fn misbehaving_registries_fail_with_clear_messages() {
    let (port, _task) = serve(hostile).await;
    let url = |repository: &str| format!("GET http://127.0.0.1:{port}/v2/{repository}/tags/list?n=1000");

    let html = list(port, "html/app").await;
    assert_eq!(
        html.to_string(),
        format!("{}: expected a JSON tag list, got an HTML page", url("html/app"))
    );

    let started = std::time::Instant::now();
    let huge = list(port, "huge/app").await;
    assert_eq!(
        huge.to_string(),
        format!("{}: response body larger than 4194304 bytes", url("huge/app"))
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    let limited = list(port, "limited/app").await;
    assert_eq!(limited.status(), Some(429));
    assert_eq!(limited.retry_after(), Some(Duration::from_secs(30)));
    assert_eq!(
        limited.to_string(),
        format!(
            "{}: unexpected status code 429 Too Many Requests",
            url("limited/app")
        )
    );

    let broken = list(port, "broken/app").await;
    assert_eq!(
        broken.to_string(),
        format!(
            "{}: unexpected status code 500 Internal Server Error (the body is an HTML page, not a registry response)",
            url("broken/app")
        )
    );
}
