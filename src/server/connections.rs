//! Client connections, bounded: the accept loop in front of the HTTP application, in place of
//! `axum::serve` (which sets no timer, so a client that never finishes its headers, or a
//! keep-alive connection that stays idle, is kept for ever, and about 20,000 of them take
//! every descriptor: then nothing is accepted and the log repeats "Too many open files").
//!
//! - **Headers and idle keep-alive**: hyper's header-read timer runs from the moment a
//!   connection waits for a request's head, including between two requests on a keep-alive
//!   connection, so `FILE_AGENT_HEADER_TIMEOUT` closes both a half-sent request and an idle
//!   connection.
//! - **Bodies**: [`IdleBody`] fails a body that sends nothing for `FILE_AGENT_BODY_TIMEOUT`
//!   (between two reads, as nginx's `client_body_timeout`); the handler then answers and the
//!   connection closes.
//! - **How many**: at most [`effective_cap`] connections are served at once, below the
//!   descriptor limit (read, and the soft limit raised to the hard one, at start-up); one more
//!   gets a 503 with `Retry-After` and is closed, so the server never runs out of descriptors.
//! - **Shutdown**: the listener stays open until `until` resolves (the server's drain: on
//!   SIGTERM, when the last call has ended or the grace ran out), so a client that opens a
//!   connection as its call ends still gets its answer; then the listener is closed and every
//!   connection is asked to finish: the request in flight completes, then it closes.
//!
//! HTTP/1.1 only: MCP clients speak it (HTTP/2 comes only with TLS, which a proxy in front
//! terminates).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Descriptors kept for everything but client connections (Docker, Open WebUI, the model API,
/// files, the audit trail), at least.
const RESERVED_DESCRIPTORS: u64 = 256;
/// Refusals (503 to a connection past the cap) being written at once; past this a connection
/// is closed without an answer.
const MAX_REFUSALS: usize = 64;
/// Time to write a refusal.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest pause after an accept error (the pause doubles from 10 ms up to this).
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The bounds of [`serve`].
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// `FILE_AGENT_HEADER_TIMEOUT`.
    pub header_timeout: Duration,
    /// `FILE_AGENT_BODY_TIMEOUT`.
    pub body_timeout: Duration,
    /// Connections served at once (after [`effective_cap`]).
    pub max_connections: usize,
}

/// The descriptor limit of this process: raises the soft limit to the hard one (what Go's
/// runtime and most servers do at start-up), and returns the soft limit in force.
pub fn raise_descriptor_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    }
}

/// The connection cap for `configured` under a descriptor limit of `descriptors`: at most a
/// quarter of the descriptors (and never fewer than [`RESERVED_DESCRIPTORS`]) stay for the rest.
pub fn effective_cap(configured: usize, descriptors: u64) -> usize {
    let reserved = RESERVED_DESCRIPTORS.max(descriptors / 4);
    let room = descriptors.saturating_sub(reserved).max(16);
    configured.min(usize::try_from(room).unwrap_or(usize::MAX))
}

/// Serves `app` on `listener` within `bounds` until `until` resolves, then lets the requests in
/// flight finish and returns once every connection is closed.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    bounds: Bounds,
    until: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut connections = Connections::new(app, bounds);
    let mut until = std::pin::pin!(until);
    let mut backoff = Duration::from_millis(10);
    loop {
        let stream = tokio::select! {
            () = until.as_mut() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    backoff = Duration::from_millis(10);
                    stream
                }
                Err(error) => {
                    // Out of descriptors or memory, or a connection reset before it was
                    // accepted: pause and go on, never spin.
                    tracing::warn!(%error, pause_ms = backoff.as_millis() as u64, "accept error");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            },
        };
        match connections.slots.clone().try_acquire_owned() {
            Ok(slot) => connections.serve(stream, slot),
            Err(_) => connections.refuse(stream),
        }
    }
    drop(listener);
    connections.shutdown.cancel();
    connections.tasks.close();
    connections.tasks.wait().await;
    Ok(())
}

/// The connections the accept loop serves, and what it needs to serve one more.
struct Connections {
    app: axum::Router,
    bounds: Bounds,
    /// hyper's settings for each connection: the header-read timer, keep-alive.
    http: hyper::server::conn::http1::Builder,
    /// One permit per connection served: at most `bounds.max_connections` at once.
    slots: Arc<Semaphore>,
    /// One permit per refusal being written: at most [`MAX_REFUSALS`] at once.
    refusals: Arc<Semaphore>,
    /// Connections refused so far, for a warning at each power of two.
    refused: u64,
    /// Each connection's task, awaited at shutdown.
    tasks: TaskTracker,
    /// Fired once the listener is closed: each connection finishes its request in flight,
    /// then closes.
    shutdown: CancellationToken,
}

impl Connections {
    fn new(app: axum::Router, bounds: Bounds) -> Self {
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(bounds.header_timeout)
            .keep_alive(true);
        Self {
            app,
            bounds,
            http,
            slots: Arc::new(Semaphore::new(bounds.max_connections)),
            refusals: Arc::new(Semaphore::new(MAX_REFUSALS)),
            refused: 0,
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        }
    }

    /// Serves `stream` in a task of its own, holding `slot` until it closes.
    fn serve(&self, stream: TcpStream, slot: tokio::sync::OwnedSemaphorePermit) {
        let _ = stream.set_nodelay(true);
        let app = self.app.clone();
        let body_timeout = self.bounds.body_timeout;
        let service =
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let request = request.map(|body| Body::new(IdleBody::new(body, body_timeout)));
                let app = app.clone();
                async move {
                    Ok::<_, Infallible>(
                        app.oneshot(request)
                            .await
                            .unwrap_or_else(|never| match never {}),
                    )
                }
            });
        let connection = self.http.serve_connection(TokioIo::new(stream), service);
        let stop = self.shutdown.clone();
        self.tasks.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = stop.cancelled() => {
                    // Finish the request in flight, then close.
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(slot);
        });
    }

    /// A connection past the cap: a 503 written in a task of its own while fewer than
    /// [`MAX_REFUSALS`] are, else closed without an answer; a warning at each power of two.
    fn refuse(&mut self, stream: TcpStream) {
        self.refused += 1;
        if self.refused.is_power_of_two() {
            tracing::warn!(
                limit = self.bounds.max_connections,
                refused = self.refused,
                "connection refused: the server serves FILE_AGENT_MAX_CONNECTIONS at once"
            );
        }
        if let Ok(permit) = self.refusals.clone().try_acquire_owned() {
            tokio::spawn(async move {
                refuse(stream).await;
                drop(permit);
            });
        }
    }
}

/// Answers a connection past the cap with a 503 and closes it.
async fn refuse(mut stream: TcpStream) {
    const BODY: &str = "{\"error\": \"file-agent is serving as many connections as it may (FILE_AGENT_MAX_CONNECTIONS); try again in a moment\"}";
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nx-content-type-options: nosniff\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// A request body that fails once it has sent nothing for its timeout: a client that stalls
/// mid-body frees its connection instead of holding it.
pub struct IdleBody<B> {
    inner: B,
    timeout: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl<B> IdleBody<B> {
    /// `inner`, failing after `timeout` without a frame.
    pub fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

/// The error of a body that went quiet.
#[derive(Debug, thiserror::Error)]
#[error("the request body sent nothing for {0:?} (FILE_AGENT_BODY_TIMEOUT)")]
pub struct BodyTimeout(Duration);

impl<B> http_body::Body for IdleBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let deadline = tokio::time::Instant::now() + this.timeout;
                this.sleep.as_mut().reset(deadline);
                Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
            }
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimeout(this.timeout).into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_stays_below_the_descriptor_limit() {
        assert_eq!(effective_cap(1024, 1_048_576), 1024);
        assert_eq!(effective_cap(1024, 1024), 768);
        assert_eq!(
            effective_cap(1024, 300),
            44,
            "256 descriptors kept for the rest"
        );
        assert_eq!(
            effective_cap(1024, 200),
            16,
            "a floor, however low the limit"
        );
        assert_eq!(effective_cap(100, 4096), 100);
    }
}
