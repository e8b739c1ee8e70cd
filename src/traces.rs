//! OpenTelemetry traces: off unless the standard variables name a collector
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`). Then file-agent's own
//! `tracing` spans (targets `file_agent::*`, never a log event and never another crate's span)
//! go out as OTLP over HTTP/protobuf, batched by the SDK's batch processor on a thread of its
//! own: a span's end only puts it in a bounded queue (2,048 by default, `OTEL_BSP_*`), so a
//! collector that is down or slow never slows or fails a call. What cannot go out is counted
//! ([`dropped_spans`], `file_agent_trace_spans_dropped_total`): a span that finds the queue
//! full, and the spans of an export that fails (logged once per failing export).
//!
//! The SDK reads the other standard variables itself (`OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and `_ARG`, `OTEL_EXPORTER_OTLP_HEADERS`,
//! `_TIMEOUT`). The spans carry ids, sizes, names and outcomes only: never code, file content,
//! a prompt, a token or a secret. This module knows no MCP type: `mcp` hands it the
//! `traceparent` it found.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The variables that turn traces on, the traces-only one first.
pub const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "file-agent";

/// The tracer, once traces are on: phases measured as durations become spans through it.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Spans that did not reach the collector: an export that failed (down, refused, timed out).
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// While set, no span of ours is made (as with traces off). Only `bench` sets it, to time
/// the same server with traces on and off in one run.
static PAUSED: AtomicBool = AtomicBool::new(false);

/// Whether traces are on (a collector is configured and the exporter was built).
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// Where `bench` sends its spans (a receiver in its own process), instead of what the
/// environment names; every span is then sampled.
static BENCH_ENDPOINT: OnceLock<String> = OnceLock::new();

/// Sends every span to `endpoint` (an OTLP/HTTP traces URL), whatever the environment says:
/// for `bench`. Call before [`layer`]; starts paused.
pub fn export_to(endpoint: String) {
    let _ = BENCH_ENDPOINT.set(endpoint);
    pause(true);
}

/// Stops (`true`) or resumes (`false`) making spans, as if traces were off: for `bench`, which
/// times calls with traces on and off side by side. Spans already open go on.
pub fn pause(paused: bool) {
    PAUSED.store(paused, Ordering::Relaxed);
}

/// Spans lost so far because an export failed.
pub fn dropped_spans() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Whether `variable` (the environment, or a `.env` file) turns traces on.
pub fn configured(variable: impl Fn(&str) -> Option<String>) -> bool {
    ENDPOINT_VARIABLES
        .iter()
        .any(|name| variable(name).is_some_and(|value| !value.trim().is_empty()))
}

/// Holds the tracer provider while the process runs; dropping it exports what is queued
/// (at most the exporter's timeout) and stops the export thread.
pub struct TracesGuard {
    /// `None` when traces are off.
    provider: Option<SdkTracerProvider>,
}

impl Drop for TracesGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(error = %error, "traces: the last spans could not be exported");
        }
    }
}

/// The layer that turns file-agent's spans into OpenTelemetry spans, and the guard that
/// flushes them at exit; no layer when traces are off. An exporter that cannot be built (a
/// malformed endpoint) is said in the error, naming the variable.
pub fn layer<S>() -> Result<(Option<impl tracing_subscriber::Layer<S>>, TracesGuard), String>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    use tracing_subscriber::Layer as _;
    let bench = BENCH_ENDPOINT.get();
    if bench.is_none() && !configured(|name| std::env::var(name).ok()) {
        return Ok((None, TracesGuard { provider: None }));
    }
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    if let Some(endpoint) = bench {
        exporter = exporter.with_endpoint(endpoint.clone());
    }
    let exporter = exporter
        .build()
        .map_err(|error| format!("{}: {error}", ENDPOINT_VARIABLES.join(" or ")))?;
    let queue = queue_size(|name| std::env::var(name).ok());
    let batches = BatchSpanProcessor::builder(CountingExporter(exporter))
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(queue)
                .build(),
        )
        .build();
    let mut provider = SdkTracerProvider::builder()
        .with_span_processor(CountingQueue {
            batches,
            capacity: queue,
        })
        .with_resource(resource());
    if bench.is_some() {
        provider = provider.with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOn);
    }
    let provider = provider.build();
    let tracer = provider.tracer("file-agent");
    let _ = TRACER.set(tracer.clone());
    // Spans only, and only ours: a log event's fields (a script's stderr, a model's reply)
    // never become span events, and no library's span (rmcp's, hyper's) joins the trace. Our
    // call sites are asked each time (`sometimes`), so that `pause` takes effect at once; the
    // rest are never asked again.
    let ours =
        |meta: &tracing::Metadata<'_>| meta.is_span() && meta.target().starts_with("file_agent");
    let ours = tracing_subscriber::filter::dynamic_filter_fn(move |meta, _| {
        ours(meta) && !PAUSED.load(Ordering::Relaxed)
    })
    .with_callsite_filter(move |meta| {
        if ours(meta) {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::never()
        }
    });
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(ours);
    Ok((
        Some(layer),
        TracesGuard {
            provider: Some(provider),
        },
    ))
}

/// The SDK's resource (its detectors read `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`),
/// named `file-agent` unless they name it.
fn resource() -> opentelemetry_sdk::Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|name| !name.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attributes| attributes.contains("service.name="));
    let builder = opentelemetry_sdk::Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name(DEFAULT_SERVICE_NAME).build()
    }
}

/// The batch queue's size: `OTEL_BSP_MAX_QUEUE_SIZE` read as the SDK reads it (a whole number,
/// else the default), so that [`CountingQueue`] and the SDK's queue are the same size.
fn queue_size(variable: impl Fn(&str) -> Option<String>) -> usize {
    variable(opentelemetry_sdk::trace::OTEL_BSP_MAX_QUEUE_SIZE)
        .and_then(|size| size.parse().ok())
        .unwrap_or(opentelemetry_sdk::trace::OTEL_BSP_MAX_QUEUE_SIZE_DEFAULT)
}

/// Spans handed to the batch processor and not yet given to the exporter: never fewer than its
/// queue holds (the exporter takes a batch off the queue before it exports it).
static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// Whether a full queue's drops were said in the log (once per process).
static QUEUE_FULL_SAID: AtomicBool = AtomicBool::new(false);

/// The SDK's batch processor behind a count of what its queue holds: a span that would find
/// the queue full is dropped here and counted in [`DROPPED`] (the SDK only logs such drops).
/// The count errs on the full side, so a span counted as passed on is never dropped unseen.
#[derive(Debug)]
struct CountingQueue {
    batches: BatchSpanProcessor,
    capacity: usize,
}

impl SpanProcessor for CountingQueue {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, context: &Context) {
        self.batches.on_start(span, context);
    }

    fn on_end(&self, span: SpanData) {
        let room = QUEUED.fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
            (queued < self.capacity).then_some(queued + 1)
        });
        if room.is_ok() {
            self.batches.on_end(span);
            return;
        }
        let total = DROPPED.fetch_add(1, Ordering::Relaxed) + 1;
        if !QUEUE_FULL_SAID.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                queue = self.capacity,
                dropped_total = total,
                "traces: the export queue is full (the collector is slow or down, or \
                 OTEL_BSP_MAX_QUEUE_SIZE is small); spans are dropped and counted in \
                 file_agent_trace_spans_dropped_total (said once)"
            );
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.batches.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.batches.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.batches.set_resource(resource);
    }
}

/// The OTLP exporter, counting the spans of each export that fails.
#[derive(Debug)]
struct CountingExporter(opentelemetry_otlp::SpanExporter);

impl SpanExporter for CountingExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        // Off the queue: room for as many more.
        let _ = QUEUED.fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
            Some(queued.saturating_sub(batch.len()))
        });
        let spans = batch.len() as u64;
        let result = self.0.export(batch).await;
        if let Err(error) = &result {
            let total = DROPPED.fetch_add(spans, Ordering::Relaxed) + spans;
            tracing::warn!(
                error = %error, spans, dropped_total = total,
                "traces: an export to the collector failed; its spans are dropped"
            );
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.0.set_resource(resource);
    }
}

/// Makes `span` a child of the W3C trace context in `traceparent` (and `tracestate`), when
/// it parses; a malformed one is ignored and the span starts a new trace. Call it before the
/// span is first entered.
pub fn set_remote_parent(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
    if let Some(parent) = remote_context(traceparent, tracestate) {
        let _ = span.set_parent(parent);
    }
}

/// Links `span` to the W3C trace context in `traceparent`, when it parses.
pub fn add_remote_link(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
    if let Some(linked) = remote_context(traceparent, tracestate) {
        span.add_link(linked.span().span_context().clone());
    }
}

/// The remote span context `traceparent` (and `tracestate`) name, when it parses.
fn remote_context(traceparent: &str, tracestate: Option<&str>) -> Option<Context> {
    use opentelemetry::propagation::TextMapPropagator as _;
    let mut carrier = std::collections::HashMap::new();
    carrier.insert("traceparent".to_string(), traceparent.to_string());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_string(), state.to_string());
    }
    let context = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    context.span().span_context().is_valid().then_some(context)
}

/// The trace id of the current span (32 lowercase hex digits), when traces are on.
pub fn current_trace_id() -> Option<String> {
    TRACER.get()?;
    let context = tracing::Span::current().context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}

/// Records a step measured as a duration (an attempt's phases, timed by the sandbox) as a
/// child span of the current span, from `start` for `took`, with `attributes`. Nothing when
/// traces are off.
pub fn record_measured(
    name: &'static str,
    start: SystemTime,
    took: Duration,
    attributes: Vec<KeyValue>,
) {
    let Some(tracer) = TRACER.get() else {
        return;
    };
    if PAUSED.load(Ordering::Relaxed) {
        return;
    }
    let parent: Context = tracing::Span::current().context();
    if !parent.span().span_context().is_valid() {
        return;
    }
    use opentelemetry::trace::Span as _;
    tracer
        .span_builder(name)
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent)
        .end_with_timestamp(start + took);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_collector_turns_traces_on() {
        assert!(!configured(|_| None));
        assert!(!configured(|_| Some("  ".into())));
        assert!(configured(|name| {
            (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://127.0.0.1:4318".into())
        }));
        assert!(configured(|name| {
            (name == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").then(|| "http://c/v1/traces".into())
        }));
    }
}
