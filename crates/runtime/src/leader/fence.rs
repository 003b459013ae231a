//! The write fence: once this replica's Lease is no longer renewed, its clients send no more
//! writes, and connections that still hold one are cut.

use std::sync::Arc;

/// Until when the clients may send writes; open (no limit) unless leader election closes it.
/// The elector moves it forward to "renewal sent + renew deadline" on each renewal, so a
/// replica that lost its Lease unawares (paused, partitioned) sends no more writes once its
/// renew deadline has passed, which is before another replica may take the Lease over (the
/// lease duration is longer). Lease requests pass always: they are how leadership is kept.
#[derive(Clone, Debug, Default)]
pub struct WriteFence(Arc<std::sync::Mutex<Option<std::time::Instant>>>);

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
pub(crate) struct FencedExecutor {
    fence: WriteFence,
}

impl FencedExecutor {
    pub(crate) fn new(fence: WriteFence) -> Self {
        Self { fence }
    }
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

/// A write the [`WriteFence`] held back.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path} refused: this replica's leader lease is no longer renewed")]
struct Fenced {
    method: hyper::Method,
    path: String,
}

/// Holds back the writes the fence no longer lets through, as a filter of the clients'
/// requests; every other request passes.
impl<B> tower::filter::Predicate<hyper::Request<B>> for WriteFence {
    type Request = hyper::Request<B>;

    fn check(&mut self, request: hyper::Request<B>) -> Result<hyper::Request<B>, tower::BoxError> {
        if self.lets_through(request.method(), request.uri().path()) {
            return Ok(request);
        }
        Err(Fenced {
            method: request.method().clone(),
            path: request.uri().path().to_string(),
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
