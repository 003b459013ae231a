//! What the client reads from a response: the body within its bound, and the registry's
//! error codes or status line for a message, as ggcr words them.

use std::time::Duration;

use hyper::body::Bytes;
use hyper::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use url::Url;

use super::{RegistryError, display_url};

pub(super) struct Fetched {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

#[derive(Deserialize)]
struct ErrorBody {
    errors: Vec<ErrorEntry>,
}

#[derive(Deserialize)]
struct ErrorEntry {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
    /// ggcr appends it to the message as Go's `%v` prints decoded JSON (`; map[name:foo]`).
    #[serde(default)]
    detail: Option<serde_json::Value>,
}

impl ErrorEntry {
    fn text(&self) -> String {
        match &self.detail {
            Some(detail) if !detail.is_null() => {
                format!("{}: {}; {}", self.code, self.message, go_value(detail))
            }
            _ => format!("{}: {}", self.code, self.message),
        }
    }
}

/// Go's `%v` of a value `encoding/json` decoded into `interface{}`: maps with sorted keys,
/// slices space-separated, numbers as float64.
fn go_value(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_float(n.as_f64().unwrap_or_default()),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_value).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let entries: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{k}:{}", go_value(v)))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
    }
}

/// Go's `%v` of a float64 (`%g`, shortest): an exponent below -4 or from 6 on is written
/// `1.5e+06`, others in plain decimals.
fn go_float(f: f64) -> String {
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or_default();
    if f != 0.0 && !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        format!("{f}")
    }
}

pub(super) fn is_html(fetched: &Fetched) -> bool {
    let content_type = fetched
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    content_type.to_ascii_lowercase().starts_with("text/html")
        || fetched.body.trim_ascii_start().starts_with(b"<")
}

/// `algorithm:hex`, as the registry reports a manifest's digest.
pub(super) fn is_digest(value: &str) -> bool {
    value.split_once(':').is_some_and(|(algorithm, hex)| {
        !algorithm.is_empty()
            && algorithm.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'+' | b'.' | b'_' | b'-')
            })
            && hex.len() >= 32
            && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// The registry's error codes when the body carries them (`NAME_UNKNOWN: ...`), else the
/// status line, as ggcr words it.
pub(super) fn status_error(method: &'static str, url: &Url, fetched: &Fetched) -> RegistryError {
    let status = fetched.status;
    let codes = serde_json::from_slice::<ErrorBody>(&fetched.body)
        .ok()
        .map(|body| {
            body.errors
                .iter()
                .filter(|e| !e.code.is_empty() || !e.message.is_empty())
                .map(ErrorEntry::text)
                .collect::<Vec<_>>()
        })
        .filter(|codes| !codes.is_empty());
    let line = format!(
        "unexpected status code {} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    let line = line.trim_end().to_string();
    let detail = match codes {
        Some(codes) if codes.len() == 1 => codes[0].clone(),
        Some(codes) => format!("multiple errors returned: {}", codes.join("; ")),
        None if method == "HEAD" => format!("{line} (HEAD responses have no body, use GET for details)"),
        None if is_html(fetched) => format!("{line} (the body is an HTML page, not a registry response)"),
        None => line,
    };
    let retry_after = (status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE)
        .then(|| {
            fetched
                .headers
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs)
        })
        .flatten();
    RegistryError::Status {
        method,
        url: display_url(url),
        status: status.as_u16(),
        detail,
        retry_after,
    }
}

pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(status: u16, content_type: &str, body: &str, headers: &[(&str, &str)]) -> Fetched {
        let mut map = HeaderMap::new();
        if !content_type.is_empty() {
            map.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
        }
        for (name, value) in headers {
            map.insert(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        Fetched {
            status: StatusCode::from_u16(status).unwrap(),
            headers: map,
            body: Bytes::from(body.to_string()),
        }
    }
    #[test]
    fn status_errors_name_the_url_and_the_registry_codes() {
        let url = Url::parse("https://r.example:5000/v2/foo/tags/list?n=1000").unwrap();
        let table = [
            (
                fetched(
                    404,
                    "application/json",
                    r#"{"errors":[{"code":"NAME_UNKNOWN","message":"repository name not known to registry","detail":{"name":"foo"}}]}"#,
                    &[],
                ),
                "GET",
                "GET https://r.example:5000/v2/foo/tags/list?n=1000: NAME_UNKNOWN: repository name not known to registry; map[name:foo]",
            ),
            (
                fetched(
                    401,
                    "application/json",
                    r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"},{"code":"DENIED","message":"no"}]}"#,
                    &[],
                ),
                "GET",
                "GET https://r.example:5000/v2/foo/tags/list?n=1000: multiple errors returned: \
                 UNAUTHORIZED: authentication required; DENIED: no",
            ),
            (
                fetched(502, "text/html", "<html><body>Bad gateway</body></html>", &[]),
                "GET",
                "GET https://r.example:5000/v2/foo/tags/list?n=1000: unexpected status code 502 Bad Gateway \
                 (the body is an HTML page, not a registry response)",
            ),
            (
                fetched(500, "", "", &[]),
                "GET",
                "GET https://r.example:5000/v2/foo/tags/list?n=1000: unexpected status code 500 Internal Server Error",
            ),
            (
                fetched(404, "", "", &[]),
                "HEAD",
                "HEAD https://r.example:5000/v2/foo/tags/list?n=1000: unexpected status code 404 Not Found \
                 (HEAD responses have no body, use GET for details)",
            ),
        ];
        for (response, method, message) in table {
            assert_eq!(status_error(method, &url, &response).to_string(), message);
        }
    }

    /// The first row as Flux's controller wrote it (tests/differential.rs); the numbers as
    /// Go's `%v` prints float64.
    #[test]
    fn details_print_as_go_prints_decoded_json() {
        let table = [
            (
                r#"[{"Type":"repository","Name":"a/b","Action":"pull","Class":""}]"#,
                "[map[Action:pull Class: Name:a/b Type:repository]]",
            ),
            (
                r#"{"n":1000,"big":1500000,"small":0.00001,"f":0.5,"t":true,"z":null}"#,
                "map[big:1.5e+06 f:0.5 n:1000 small:1e-05 t:true z:<nil>]",
            ),
            (r#"[0, -2, 123456]"#, "[0 -2 123456]"),
        ];
        for (json, go) in table {
            assert_eq!(go_value(&serde_json::from_str(json).unwrap()), go, "{json}");
        }
    }

    #[test]
    fn retry_after_on_429_only() {
        let url = Url::parse("https://r.example/v2/").unwrap();
        let limited = status_error("GET", &url, &fetched(429, "", "", &[("retry-after", "7")]));
        assert_eq!(limited.status(), Some(429));
        assert_eq!(limited.retry_after(), Some(Duration::from_secs(7)));
        assert!(!limited.is_terminal());
        let other = status_error("GET", &url, &fetched(500, "", "", &[("retry-after", "7")]));
        assert_eq!(other.retry_after(), None);
    }

    #[test]
    fn urls_in_messages_carry_no_credentials() {
        let url = Url::parse("https://user:secret@auth.example/token?scope=x").unwrap();
        let message = status_error("GET", &url, &fetched(401, "", "", &[])).to_string();
        assert!(
            !message.contains("secret") && !message.contains("user"),
            "{message}"
        );
        assert!(
            message.starts_with("GET https://auth.example/token?scope=x: "),
            "{message}"
        );
    }

    #[test]
    fn digests() {
        assert!(is_digest(
            "sha256:286faf14d1e0e2c1de36c0f617c7acee4179627a17a9e570e956c56ae90bff91"
        ));
        for bad in [
            "",
            "sha256:",
            "sha256:xyz",
            "286faf14d1e0e2c1de36c0f617c7acee",
            "SHA256:abcd",
        ] {
            assert!(!is_digest(bad), "{bad}");
        }
    }
}
