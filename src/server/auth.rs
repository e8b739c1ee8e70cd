//! The server's own access tokens (`FILE_AGENT_ACCESS_TOKENS`, `FILE_AGENT_METRICS_TOKEN`):
//! loaded, checked, and the 401 that refuses a request without one. The gate of `/mcp` and
//! uploads ([`super::gate`]) uses them beside OAuth; `/metrics` uses [`require_token`] alone.
//!
//! A token is accepted in `X-File-Agent-Key`, or as `Authorization: Bearer`. Tokens are kept as
//! SHA-256 digests and compared digest to digest without early exit.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::config::{Secret, ServerConfig};
use crate::identity::AccessTokenId;

/// The header that carries a server token next to a user's bearer token.
pub const KEY_HEADER: &str = "x-file-agent-key";
/// The shortest token accepted: shorter ones are guessable.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The accepted tokens, as digests (compared) and as themselves (only to find them where they
/// must not go: [`Self::found_in`]). Empty means no authentication.
#[derive(Debug, Clone, Default)]
pub struct AccessTokens {
    digests: Arc<Vec<[u8; 32]>>,
    /// The tokens, whose `Debug` prints nothing.
    secrets: Arc<Vec<Secret>>,
}

/// A token list that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TokenError(String);

impl AccessTokens {
    /// The tokens of `FILE_AGENT_ACCESS_TOKENS` and `FILE_AGENT_ACCESS_TOKENS_FILE`.
    pub fn load(config: &ServerConfig) -> Result<Self, TokenError> {
        let mut tokens: Vec<Secret> = config.access_tokens.clone();
        let from_variable = tokens.len();
        if let Some(path) = &config.access_tokens_file {
            let text = std::fs::read_to_string(path).map_err(|error| {
                TokenError(format!(
                    "cannot read FILE_AGENT_ACCESS_TOKENS_FILE {}: {error}",
                    path.display()
                ))
            })?;
            tokens.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|line| !line.is_empty() && !line.starts_with('#'))
                    .map(Secret::new),
            );
        }
        if let Some(short) = tokens
            .iter()
            .position(|token| token.expose().chars().count() < MIN_TOKEN_CHARS)
        {
            let (source, number) = if short < from_variable {
                ("FILE_AGENT_ACCESS_TOKENS", short + 1)
            } else {
                ("FILE_AGENT_ACCESS_TOKENS_FILE", short - from_variable + 1)
            };
            return Err(TokenError(format!(
                "{source}: token number {number} is shorter than {MIN_TOKEN_CHARS} characters; use a random one (e.g. `openssl rand -hex 32`)"
            )));
        }
        if let Some((number, why)) = tokens
            .iter()
            .enumerate()
            .find_map(|(at, token)| crate::config::placeholder(token.expose()).map(|why| (at, why)))
        {
            let (source, number) = if number < from_variable {
                ("FILE_AGENT_ACCESS_TOKENS", number + 1)
            } else {
                ("FILE_AGENT_ACCESS_TOKENS_FILE", number - from_variable + 1)
            };
            return Err(TokenError(format!(
                "{source}: token number {number} is a placeholder, not a secret ({why}); make one with `openssl rand -hex 32` and paste its output"
            )));
        }
        Ok(Self::from_secrets(tokens.iter()))
    }

    /// Exactly these tokens (no length rule: for a separately configured metrics token).
    pub fn from_secrets<'a>(tokens: impl Iterator<Item = &'a Secret>) -> Self {
        let secrets: Vec<Secret> = tokens
            .filter(|token| !token.expose().is_empty())
            .cloned()
            .collect();
        Self {
            digests: Arc::new(secrets.iter().map(|t| digest(t.expose())).collect()),
            secrets: Arc::new(secrets),
        }
    }

    /// These tokens and `more`'s, for finding any of them ([`Self::found_in`]).
    pub fn with(&self, more: &AccessTokens) -> Self {
        Self::from_secrets(self.secrets.iter().chain(more.secrets.iter()))
    }

    /// Whether `bytes` hold one of these tokens anywhere: a header value that carries one,
    /// whatever its name or form (`Bearer <token>`, the token inside a longer value).
    pub fn found_in(&self, bytes: &[u8]) -> bool {
        self.secrets.iter().any(|secret| {
            let token = secret.expose().as_bytes();
            bytes.windows(token.len()).any(|window| window == token)
        })
    }

    /// Whether any token is configured.
    pub fn enabled(&self) -> bool {
        !self.digests.is_empty()
    }

    /// Whether `token` is one of them.
    pub fn accepts(&self, token: &str) -> bool {
        let presented = digest(token);
        // Check every digest, so the time taken does not say which one matched.
        self.digests.iter().fold(false, |found, known| {
            let diff = known
                .iter()
                .zip(&presented)
                .fold(0u8, |diff, (a, b)| diff | (a ^ b));
            found | (diff == 0)
        })
    }
}

/// Which token a request came with, as saved tools tell owners apart: the first 16 hex digits
/// of its SHA-256 (not the token, which is never kept).
pub fn token_id(token: &str) -> AccessTokenId {
    AccessTokenId(hex::encode(digest(token))[..16].to_string())
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The middleware of `/metrics` (and of the gate's simple cases): passes a request with one
/// of `tokens` when any is set, answers 401 otherwise.
pub async fn require_token(
    State(tokens): State<AccessTokens>,
    request: Request,
    next: Next,
) -> Response {
    if !tokens.enabled() {
        return next.run(request).await;
    }
    let headers = request.headers();
    let presented = headers
        .get(KEY_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(|key| key.trim().to_string())
        .or_else(|| crate::bearer_token(headers));
    match presented {
        Some(token) if tokens.accepts(&token) => next.run(request).await,
        Some(_) => refusal(
            StatusCode::UNAUTHORIZED,
            &format!("{CHALLENGE}, error=\"invalid_token\""),
            INVALID_TOKEN,
        ),
        None => refusal(StatusCode::UNAUTHORIZED, CHALLENGE, TOKEN_REQUIRED),
    }
}

/// The challenge of every refusal, before its details.
pub const CHALLENGE: &str = "Bearer realm=\"file-agent\"";
/// The refusal of a request without a credential, where only access tokens admit.
pub const TOKEN_REQUIRED: &str = "an access token is required: send it as `Authorization: Bearer <token>` or in `X-File-Agent-Key`";
/// The refusal of an access token that is not one of the server's.
pub const INVALID_TOKEN: &str =
    "the access token is not valid; check the token configured in the MCP client";

/// A refusal: `status`, the `WWW-Authenticate` `challenge`, and `{"error": message}`.
pub fn refusal(status: StatusCode, challenge: &str, message: &str) -> Response {
    let mut response = (status, axum::Json(json!({"error": message}))).into_response();
    if let Ok(value) = HeaderValue::from_str(challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(tokens: &[&str]) -> ServerConfig {
        ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            public_url: "http://localhost".into(),
            allowed_hosts: None,
            allowed_origins: None,
            pinned: crate::config::Pinned::default(),
            access_tokens: tokens.iter().map(|t| Secret::new(*t)).collect(),
            access_tokens_file: None,
            metrics_token: None,
            shutdown_grace: std::time::Duration::from_secs(1),
            reap_interval: None,
            header_timeout: std::time::Duration::from_secs(30),
            body_timeout: std::time::Duration::from_secs(30),
            max_connections: 1024,
            max_connections_per_peer: None,
            write_timeout: std::time::Duration::from_secs(60),
            keep_alive: std::time::Duration::from_secs(15),
            max_uploads: 4,
            local_roots: Vec::new(),
        }
    }

    #[test]
    fn a_placeholder_in_the_tokens_file_refuses_the_start_naming_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(
            &file,
            "# ours\n0123456789abcdef0123456789abcdef\n<openssl rand -hex 32>\n",
        )
        .unwrap();
        let mut server = config(&[]);
        server.access_tokens_file = Some(file);
        let error = AccessTokens::load(&server).unwrap_err().to_string();
        assert!(
            error.starts_with("FILE_AGENT_ACCESS_TOKENS_FILE: token number 2 is a placeholder"),
            "{error}"
        );
    }

    #[test]
    fn tokens_are_matched_exactly_and_short_ones_refused() {
        let tokens =
            AccessTokens::load(&config(&["a-long-enough-token-1", "another-long-token-2"]))
                .unwrap();
        assert!(tokens.enabled());
        assert!(tokens.accepts("another-long-token-2"));
        assert!(!tokens.accepts("another-long-token-"));
        assert!(!tokens.accepts(""));
        assert!(!AccessTokens::load(&config(&[])).unwrap().enabled());
        let error = AccessTokens::load(&config(&["short"])).unwrap_err();
        assert!(error.to_string().contains("shorter than 16"), "{error}");
        assert!(
            error
                .to_string()
                .starts_with("FILE_AGENT_ACCESS_TOKENS: token number 1"),
            "{error}"
        );
    }

    #[test]
    fn a_tokens_file_adds_tokens_and_skips_comments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(
            &path,
            "# team A\nteam-a-0123456789abcdef\n\n  team-b-0123456789abcdef  \n",
        )
        .unwrap();
        let mut config = config(&[]);
        config.access_tokens_file = Some(path);
        let tokens = AccessTokens::load(&config).unwrap();
        assert!(tokens.accepts("team-a-0123456789abcdef"));
        assert!(tokens.accepts("team-b-0123456789abcdef"));
        assert!(!tokens.accepts("# team A"));
    }
}
