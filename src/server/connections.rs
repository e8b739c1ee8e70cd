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
//! - **Answers**: [`WriteDeadline`] closes a connection whose client takes no byte of an
//!   answer for `FILE_AGENT_WRITE_TIMEOUT` (nginx's `send_timeout`): a client that sends
//!   requests and never reads would otherwise hold its slot for ever, since the server is
//!   then always "writing" and the header timer never starts.
//! - **One connection's share**: after [`MAX_REQUESTS`] requests, or [`MAX_LIFETIME`], a
//!   connection is closed once its request in flight is answered (nginx's `keepalive_requests`
//!   and `keepalive_time`); after an answer that refuses the caller's credential (401, 403) at
//!   once, so that requests without a credential hold a slot no longer than one request.
//! - **One address's share**: at most `FILE_AGENT_MAX_CONNECTIONS_PER_PEER` connections per
//!   client address (half the cap unless set; nginx's `limit_conn`); one more gets 503.
//! - **How many**: at most [`effective_cap`] connections are served at once, below the
//!   descriptor limit (read, and the soft limit raised to the hard one, at start-up); one more
//!   gets a 503 with `Retry-After` and is closed, so the server never runs out of descriptors.
//!   Behind a proxy every connection comes from the proxy's address: set the per-address cap
//!   to the cap there.
//! - **Shutdown**: the listener stays open until `until` resolves (the server's drain: on
//!   SIGTERM, when the last call has ended or the grace ran out) and then until no request has
//!   been in flight for [`DRAIN_QUIET`] (at most [`DRAIN_QUIET_MAX`]): a client may still send
//!   a request after its call's answer before it hands the result over (the official MCP SDK
//!   lists the tools when it does not know the called one's output schema), and a request the
//!   listener no longer takes would lose that result. Then the listener is closed and every
//!   connection is asked to finish: the answer in flight is written, then it closes.
//! - **Which connection**: each request carries its connection's number
//!   ([`crate::mcp::ConnectionId`], counted from 0 by this server) in its extensions, which is
//!   what tells apart callers who name no one (`mcp::cancel`, `mcp::tasks`).
//!
//! HTTP/1.1 only: MCP clients speak it (HTTP/2 comes only with TLS, which a proxy in front
//! terminates).

mod io;
mod peers;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::mcp::ConnectionId;
pub use io::{BodyTimeout, IdleBody, WriteDeadline};
use peers::{PeerSlot, Peers};

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
/// Requests one connection may carry; the last is answered with `connection: close` (nginx's
/// `keepalive_requests`).
pub const MAX_REQUESTS: u64 = 1000;
/// How long one connection is kept: past it, it closes once its request in flight is answered
/// (nginx's `keepalive_time`).
pub const MAX_LIFETIME: Duration = Duration::from_secs(3600);

/// At shutdown, once the calls are over: how long no request must have been in flight before
/// the listener closes.
pub const DRAIN_QUIET: Duration = Duration::from_secs(1);
/// At shutdown, the longest the listener waits for that quiet.
pub const DRAIN_QUIET_MAX: Duration = Duration::from_secs(10);

/// The bounds of [`serve`].
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// `FILE_AGENT_HEADER_TIMEOUT`.
    pub header_timeout: Duration,
    /// `FILE_AGENT_BODY_TIMEOUT`.
    pub body_timeout: Duration,
    /// `FILE_AGENT_WRITE_TIMEOUT`.
    pub write_timeout: Duration,
    /// Connections served at once (after [`effective_cap`]).
    pub max_connections: usize,
    /// Connections one client address may hold at once.
    pub max_per_peer: usize,
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

/// The per-address cap: `configured`, else half of `cap`; never above `cap`.
pub fn per_peer_cap(configured: Option<usize>, cap: usize) -> usize {
    configured.unwrap_or(cap / 2).clamp(1, cap.max(1))
}

/// Serves `app` on `listener` within `bounds` until `until` resolves and then no request has
/// been in flight for [`DRAIN_QUIET`] (at most [`DRAIN_QUIET_MAX`]); then lets the requests in
/// flight finish and returns once every connection is closed.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    bounds: Bounds,
    until: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut connections = Connections::new(app, bounds);
    accept_until(&listener, &mut connections, until).await;
    let activity = connections.activity.clone();
    accept_until(
        &listener,
        &mut connections,
        activity.quiet(DRAIN_QUIET, DRAIN_QUIET_MAX),
    )
    .await;
    drop(listener);
    connections.shutdown.cancel();
    connections.tasks.close();
    connections.tasks.wait().await;
    Ok(())
}

/// Accepts connections on `listener` for `connections` until `until` resolves.
async fn accept_until(
    listener: &TcpListener,
    connections: &mut Connections,
    until: impl Future<Output = ()>,
) {
    let mut until = std::pin::pin!(until);
    let mut backoff = Duration::from_millis(10);
    loop {
        let (stream, peer) = tokio::select! {
            () = until.as_mut() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    backoff = Duration::from_millis(10);
                    accepted
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
        connections.admit(stream, peer.ip());
    }
}

/// The client address of a request, in its extensions.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub IpAddr);

/// The requests being answered, and when the last one began or ended.
#[derive(Debug, Clone, Default)]
struct Activity(Arc<std::sync::Mutex<ActivityState>>);

#[derive(Debug, Default)]
struct ActivityState {
    in_flight: usize,
    last: Option<tokio::time::Instant>,
}

/// A request in flight, until dropped.
struct Busy(Activity);

impl Activity {
    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A request begins.
    fn begin(&self) -> Busy {
        let mut state = self.lock();
        state.in_flight += 1;
        state.last = Some(tokio::time::Instant::now());
        Busy(self.clone())
    }

    /// Resolves once no request has been in flight for `quiet`, or after `at_most`.
    async fn quiet(self, quiet: Duration, at_most: Duration) {
        let deadline = tokio::time::Instant::now() + at_most;
        loop {
            let quiet_at = {
                let state = self.lock();
                match (state.in_flight, state.last) {
                    (0, Some(last)) => last + quiet,
                    (0, None) => return,
                    _ => tokio::time::Instant::now() + Duration::from_millis(50),
                }
            };
            if quiet_at <= tokio::time::Instant::now() || deadline <= tokio::time::Instant::now() {
                return;
            }
            tokio::time::sleep_until(quiet_at.min(deadline)).await;
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.in_flight -= 1;
        state.last = Some(tokio::time::Instant::now());
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// The server serves `FILE_AGENT_MAX_CONNECTIONS` already.
    Full,
    /// Its address holds `FILE_AGENT_MAX_CONNECTIONS_PER_PEER` already.
    Peer,
}

/// The connections the accept loop serves, and what it needs to serve one more.
struct Connections {
    app: axum::Router,
    bounds: Bounds,
    /// hyper's settings for each connection: the header-read timer, keep-alive.
    http: hyper::server::conn::http1::Builder,
    /// One permit per connection served: at most `bounds.max_connections` at once.
    slots: Arc<Semaphore>,
    /// The connections each client address holds.
    peers: Peers,
    /// One permit per refusal being written: at most [`MAX_REFUSALS`] at once.
    refusals: Arc<Semaphore>,
    /// Connections refused so far, for a warning at each power of two.
    refused: u64,
    /// The number the next connection served gets.
    next_connection: u64,
    /// Each connection's task, awaited at shutdown.
    tasks: TaskTracker,
    /// The requests in flight, for the quiet the drain waits for.
    activity: Activity,
    /// Fired once the listener is closed: each connection finishes its request in flight,
    /// then closes.
    shutdown: CancellationToken,
}

/// What a connection holds while it is open: its slot of the cap and its address's.
type Held = (tokio::sync::OwnedSemaphorePermit, PeerSlot);

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
            peers: Peers::new(bounds.max_per_peer),
            refusals: Arc::new(Semaphore::new(MAX_REFUSALS)),
            refused: 0,
            next_connection: 0,
            tasks: TaskTracker::new(),
            activity: Activity::default(),
            shutdown: CancellationToken::new(),
        }
    }

    /// Serves `stream` from `peer` if its address and the server have a slot left, else
    /// refuses it.
    fn admit(&mut self, stream: TcpStream, peer: IpAddr) {
        let Some(peer_slot) = self.peers.try_take(peer) else {
            return self.refuse(stream, Refusal::Peer);
        };
        match self.slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let connection = ConnectionId(self.next_connection);
                self.next_connection += 1;
                self.serve(stream, peer, connection, (slot, peer_slot));
            }
            Err(_) => self.refuse(stream, Refusal::Full),
        }
    }

    /// Serves `stream` from `peer`, numbered `connection`, in a task of its own, holding
    /// `held` until it closes.
    fn serve(&self, stream: TcpStream, peer: IpAddr, connection: ConnectionId, held: Held) {
        let _ = stream.set_nodelay(true);
        let stream = WriteDeadline::new(stream, self.bounds.write_timeout);
        let (app, body_timeout) = (self.app.clone(), self.bounds.body_timeout);
        let (served, activity) = (Arc::new(AtomicU64::new(0)), self.activity.clone());
        let service =
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let mut request = request.map(|body| Body::new(IdleBody::new(body, body_timeout)));
                request.extensions_mut().insert(Peer(peer));
                request.extensions_mut().insert(connection);
                let (app, served) = (app.clone(), served.clone());
                let busy = activity.begin();
                async move {
                    let response = app.oneshot(request).await;
                    drop(busy);
                    let count = served.fetch_add(1, Ordering::Relaxed) + 1;
                    Ok::<_, Infallible>(last_if(
                        response.unwrap_or_else(|never| match never {}),
                        count,
                    ))
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
                () = tokio::time::sleep(MAX_LIFETIME) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(held);
        });
    }

    /// A connection refused: a 503 written in a task of its own while fewer than
    /// [`MAX_REFUSALS`] are, else closed without an answer; a warning at each power of two.
    fn refuse(&mut self, stream: TcpStream, why: Refusal) {
        self.refused += 1;
        if self.refused.is_power_of_two() {
            tracing::warn!(
                limit = self.bounds.max_connections,
                per_address = self.bounds.max_per_peer,
                refused = self.refused,
                reason = ?why,
                "connection refused: the server serves FILE_AGENT_MAX_CONNECTIONS at once, and FILE_AGENT_MAX_CONNECTIONS_PER_PEER from one address"
            );
        }
        if let Ok(permit) = self.refusals.clone().try_acquire_owned() {
            tokio::spawn(async move {
                refuse(stream, why).await;
                drop(permit);
            });
        }
    }
}

/// Whether the answer to a connection's `count`th request, of `status`, is its last: past
/// [`MAX_REQUESTS`], or when it refuses the caller's credential (a client without one gets
/// one answer per connection, so it queues at the accept loop like everyone else).
fn closes_after(status: http::StatusCode, count: u64) -> bool {
    count >= MAX_REQUESTS
        || status == http::StatusCode::UNAUTHORIZED
        || status == http::StatusCode::FORBIDDEN
}

/// `response`, marked `connection: close` when it is its connection's last ([`closes_after`]).
fn last_if(mut response: http::Response<Body>, count: u64) -> http::Response<Body> {
    if closes_after(response.status(), count) {
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// Answers a connection past a cap with a 503 and closes it.
async fn refuse(mut stream: TcpStream, why: Refusal) {
    let body = match why {
        Refusal::Full => {
            "{\"error\": \"file-agent is serving as many connections as it may (FILE_AGENT_MAX_CONNECTIONS); try again in a moment\"}"
        }
        Refusal::Peer => {
            "{\"error\": \"your address holds as many connections as one address may (FILE_AGENT_MAX_CONNECTIONS_PER_PEER); close one, or try again in a moment\"}"
        }
    };
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nx-content-type-options: nosniff\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
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

    #[test]
    fn one_address_gets_half_the_cap_unless_set_and_never_more_than_it() {
        assert_eq!(per_peer_cap(None, 1024), 512);
        assert_eq!(per_peer_cap(None, 16), 8);
        assert_eq!(per_peer_cap(Some(1024), 16), 16);
        assert_eq!(per_peer_cap(Some(3), 16), 3);
    }

    #[test]
    fn a_connection_closes_after_a_refused_credential_or_its_last_request() {
        use http::StatusCode;
        assert!(!closes_after(StatusCode::OK, 1));
        assert!(!closes_after(StatusCode::NOT_FOUND, MAX_REQUESTS - 1));
        assert!(closes_after(StatusCode::OK, MAX_REQUESTS));
        assert!(closes_after(StatusCode::UNAUTHORIZED, 1));
        assert!(closes_after(StatusCode::FORBIDDEN, 1));
    }
}
