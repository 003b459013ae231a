//! The watch answer limit: a watch the API server does not answer is given up on, so it is
//! retried instead of leaving its store vouching for what it held before.

/// How long a watch may wait for the API server's answer (its response headers, which a
/// server sends as soon as the watch is established). A watch whose answer never comes (its
/// connection accepted by a server shutting down, or by a proxy that lost its upstream) would
/// leave its store vouching for what it held before: given up on, the watch retries, and its
/// store is not trusted until it is synced again.
pub(crate) const ANSWER_LIMIT: std::time::Duration = std::time::Duration::from_secs(15);

/// A watch the API server did not answer within [`ANSWER_LIMIT`].
#[derive(Debug, thiserror::Error)]
#[error("watch of {path} not answered within {}s", ANSWER_LIMIT.as_secs())]
struct Unanswered {
    path: String,
}

/// Gives up on a watch request not answered within [`ANSWER_LIMIT`]; every other request is
/// left to its own timeouts.
#[derive(Clone, Copy)]
pub(crate) struct AnswerLimitLayer;

impl<S> tower::Layer<S> for AnswerLimitLayer {
    type Service = AnswerLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AnswerLimit { inner }
    }
}

#[derive(Clone)]
pub(crate) struct AnswerLimit<S> {
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
        let unanswered = super::is_watch(req.method(), req.uri().query()).then(|| Unanswered {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
