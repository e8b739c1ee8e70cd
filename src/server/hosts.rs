//! The `Host` check on `/mcp`, in front of rmcp's own: the same rule (a host, or a host and
//! port, from `FILE_AGENT_ALLOWED_HOSTS`), but a refusal that says what to do. rmcp answers a
//! host it does not know with a bare "Forbidden: Host header is not allowed" and a log line
//! about DNS rebinding, and a client such as Open WebUI shows only "Failed to create MCP
//! client": the admin who reached the server by its IP address or a compose service name
//! never learns which variable to set. rmcp's check stays on behind this one.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The hosts `/mcp` answers, as configured (`None`: any host).
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts(Option<Arc<Vec<String>>>);

impl AllowedHosts {
    /// `FILE_AGENT_ALLOWED_HOSTS` as parsed: `None` when it is `*`.
    pub fn new(hosts: Option<&[String]>) -> Self {
        Self(hosts.map(|hosts| Arc::new(hosts.to_vec())))
    }

    /// Whether `authority` (a `Host` header: a host, an optional port) may call. An entry
    /// without a port allows the host on any port; one with a port, that port only.
    pub fn allows(&self, authority: &str) -> bool {
        let Some(allowed) = &self.0 else { return true };
        let (host, port) = split(authority);
        allowed.iter().any(|entry| {
            let (allowed_host, allowed_port) = split(entry);
            allowed_host == host && allowed_port.is_none_or(|p| Some(p) == port)
        })
    }
}

/// A host (lower case, IPv6 brackets removed) and its port, when it has one.
fn split(authority: &str) -> (String, Option<&str>) {
    let authority = authority.trim();
    let (host, port) = match authority.rsplit_once(':') {
        // `[::1]:8000`, `host:8000`; a bare IPv6 address has more than one colon.
        Some((host, port))
            if port.chars().all(|c| c.is_ascii_digit())
                && !port.is_empty()
                && (host.ends_with(']') || !host.contains(':')) =>
        {
            (host, Some(port))
        }
        _ => (authority, None),
    };
    (
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase(),
        port,
    )
}

/// Refuses a request whose `Host` is not allowed, with a body and a log line that name
/// `FILE_AGENT_ALLOWED_HOSTS`. A request without `Host` goes on to rmcp, which refuses it.
pub async fn require_allowed_host(
    State(hosts): State<AllowedHosts>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    match host {
        Some(host) if !hosts.allows(&host) => {
            let shown: String = host.chars().take(HOST_SHOWN_CHARS).collect();
            tracing::warn!(
                host = %shown.escape_debug(),
                "refused a request for a host not in FILE_AGENT_ALLOWED_HOSTS (possible DNS rebinding attempt); if clients reach this server by that name or address, add it to FILE_AGENT_ALLOWED_HOSTS"
            );
            (
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden: Host header {:?} is not allowed. If clients reach this server by that name or address, add it to FILE_AGENT_ALLOWED_HOSTS (comma-separated) and restart file-agent.\n",
                    shown
                ),
            )
                .into_response()
        }
        _ => next.run(request).await,
    }
}

/// Characters of a refused `Host` put into the answer and the log.
const HOST_SHOWN_CHARS: usize = 100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_with_or_without_their_port() {
        let hosts = AllowedHosts::new(Some(&[
            "localhost".into(),
            "::1".into(),
            "file-agent:8000".into(),
        ]));
        assert!(hosts.allows("localhost"));
        assert!(hosts.allows("LOCALHOST:1234"));
        assert!(hosts.allows("[::1]:8000"));
        assert!(hosts.allows("file-agent:8000"));
        assert!(!hosts.allows("file-agent:9000"));
        assert!(!hosts.allows("file-agent"));
        assert!(!hosts.allows("192.168.1.20:8000"));
        assert!(AllowedHosts::new(None).allows("anything"));
    }
}
