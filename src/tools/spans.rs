//! The spans of a call's attempts, under the call's MCP server span (`crate::traces`): one per
//! attempt (its number in the call, the backend, runtime and image, warm or cold, how it
//! ended), with the wait for a slot and the sandbox's phases under it. Ids, sizes, names and
//! outcomes only: never the code, an input's or output's content or name, or stderr.
//!
//! The phases are the durations the sandbox measures for `file_agent_sandbox_phase_seconds`,
//! recorded once the attempt's result is whole: each one's length is measured, its start is
//! placed from when the slot was taken by adding the lengths before it (the packing of the
//! inputs, a few milliseconds, is not measured, so a start may be that much early). The
//! upload of the script and inputs (`copy_in`) and the run begin together, as they do in the
//! sandbox; the container's removal happens after the result, in the background, and has no
//! span.

use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;

use super::CALL;
use super::trail::Author;
use crate::config::SandboxConfig;
use crate::sandbox::Outcome;

/// The span of the call's next attempt, not yet entered.
pub(super) fn attempt(config: &SandboxConfig, author: Author) -> tracing::Span {
    let number = CALL
        .try_with(|call| {
            call.attempts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1
        })
        .unwrap_or(1);
    tracing::info_span!(
        "attempt",
        otel.name = "attempt",
        otel.status_code = tracing::field::Empty,
        file_agent.attempt.number = i64::from(number),
        file_agent.attempt.author = author.as_str(),
        file_agent.sandbox.backend = config.backend.name(),
        file_agent.sandbox.runtime = config.runtime.as_deref().unwrap_or("default"),
        container.image.name = config.image.as_str(),
        container.image.id = tracing::field::Empty,
        container.id = tracing::field::Empty,
        file_agent.attempt.container = tracing::field::Empty,
        file_agent.attempt.status = tracing::field::Empty,
        file_agent.attempt.exit_code = tracing::field::Empty,
        file_agent.attempt.outputs = tracing::field::Empty,
        file_agent.attempt.output_bytes = tracing::field::Empty,
        file_agent.attempt.cpu_user_s = tracing::field::Empty,
        file_agent.attempt.cpu_system_s = tracing::field::Empty,
        file_agent.attempt.peak_memory_bytes = tracing::field::Empty,
        file_agent.attempt.processes = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// What the attempt used (the audit line's `resources`), on its span: each figure measured.
fn record_resources(span: &tracing::Span, resources: &crate::sandbox::Resources) {
    let whole = |figure: Option<u64>| figure.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    if let Some(user) = resources.cpu_user_s {
        span.record("file_agent.attempt.cpu_user_s", user);
    }
    if let Some(system) = resources.cpu_system_s {
        span.record("file_agent.attempt.cpu_system_s", system);
    }
    if let Some(peak) = whole(resources.peak_memory_bytes) {
        span.record("file_agent.attempt.peak_memory_bytes", peak);
    }
    if let Some(processes) = whole(resources.processes) {
        span.record("file_agent.attempt.processes", processes);
    }
}

/// The wait for a sandbox slot, a child of the attempt's span.
pub(super) fn queue() -> tracing::Span {
    tracing::info_span!("queue", otel.name = "queue")
}

/// Records how the attempt ended on its `span` (`status` as the audit line writes it), and
/// its phases under it when it ran; `slot_at` is when it got its slot.
pub(super) fn record_attempt(
    span: &tracing::Span,
    status: &str,
    outcome: Option<&Outcome>,
    slot_at: Option<SystemTime>,
) {
    span.record("file_agent.attempt.status", status);
    if status != "ok" {
        span.record("error.type", status);
        span.record("otel.status_code", "ERROR");
    }
    let Some(outcome) = outcome else {
        return;
    };
    let kind = if outcome.warm { "warm" } else { "cold" };
    span.record("file_agent.attempt.container", kind);
    span.record("container.id", outcome.container_id.as_str());
    span.record("container.image.id", outcome.image_id.as_str());
    if let Some(code) = outcome.exit_code {
        span.record("file_agent.attempt.exit_code", code);
    }
    // Numbers as i64: tracing-opentelemetry writes a u64 as text.
    let count = i64::try_from(outcome.outputs.len()).unwrap_or(i64::MAX);
    span.record("file_agent.attempt.outputs", count);
    let bytes: u64 = outcome.outputs.iter().map(|file| file.bytes).sum();
    span.record(
        "file_agent.attempt.output_bytes",
        i64::try_from(bytes).unwrap_or(i64::MAX),
    );
    record_resources(span, &outcome.resources);
    if let Some(slot_at) = slot_at {
        span.in_scope(|| phases(outcome, slot_at));
    }
}

/// The sandbox's phases of `outcome` as spans of the current (the attempt's) span.
fn phases(outcome: &Outcome, slot_at: SystemTime) {
    let timings = &outcome.timings;
    let mut at = slot_at;
    if outcome.warm {
        // The container was created and started before the attempt: taking it is the claim.
        phase("claim", at, Duration::ZERO);
    } else {
        phase("create", at, timings.create);
        at += timings.create;
        phase("start", at, timings.start);
        at += timings.start;
    }
    phase("copy_in", at, timings.copy_in);
    phase("run", at, timings.run);
    let script_done = at + timings.run;
    phase("logs", script_done, timings.logs);
    phase("copy_out", script_done, timings.copy_out);
}

/// One phase, named as `file_agent_sandbox_phase_seconds` labels it.
fn phase(name: &'static str, start: SystemTime, took: Duration) {
    let attributes = vec![KeyValue::new("file_agent.sandbox.phase", name)];
    crate::traces::record_measured(name, start, took, attributes);
}

/// The check of an output file (`label`: Excel, Word, ...), of `bytes`, not yet entered.
pub(super) fn check(label: &str, bytes: usize) -> tracing::Span {
    tracing::info_span!(
        "check",
        otel.name = "check",
        otel.status_code = tracing::field::Empty,
        file_agent.check.file_type = label,
        file_agent.check.bytes = i64::try_from(bytes).unwrap_or(i64::MAX),
        file_agent.outcome = tracing::field::Empty,
    )
}

/// The upload of a result to `storage` (its kind), of `bytes`, not yet entered.
pub(super) fn upload(storage: &str, content_type: &str, bytes: usize) -> tracing::Span {
    tracing::info_span!(
        "upload",
        otel.name = "upload",
        otel.status_code = tracing::field::Empty,
        file_agent.storage = storage,
        file_agent.upload.content_type = content_type,
        file_agent.upload.bytes = i64::try_from(bytes).unwrap_or(i64::MAX),
        file_agent.outcome = tracing::field::Empty,
    )
}

/// Whether a check passed (or an upload went through): `ok`, else `refused` and an error
/// status. The reason stays out: it may quote what the file holds.
pub(super) fn record_verdict(span: &tracing::Span, ok: bool) {
    span.record("file_agent.outcome", if ok { "ok" } else { "refused" });
    if !ok {
        span.record("otel.status_code", "ERROR");
    }
}
