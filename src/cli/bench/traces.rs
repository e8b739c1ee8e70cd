//! The bench's traces case: what OpenTelemetry traces cost a call. The same server (warm pool,
//! `run_python` over MCP) is timed with traces on and off in alternating rounds, so both see
//! the same load; "on" exports every span, batched as in production, to an OTLP/HTTP receiver
//! in this process on 127.0.0.1 that answers each export at once and counts it.
//!
//! Traces are on for the whole process when it starts (the exporter is set up with logging,
//! before the runtime, to the receiver [`prepare`] binds, whatever the environment names), and
//! paused (`crate::traces::pause`) everywhere but in the "on" rounds: every other
//! figure of the bench is taken as with traces off. The receiver decodes nothing; it reads at
//! most [`MAX_EXPORT_BYTES`] of a request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::mcp::McpServer;
use super::owned::Owned;

/// The largest export the receiver reads (the SDK's batches are far smaller).
const MAX_EXPORT_BYTES: usize = 16 * 1024 * 1024;
/// How long the report waits for the last batch (the SDK exports every 5 s by default).
const LAST_BATCH: Duration = Duration::from_secs(7);

/// The receiver's socket, bound by [`prepare`] before the exporter is set up.
static LISTENER: Mutex<Option<std::net::TcpListener>> = Mutex::new(None);

/// What the traces case measured.
#[derive(Debug, Default)]
pub(super) struct TracesCost {
    /// Warm `run_python` calls with traces off, one per round.
    pub off: Vec<Duration>,
    /// The same with traces on, one per round.
    pub on: Vec<Duration>,
    /// Exports (OTLP requests) the receiver answered, and their bytes.
    pub exports: u64,
    pub bytes: u64,
    /// Spans the exporter could not deliver.
    pub dropped: u64,
}

/// Binds the receiver and points the OTLP exporter at it. Call before logging is set up (which
/// builds the exporter).
pub(in crate::cli) fn prepare() -> Result<(), String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|error| format!("bench: cannot bind the trace receiver: {error}"))?;
    let address = listener
        .local_addr()
        .map_err(|error| format!("bench: the trace receiver has no address: {error}"))?;
    *LISTENER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(listener);
    crate::traces::export_to(format!("http://{address}/v1/traces"));
    Ok(())
}

/// Exports received so far: requests and bytes.
#[derive(Debug, Default)]
struct Received {
    exports: AtomicU64,
    bytes: AtomicU64,
}

/// `rounds` rounds of one warm call with traces off and one with traces on (in turn first),
/// after one of each that is not counted.
pub(super) async fn measure(
    owned: &Owned,
    instance: &str,
    rounds: usize,
) -> anyhow::Result<TracesCost> {
    let listener = LISTENER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take()
        .context("the trace receiver was not prepared")?;
    let received = Arc::new(Received::default());
    serve(listener, received.clone())?;
    eprintln!("file-agent bench: run_python over MCP, traces off and on");
    let server = McpServer::start(owned, &format!("{instance}-traces"), 1).await?;
    let mut cost = TracesCost::default();
    for round in 0..=rounds {
        let on_first = round % 2 == 1;
        let (first, second) = (
            call(&server, on_first).await?,
            call(&server, !on_first).await?,
        );
        let (off, on) = if on_first {
            (second, first)
        } else {
            (first, second)
        };
        if round > 0 {
            cost.off.push(off);
            cost.on.push(on);
        }
    }
    server.stop().await;
    let waited = Instant::now();
    while received.exports.load(Ordering::Relaxed) == 0 && waited.elapsed() < LAST_BATCH {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cost.exports = received.exports.load(Ordering::Relaxed);
    cost.bytes = received.bytes.load(Ordering::Relaxed);
    cost.dropped = crate::traces::dropped_spans();
    Ok(cost)
}

/// One warm call from a full pool, with traces on or off.
async fn call(server: &McpServer, traced: bool) -> anyhow::Result<Duration> {
    server.settle().await;
    crate::traces::pause(!traced);
    let took = server.run_python(super::SCRIPT).await;
    crate::traces::pause(true);
    took
}

/// The receiver: `POST /v1/traces` answered with an empty `ExportTraceServiceResponse` (the
/// empty protobuf message is zero bytes), counted. On a thread and a runtime of its own, so
/// that it still answers the last export, made when the process ends after the bench's runtime.
fn serve(listener: std::net::TcpListener, received: Arc<Received>) -> anyhow::Result<()> {
    use axum::routing::post;
    listener.set_nonblocking(true)?;
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(move |body: axum::body::Bytes| {
                let received = received.clone();
                async move {
                    received.exports.fetch_add(1, Ordering::Relaxed);
                    received
                        .bytes
                        .fetch_add(body.len() as u64, Ordering::Relaxed);
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_EXPORT_BYTES));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("bench-trace-receiver".into())
        .spawn(move || {
            runtime.block_on(async move {
                if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                    let _ = axum::serve(listener, app).await;
                }
            })
        })?;
    Ok(())
}
