//! The kube clients of a controller: every API request counted by verb and resource (and its
//! response, as client-go counts them), writes held back once the leader's write fence closes,
//! watches given up on when the API server does not answer them.

use std::sync::Arc;

use kube::Client;

use crate::leader::fence::{FencedExecutor, WriteFence};

mod answer_limit;

use answer_limit::AnswerLimitLayer;

/// What one API request did: the verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
/// `dry-run-patch`, `delete`, `discovery`, ...) and the resource (plural, with its group when
/// not core: `configmaps`, `deployments.apps`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    pub verb: String,
    pub resource: String,
}

/// What client-go's `rest_client_requests_total` counts a response by: the HTTP status code
/// (`<error>` when there was no response), the API server's `host:port` and the HTTP method.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResponseKey {
    pub code: String,
    pub host: String,
    pub method: String,
}

/// API requests counted by [`counting_client`], and the write fence of those clients; clones
/// share both.
#[derive(Clone, Debug, Default)]
pub struct RequestCounts {
    counts: Arc<std::sync::Mutex<std::collections::BTreeMap<RequestKey, u64>>>,
    responses: Arc<std::sync::Mutex<std::collections::BTreeMap<ResponseKey, u64>>>,
    fence: WriteFence,
}

impl RequestCounts {
    pub fn write_fence(&self) -> WriteFence {
        self.fence.clone()
    }

    fn record_response(&self, key: ResponseKey) {
        *self
            .responses
            .lock()
            .expect("response counts lock")
            .entry(key)
            .or_default() += 1;
    }

    /// The responses so far, by code, host and method.
    pub fn responses(&self) -> std::collections::BTreeMap<ResponseKey, u64> {
        self.responses.lock().expect("response counts lock").clone()
    }

    fn record(&self, key: RequestKey) {
        *self
            .counts
            .lock()
            .expect("request counts lock")
            .entry(key)
            .or_default() += 1;
    }

    /// The counts so far.
    pub fn snapshot(&self) -> std::collections::BTreeMap<RequestKey, u64> {
        self.counts.lock().expect("request counts lock").clone()
    }

    /// All requests with this verb, over every resource.
    pub fn verb(&self, verb: &str) -> u64 {
        self.snapshot()
            .iter()
            .filter(|(k, _)| k.verb == verb)
            .map(|(_, n)| n)
            .sum()
    }

    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }

    pub fn reset(&self) {
        self.counts.lock().expect("request counts lock").clear();
    }
}

/// Whether the request is a watch: a GET with the `watch` parameter.
pub(crate) fn is_watch(method: &hyper::Method, query: Option<&str>) -> bool {
    method == hyper::Method::GET && has_query_param(query, "watch")
}

fn has_query_param(query: Option<&str>, param: &str) -> bool {
    query
        .unwrap_or("")
        .split('&')
        .any(|kv| kv == param || kv.strip_prefix(param).is_some_and(|rest| rest.starts_with('=')))
}

/// Classifies a request by method and URL into a [`RequestKey`].
fn request_key(method: &hyper::Method, path: &str, query: Option<&str>) -> RequestKey {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    // /api/v1/<rest> or /apis/<group>/<version>/<rest>
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => ("", &[][..]),
    };
    let (resource, named) = match rest {
        [] => (None, false),
        ["namespaces", _ns, resource, tail @ ..] => (Some(*resource), !tail.is_empty()),
        ["namespaces", tail @ ..] => (Some("namespaces"), !tail.is_empty()),
        [resource, tail @ ..] => (Some(*resource), !tail.is_empty()),
    };
    let Some(resource) = resource else {
        return RequestKey {
            verb: "discovery".into(),
            resource: String::new(),
        };
    };
    let resource = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let verb = match *method {
        _ if is_watch(method, query) => "watch",
        hyper::Method::GET if named => "get",
        hyper::Method::GET => "list",
        hyper::Method::POST => "create",
        hyper::Method::PUT => "update",
        hyper::Method::PATCH if has_query_param(query, "dryRun") => "dry-run-patch",
        hyper::Method::PATCH => "patch",
        hyper::Method::DELETE if named => "delete",
        hyper::Method::DELETE => "deletecollection",
        _ => "other",
    };
    RequestKey {
        verb: verb.into(),
        resource,
    }
}

/// A tower layer counting every request that passes through it, and its response.
#[derive(Clone)]
struct CountingLayer {
    counts: RequestCounts,
    /// The API server's `host:port`, for the response counts.
    host: String,
}

impl<S> tower::Layer<S> for CountingLayer {
    type Service = CountingService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        CountingService {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
struct CountingService<S> {
    inner: S,
    layer: CountingLayer,
}

impl<S, B, R> tower::Service<hyper::Request<B>> for CountingService<S>
where
    S: tower::Service<hyper::Request<B>, Response = hyper::Response<R>>,
    S::Future: Send + 'static,
    S::Error: From<tower::BoxError> + Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: hyper::Request<B>) -> Self::Future {
        let counts = self.layer.counts.clone();
        counts.record(request_key(req.method(), req.uri().path(), req.uri().query()));
        let (host, method) = (self.layer.host.clone(), req.method().to_string());
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await;
            let code = match &response {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            counts.record_response(ResponseKey { code, host, method });
            response
        })
    }
}

/// A client whose API requests are counted by verb and resource, for tests, benchmarks and
/// metrics.
pub fn counting_client(config: kube::Config) -> Result<(Client, RequestCounts), kube::Error> {
    let counts = RequestCounts::default();
    Ok((counted_client(config, &counts)?, counts))
}

/// A client whose API requests are added to `counts`, whose writes stop when the write fence
/// of `counts` closes ([`WriteFence`]: writes held back, connections cut), and whose watches
/// give up on an answer that does not come (`answer_limit`).
pub fn counted_client(config: kube::Config, counts: &RequestCounts) -> Result<Client, kube::Error> {
    let host = config
        .cluster_url
        .authority()
        .map(ToString::to_string)
        .unwrap_or_default();
    let executor = FencedExecutor::new(counts.fence.clone());
    // The last layer added sees a request first: a write the fence holds back is not counted.
    Ok(kube::client::ClientBuilder::try_from((config, executor))?
        .with_layer(&AnswerLimitLayer)
        .with_layer(&CountingLayer {
            counts: counts.clone(),
            host,
        })
        .with_layer(&tower::filter::FilterLayer::new(counts.fence.clone()))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Method;

    fn key(method: Method, path: &str, query: Option<&str>) -> (String, String) {
        let k = request_key(&method, path, query);
        (k.verb, k.resource)
    }

    #[test]
    fn classifies_requests_like_the_api_server_verbs() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/a/configmaps/x",
                None,
                "get",
                "configmaps",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/a/configmaps",
                None,
                "list",
                "configmaps",
            ),
            (
                Method::GET,
                "/apis/apps/v1/deployments",
                Some("watch=true"),
                "watch",
                "deployments.apps",
            ),
            (Method::GET, "/api/v1/namespaces/x", None, "get", "namespaces"),
            (Method::GET, "/api/v1/namespaces", None, "list", "namespaces"),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/a/deployments/w",
                Some("dryRun=All&fieldManager=x"),
                "dry-run-patch",
                "deployments.apps",
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/a/secrets/s",
                Some("fieldManager=x"),
                "patch",
                "secrets",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/a/secrets/s",
                None,
                "delete",
                "secrets",
            ),
            (Method::GET, "/apis/apps/v1", None, "discovery", ""),
            (Method::GET, "/api", None, "discovery", ""),
        ];
        for (method, path, query, verb, resource) in cases {
            let case = format!("{method} {path} {query:?}");
            assert_eq!(
                key(method, path, query),
                (verb.to_string(), resource.to_string()),
                "{case}"
            );
        }
    }
}
