//! file-agent: an MCP tool server that turns plain-language requests into Excel, Word,
//! PowerPoint and PDF files and data analyses. A language model writes Python; file-agent runs
//! every attempt in a fresh, network-less, locked-down Docker container (or Kubernetes pod) and
//! hands back what it produced.
//!
//! The crate is one library with a thin `main.rs`. Modules, by domain:
//! - [`sandbox`]: one hardened, single-use container (or pod) per attempt; the only module that
//!   talks to Docker or the Kubernetes API;
//! - [`llm`]: the model that writes the Python (any OpenAI-compatible API);
//! - [`storage`]: where files come from and go to (Open WebUI, or the built-in store);
//! - [`tools`]: the tool flows (`generate_file`, `modify_file`, `analyze_file`,
//!   `data_analysis_tool`, `conduct_deep_research`, `run_python`) as plain functions;
//! - [`untrusted`]: every parser of bytes the server did not write (uploads, outputs, the
//!   sandbox's answers), each with the bounds it keeps; depends on nothing above it;
//! - [`audit`]: the hash-chained trail of every attempt, and its verification;
//! - [`report`]: `audit report`, the trail and the saved tools' versions as one reviewer's page;
//! - [`metrics`]: counters and histograms for `/metrics` (Prometheus text format);
//! - [`traces`]: OpenTelemetry traces (OTLP), off unless a collector is configured;
//! - [`identity`]: who called, and what proves it (Open WebUI's signed user token, OAuth 2.1
//!   access tokens, Open WebUI's session, a plain header, an access token);
//! - [`owner`]: whose data something is, the one owner key of files, uploads and saved tools;
//! - [`mcp`]: the MCP adapter over the tools, the only module that knows MCP types;
//! - [`server`]: HTTP (`/mcp`, `/health`, `/files`) and stdio wiring, start-up and shutdown;
//! - [`prompts`]: the texts the model reads, from `prompts/`;
//! - [`config`]: settings from the environment, parsed and validated without I/O;
//! - [`time`]: RFC 3339 timestamps (written by the audit trail, read from Docker);
//! - [`cli`]: the command line (`serve`, `run`, `doctor`, `reap`, `image build`, `bench`,
//!   `image prune`, `audit verify`, `audit show`, `audit report`, `health`).
//!
//! See `ARCHITECTURE.md` for the map and the invariants.

pub mod audit;
pub mod cli;
pub mod config;
pub mod identity;
pub mod llm;
pub mod mcp;
pub mod metrics;
pub mod owner;
pub mod prompts;
pub mod report;
pub mod sandbox;
pub mod server;
pub mod storage;
pub mod text;
pub mod time;
pub mod tools;
pub mod traces;
pub mod untrusted;

/// An error and its sources joined with `: `, for one log line or message.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The token of an `Authorization: Bearer <token>` header, if there is a non-empty one.
pub(crate) fn bearer_token(headers: &http::HeaderMap) -> Option<String> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

#[cfg(test)]
mod layering;

#[cfg(test)]
mod function_length;
