//! Who called, and what proves it. Every per-user promise (saved tools kept apart, the audit
//! line's user, the review page's per-user table) rests on the [`Identity`] made here from a
//! request, by the server's gate (`server::auth`), from these sources, strongest first:
//!
//! | [`Source`] | what it proves |
//! |---|---|
//! | `oauth` | an issuer the operator named signed a token for this server's `/mcp`, for this user, not yet expired ([`oauth`]) |
//! | `openwebui-jwt` | Open WebUI, holding the secret shared with this server, vouched for this user within the last few minutes ([`openwebui`]) |
//! | `openwebui-session` | Open WebUI accepts the forwarded bearer token as this user's session (asked at `GET /api/v1/auths/`) |
//! | `header` | nothing: a plain `X-OpenWebUI-User-Id` header, which whoever holds an access token can set; trusted only while no Open WebUI secret is configured |
//! | `access-token` | the request carried one of `FILE_AGENT_ACCESS_TOKENS`: it names a token, not a user |
//!
//! This module knows tokens and claims, not HTTP frameworks or MCP: the gate hands it header
//! values and puts the result in the request; `mcp` reads it; `tools` uses it.

pub mod oauth;
pub mod openwebui;

pub use crate::owner::Owner;

/// The scope an OAuth token needs to call any tool (the built-in ones and saved ones).
pub const SCOPE_RUN: &str = "file-agent.run";
/// The scope an OAuth token needs to create, generate or delete saved tools.
pub const SCOPE_SAVED_TOOLS: &str = "file-agent.saved-tools";
/// Every scope file-agent knows, as its protected-resource metadata lists them.
pub const SCOPES: [&str; 2] = [SCOPE_RUN, SCOPE_SAVED_TOOLS];
/// Longest user id, name, email or role kept, in characters.
pub const FIELD_MAX_CHARS: usize = 200;

/// What identified a caller. The audit trail writes [`Source::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// An OAuth 2.1 access token, verified against its issuer's keys.
    OAuth,
    /// Open WebUI's signed user token (`X-OpenWebUI-User-Jwt`), verified with the shared secret.
    OpenWebUiJwt,
    /// Open WebUI's session token, accepted by Open WebUI as this user's.
    OpenWebUiSession,
    /// A plain `X-OpenWebUI-User-Id` header: no proof.
    Header,
    /// One of `FILE_AGENT_ACCESS_TOKENS`: a token, no user.
    AccessToken,
}

impl Source {
    /// As the audit trail and the metrics write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::OAuth => "oauth",
            Source::OpenWebUiJwt => "openwebui-jwt",
            Source::OpenWebUiSession => "openwebui-session",
            Source::Header => "header",
            Source::AccessToken => "access-token",
        }
    }

    /// Whether the user came with a proof (a signature, or Open WebUI's word).
    pub fn is_proof(self) -> bool {
        matches!(
            self,
            Source::OAuth | Source::OpenWebUiJwt | Source::OpenWebUiSession
        )
    }
}

/// A user, as a source named them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The id: Open WebUI's user id, or the OAuth claim `FILE_AGENT_OAUTH_USER_CLAIM`.
    pub id: String,
    /// A display name, when the source gave one.
    pub name: Option<String>,
    /// An email address, when the source gave one.
    pub email: Option<String>,
    /// Open WebUI's role (`user`, `admin`), when the source gave one.
    pub role: Option<String>,
    /// What named this user.
    pub source: Source,
    /// The OAuth issuer that signed the token (`oauth` only).
    pub issuer: Option<String>,
}

impl User {
    /// A user from `source` with only an id (cut to [`FIELD_MAX_CHARS`]).
    pub fn new(id: &str, source: Source) -> Self {
        Self {
            id: capped(id),
            name: None,
            email: None,
            role: None,
            source,
            issuer: None,
        }
    }
}

/// `text` cut to [`FIELD_MAX_CHARS`] characters.
pub fn capped(text: &str) -> String {
    text.chars().take(FIELD_MAX_CHARS).collect()
}

/// Who is calling, as the gate established it for one request (or, over stdio, the one local
/// user). `Default` is an HTTP-less call that names nobody: stdio.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The user, when a source named one.
    pub user: Option<User>,
    /// The access token the request was accepted with, as [`AccessTokenId`]'s hex, when
    /// `FILE_AGENT_ACCESS_TOKENS` admitted it.
    pub token: Option<String>,
    /// The OAuth token's scopes, when an OAuth token admitted the request; `None` otherwise
    /// (no scope applies).
    pub scopes: Option<Vec<String>>,
    /// Whether the call came over HTTP, where whoever reaches the port may call: there, a
    /// request with neither a user nor a token names nobody.
    pub over_http: bool,
    /// Why no user is known although one is required: Open WebUI's signed mode is on and its
    /// token was missing or refused. The sentence says what to fix; what needs a user refuses
    /// with it instead of falling back to the access token's space.
    pub user_required: Option<String>,
    /// A plain header naming someone other than the proven user: every tool call is refused.
    pub conflict: Option<String>,
    /// A signed identity that came and was not accepted, as `source: reason` (`openwebui-jwt:
    /// expired`), so that the audit line says why a call that carried one names no user.
    pub refused: Option<String>,
}

impl Identity {
    /// An HTTP request with neither a user nor an access token.
    pub fn names_nobody(&self) -> bool {
        self.over_http && self.user.is_none() && self.token.is_none()
    }

    /// What identified the caller, for the audit trail: the user's source, else an access
    /// token; `None` when nothing did (stdio, or an open HTTP server).
    pub fn source(&self) -> Option<Source> {
        match (&self.user, &self.token) {
            (Some(user), _) => Some(user.source),
            (None, Some(_)) => Some(Source::AccessToken),
            (None, None) => None,
        }
    }

    /// Whether the request may use what `scope` guards: always, unless an OAuth token admitted
    /// it without that scope.
    pub fn allows(&self, scope: &str) -> bool {
        self.scopes
            .as_ref()
            .is_none_or(|scopes| scopes.iter().any(|s| s == scope))
    }

    /// The owner of everything this caller makes and may see again (files, uploads, saved
    /// tools, the review page's row): [`crate::owner`] has the keys. The one place an
    /// identity becomes an owner.
    pub fn owner(&self) -> Owner {
        match (&self.user, &self.token) {
            (Some(user), _) if user.source == Source::OAuth => {
                Owner::oauth(user.issuer.as_deref().unwrap_or_default(), &user.id)
            }
            (Some(user), token) => Owner::user(user.source.as_str(), token.as_deref(), &user.id),
            (None, token) if self.user_required.is_some() => Owner::unproven(token.as_deref()),
            (None, Some(token)) => Owner::token(token),
            (None, None) if self.over_http => Owner::anonymous(),
            (None, None) => Owner::local(),
        }
    }
}

/// The access token an HTTP request was accepted with, as an id that is not the token: the
/// first 16 hex digits of its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessTokenId(pub String);

/// The payload of a JWT, decoded without verifying anything: for choosing which verifier
/// applies (by `iss`), never for trusting what it says. `None` unless `token` is three
/// base64url parts whose middle one is a JSON object, within `max_bytes`.
pub(crate) fn unverified_claims(
    token: &str,
    max_bytes: usize,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    use base64::Engine;
    if token.len() > max_bytes {
        return None;
    }
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The `alg` and `kid` of a JWT's header, decoded without verifying anything, so that an
/// algorithm outside the allow-list (`none`, `HS256` against a public key) is refused by name
/// before any key is looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JwtHeader {
    /// The algorithm, as written.
    pub alg: String,
    /// The key id, when there is one.
    pub kid: Option<String>,
}

/// The header of `token`: `None` unless its first part is base64url JSON with a string `alg`.
pub(crate) fn unverified_header(token: &str) -> Option<JwtHeader> {
    use base64::Engine;
    let first = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(first.trim_end_matches('='))
        .ok()?;
    let header: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    Some(JwtHeader {
        alg: header.get("alg")?.as_str()?.to_string(),
        kid: header
            .get("kid")
            .and_then(|kid| kid.as_str())
            .map(str::to_string),
    })
}

/// The current time in whole seconds since the epoch, as JWT claims count it.
pub(crate) fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: &str, source: Source) -> Option<User> {
        Some(User::new(id, source))
    }

    #[test]
    fn owners_name_the_source_the_token_or_issuer_and_the_user() {
        let token = Some("abcd".to_string());
        let jwt = Identity {
            user: user("alice", Source::OpenWebUiJwt),
            token: token.clone(),
            over_http: true,
            ..Identity::default()
        };
        let header = Identity {
            user: user("alice", Source::Header),
            ..jwt.clone()
        };
        let other_token = Identity {
            token: Some("ef01".into()),
            ..header.clone()
        };
        assert_eq!(jwt.owner().as_str(), "token:abcd/openwebui-jwt:alice");
        // A plain header's alice is not the signed alice, nor another token's alice.
        assert_ne!(jwt.owner(), header.owner());
        assert_ne!(header.owner(), other_token.owner());
        let mut oauth = Identity {
            user: user("alice", Source::OAuth),
            over_http: true,
            ..Identity::default()
        };
        oauth.user.as_mut().unwrap().issuer = Some("https://idp.example".into());
        assert_eq!(
            oauth.owner().as_str(),
            "oauth:https:%2F%2Fidp.example/user:alice"
        );
        let mut other_issuer = oauth.clone();
        other_issuer.user.as_mut().unwrap().issuer = Some("https://idp2.example".into());
        assert_ne!(oauth.owner(), other_issuer.owner());
        let token_only = Identity {
            token,
            over_http: true,
            ..Identity::default()
        };
        assert_eq!(token_only.owner().as_str(), "token:abcd");
        assert_eq!(token_only.source(), Some(Source::AccessToken));
        assert_eq!(Identity::default().owner(), Owner::local());
        assert!(
            !Identity::default().names_nobody(),
            "stdio is the local user"
        );
        let nobody = Identity {
            over_http: true,
            ..Identity::default()
        };
        assert!(nobody.names_nobody());
        assert_eq!(nobody.source(), None);
        assert_eq!(nobody.owner(), Owner::anonymous(), "not the stdio user");
    }

    #[test]
    fn only_an_oauth_token_limits_what_a_call_may_do() {
        assert!(Identity::default().allows(SCOPE_SAVED_TOOLS));
        let scoped = Identity {
            scopes: Some(vec![SCOPE_RUN.into()]),
            ..Identity::default()
        };
        assert!(scoped.allows(SCOPE_RUN));
        assert!(!scoped.allows(SCOPE_SAVED_TOOLS));
    }

    #[test]
    fn unverified_parts_are_read_only_from_well_formed_tokens() {
        // {"alg":"none"} . {"iss":"x"} . (empty signature)
        let token = "eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.";
        assert_eq!(unverified_header(token).unwrap().alg, "none");
        assert_eq!(unverified_claims(token, 100).unwrap()["iss"], "x");
        assert_eq!(unverified_claims(token, 10), None, "over the size bound");
        assert_eq!(unverified_claims("a.b", 100), None);
        assert_eq!(unverified_claims("a.b.c.d", 100), None);
        assert_eq!(unverified_header("bm90IGpzb24.e30."), None);
    }
}
