//! Small extensions of the kube client shared by the applier, the health waiter and the
//! controller: mapping `apiVersion` + `kind` to an API endpoint, with a cache.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersion;
use kube::discovery::{ApiGroup, Scope};

/// Where objects of one kind live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedKind {
    pub resource: ApiResource,
    pub namespaced: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("invalid apiVersion '{0}'")]
    InvalidApiVersion(String),
    /// The server does not serve the kind: typically a CRD that is not installed (yet).
    #[error("no matches for kind \"{kind}\" in version \"{api_version}\"")]
    UnknownKind { api_version: String, kind: String },
    #[error("discovery of {api_version} failed: {source}")]
    Discovery {
        api_version: String,
        #[source]
        source: kube::Error,
    },
}

/// Resolves kinds through API discovery, one request per group-version, then from memory.
/// Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct ResourceResolver {
    client: Client,
    cache: Arc<RwLock<HashMap<String, Arc<ApiGroup>>>>,
}

impl ResourceResolver {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Arc::default(),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Resolves `apiVersion` + `kind`. A kind missing from a cached group-version triggers one
    /// fresh discovery of that group-version, so CRDs installed since are found.
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<ResolvedKind, ResolveError> {
        if let Some(found) = self.cached(api_version, kind) {
            return Ok(found);
        }
        let gv: GroupVersion = api_version
            .parse()
            .map_err(|_| ResolveError::InvalidApiVersion(api_version.to_string()))?;
        let group = match kube::discovery::pinned_group(&self.client, &gv).await {
            Ok(group) => group,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(ResolveError::UnknownKind {
                    api_version: api_version.into(),
                    kind: kind.into(),
                });
            }
            Err(source) => {
                return Err(ResolveError::Discovery {
                    api_version: api_version.into(),
                    source,
                });
            }
        };
        self.cache
            .write()
            .expect("resolver cache lock")
            .insert(api_version.to_string(), Arc::new(group));
        self.cached(api_version, kind)
            .ok_or_else(|| ResolveError::UnknownKind {
                api_version: api_version.into(),
                kind: kind.into(),
            })
    }

    fn cached(&self, api_version: &str, kind: &str) -> Option<ResolvedKind> {
        let cache = self.cache.read().expect("resolver cache lock");
        let group = cache.get(api_version)?;
        let version = api_version.rsplit('/').next().unwrap_or(api_version);
        group
            .versioned_resources(version)
            .into_iter()
            .find(|(resource, _)| resource.kind == kind)
            .map(|(resource, caps)| ResolvedKind {
                resource,
                namespaced: caps.scope == Scope::Namespaced,
            })
    }

    /// Forgets everything, e.g. after CRDs were applied or deleted.
    pub(crate) fn invalidate(&self) {
        self.cache.write().expect("resolver cache lock").clear();
    }

    /// An API handle for objects of this kind in `namespace` (ignored for cluster-scoped kinds).
    pub async fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<(Api<DynamicObject>, ResolvedKind), ResolveError> {
        let resolved = self.resolve(api_version, kind).await?;
        let api = match (resolved.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &resolved.resource),
            _ => Api::all_with(self.client.clone(), &resolved.resource),
        };
        Ok((api, resolved))
    }
}

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

/// Until when the clients may send writes; open (no limit) unless leader election closes it.
/// The elector moves it forward to "renewal sent + renew deadline" on each renewal, so a
/// replica that lost its Lease unawares (paused, partitioned) sends no more writes once its
/// renew deadline has passed, which is before another replica may take the Lease over (the
/// lease duration is longer). Lease requests pass always: they are how leadership is kept.
#[derive(Clone, Debug, Default)]
pub(crate) struct WriteFence(Arc<std::sync::Mutex<Option<std::time::Instant>>>);

impl WriteFence {
    pub(crate) fn allow_until(&self, until: std::time::Instant) {
        *self.0.lock().expect("write fence lock") = Some(until);
    }

    /// How long writes stay allowed from `now`: `None` once the fence has closed, unbounded
    /// (`Duration::MAX`) while it was never set.
    pub(crate) fn remaining(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        match *self.0.lock().expect("write fence lock") {
            None => Some(std::time::Duration::MAX),
            Some(until) => until.checked_duration_since(now).filter(|left| !left.is_zero()),
        }
    }

    fn lets_through(&self, method: &hyper::Method, path: &str) -> bool {
        let read = matches!(
            *method,
            hyper::Method::GET | hyper::Method::HEAD | hyper::Method::OPTIONS
        );
        read || path.starts_with("/apis/coordination.k8s.io/")
            || self.remaining(std::time::Instant::now()).is_some()
    }
}

/// Runs the clients' connections, each cut as soon as it is polled after the [`WriteFence`]
/// closed. The fence is checked when a request enters the client, but a write that entered
/// before a pause (SIGSTOP, a frozen VM) waits in its connection and would leave after the
/// resume, past the deadline. A closed fence ends the replica (leadership is lost), so cutting
/// every connection, reads and Lease requests too, loses nothing.
#[derive(Clone)]
struct FencedExecutor {
    fence: WriteFence,
}

type Connection = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl hyper::rt::Executor<Connection> for FencedExecutor {
    fn execute(&self, connection: Connection) {
        tokio::spawn(FencedConnection {
            fence: self.fence.clone(),
            connection,
        });
    }
}

struct FencedConnection {
    fence: WriteFence,
    connection: Connection,
}

impl std::future::Future for FencedConnection {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.fence.remaining(std::time::Instant::now()).is_none() {
            return std::task::Poll::Ready(());
        }
        self.connection.as_mut().poll(cx)
    }
}

/// How long a watch may wait for the API server's answer (its response headers, which a
/// server sends as soon as the watch is established). A watch whose answer never comes (its
/// connection accepted by a server shutting down, or by a proxy that lost its upstream) would
/// leave its store vouching for what it held before: given up on, the watch retries, and its
/// store is not trusted until it is synced again.
const ANSWER_LIMIT: std::time::Duration = std::time::Duration::from_secs(15);

/// A watch the API server did not answer within [`ANSWER_LIMIT`].
#[derive(Debug, thiserror::Error)]
#[error("watch of {path} not answered within {}s", ANSWER_LIMIT.as_secs())]
struct Unanswered {
    path: String,
}

/// Gives up on a watch request not answered within [`ANSWER_LIMIT`]; every other request is
/// left to its own timeouts.
#[derive(Clone, Copy)]
struct AnswerLimitLayer;

impl<S> tower::Layer<S> for AnswerLimitLayer {
    type Service = AnswerLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AnswerLimit { inner }
    }
}

#[derive(Clone)]
struct AnswerLimit<S> {
    inner: S,
}

impl<S, B, R> tower::Service<hyper::Request<B>> for AnswerLimit<S>
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
        let unanswered = is_watch(req.method(), req.uri().query()).then(|| Unanswered {
            path: req.uri().path().to_string(),
        });
        let response = self.inner.call(req);
        Box::pin(async move {
            let Some(unanswered) = unanswered else {
                return response.await;
            };
            match tokio::time::timeout(ANSWER_LIMIT, response).await {
                Ok(response) => response,
                Err(_) => Err(tower::BoxError::from(unanswered).into()),
            }
        })
    }
}

/// A write the [`WriteFence`] held back.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path} refused: this replica's leader lease is no longer renewed")]
struct Fenced {
    method: hyper::Method,
    path: String,
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
    pub(crate) fn write_fence(&self) -> WriteFence {
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
fn is_watch(method: &hyper::Method, query: Option<&str>) -> bool {
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
        if !counts.fence.lets_through(req.method(), req.uri().path()) {
            let refused = Fenced {
                method: req.method().clone(),
                path: req.uri().path().to_string(),
            };
            return Box::pin(std::future::ready(Err(tower::BoxError::from(refused).into())));
        }
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

/// A client whose API requests are added to `counts`, and whose watches give up on an answer
/// that does not come ([`AnswerLimitLayer`]).
pub fn counted_client(config: kube::Config, counts: &RequestCounts) -> Result<Client, kube::Error> {
    let host = config
        .cluster_url
        .authority()
        .map(ToString::to_string)
        .unwrap_or_default();
    let executor = FencedExecutor {
        fence: counts.fence.clone(),
    };
    Ok(kube::client::ClientBuilder::try_from((config, executor))?
        .with_layer(&AnswerLimitLayer)
        .with_layer(&CountingLayer {
            counts: counts.clone(),
            host,
        })
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

    #[tokio::test(start_paused = true)]
    async fn a_watch_unanswered_for_15_s_fails_and_other_requests_wait_on() {
        use tower::{Layer, Service};
        let silent = tower::service_fn(|_: hyper::Request<()>| {
            std::future::pending::<Result<hyper::Response<()>, tower::BoxError>>()
        });
        let mut service = AnswerLimitLayer.layer(silent);
        let request = |uri: &str| hyper::Request::get(uri).body(()).unwrap();
        let watch = service.call(request(
            "/apis/source.toolkit.fluxcd.io/v1/gitrepositories?watch=true",
        ));
        let list = service.call(request("/apis/source.toolkit.fluxcd.io/v1/gitrepositories"));
        let start = tokio::time::Instant::now();
        let error = tokio::time::timeout(std::time::Duration::from_secs(300), watch)
            .await
            .expect("an unanswered watch ends")
            .expect_err("with an error");
        assert_eq!(start.elapsed(), ANSWER_LIMIT);
        assert!(error.to_string().contains("not answered within 15s"), "{error}");
        let waited = tokio::time::timeout(std::time::Duration::from_secs(300), list).await;
        assert!(waited.is_err(), "a list is left to its own timeouts");
    }

    #[tokio::test]
    async fn a_connection_polled_after_the_fence_closed_is_cut_before_it_sends() {
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let connection = |sent: Arc<std::sync::atomic::AtomicUsize>| -> Connection {
            Box::pin(async move {
                sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        };
        let fence = WriteFence::default();
        FencedConnection {
            fence: fence.clone(),
            connection: connection(sent.clone()),
        }
        .await;
        assert_eq!(
            sent.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "an open fence runs it"
        );

        fence.allow_until(std::time::Instant::now());
        FencedConnection {
            fence,
            connection: connection(sent.clone()),
        }
        .await;
        assert_eq!(
            sent.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "a closed fence cuts it"
        );
    }

    #[test]
    fn the_write_fence_holds_back_writes_after_its_deadline_but_never_reads_or_leases() {
        use hyper::Method;
        let fence = WriteFence::default();
        let now = std::time::Instant::now();
        assert_eq!(
            fence.remaining(now),
            Some(std::time::Duration::MAX),
            "open until set"
        );
        assert!(fence.lets_through(&Method::PATCH, "/api/v1/namespaces/a/configmaps/x"));

        fence.allow_until(now + std::time::Duration::from_secs(30));
        assert_eq!(fence.remaining(now), Some(std::time::Duration::from_secs(30)));
        assert!(fence.lets_through(&Method::POST, "/api/v1/namespaces/a/configmaps"));

        fence.allow_until(now);
        assert_eq!(fence.remaining(now), None, "closed at the deadline");
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(
                !fence.lets_through(&method, "/api/v1/namespaces/a/configmaps/x"),
                "{method}"
            );
        }
        assert!(fence.lets_through(&Method::GET, "/api/v1/namespaces/a/configmaps/x"));
        let lease = "/apis/coordination.k8s.io/v1/namespaces/a/leases/l";
        assert!(
            fence.lets_through(&Method::PUT, lease),
            "renewing the Lease is how to reopen it"
        );
    }
}
