//! The gate of `/mcp` and uploads (`POST /files`): who may call, and who is calling. Downloads
//! (`GET /files/{id}/{name}`, where the 128-bit id is the capability), `/health` and the
//! protected-resource metadata stay open.
//!
//! Two kinds of credential admit a request ([`Gate::identify`] has the order): the server's
//! access tokens ([`super::auth`]), in `X-File-Agent-Key` or as `Authorization: Bearer`, and
//! OAuth 2.1 access tokens from a configured issuer ([`crate::identity::oauth`]). The custom
//! header keeps Open WebUI's "session" auth working next to a token: Open WebUI sends the
//! user's own token as the bearer (forwarded to its files API) and the server's token in the
//! header. An OAuth token, and every header that carries one of the server's own tokens (an
//! access token or the metrics token, in whatever header and form), are removed from the
//! request before the tools see it, so none is ever forwarded to Open WebUI as if it were a
//! user's, sent to the model or a fetched URL, or logged. Then the gate names the
//! user ([`crate::identity`] lists the sources and what each proves) and puts the [`Identity`]
//! in the request, where `mcp` finds it.
//!
//! A refusal is a 401 (a 403 for a missing OAuth scope) whose `WWW-Authenticate`, when OAuth is
//! on, names the scopes to ask for and points at the protected-resource metadata, so that an
//! MCP client finds the issuer and signs in with the scopes the tools need.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::auth::{
    AccessTokens, CHALLENGE, INVALID_TOKEN, KEY_HEADER, TOKEN_REQUIRED, refusal, token_id,
};
use crate::identity::oauth::{OAuth, OAuthRefusal};
use crate::identity::openwebui::{JwtRefusal, OpenWebUiJwt};
use crate::identity::{Identity, SCOPE_RUN, SCOPES, Source, User, capped};
use crate::storage::OpenWebUi;

/// The path of the protected-resource metadata of `/mcp` (RFC 9728 §3.1).
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";
/// The same document at the root path, for clients that look there.
pub const RESOURCE_METADATA_ROOT_PATH: &str = "/.well-known/oauth-protected-resource";
/// Open WebUI's plain header with the user's id (sent with `ENABLE_FORWARD_USER_INFO_HEADERS`
/// when no signing secret is set on its side).
pub const USER_ID_HEADER: &str = "x-openwebui-user-id";

/// What the gate knows: the access tokens, the verifiers of signed identities, and Open WebUI,
/// which names the user of a session token.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    tokens: AccessTokens,
    /// Every token of the server's own (the access tokens and the metrics token): a header
    /// that carries one goes no further than the gate.
    own: AccessTokens,
    oauth: Option<OAuth>,
    openwebui_jwt: Option<OpenWebUiJwt>,
    /// Open WebUI, when files live there (it answers only while users' tokens are forwarded).
    session: Option<OpenWebUi>,
    /// The URL of the protected-resource metadata, when OAuth is on.
    metadata_url: Option<String>,
}

impl Gate {
    /// A gate over `tokens` and the identity sources of `config`; `session` is Open WebUI when
    /// files live there. Sends nothing yet.
    pub fn new(
        tokens: AccessTokens,
        config: &crate::config::Config,
        session: Option<OpenWebUi>,
    ) -> Result<Self, reqwest::Error> {
        let public_url = config.server.public_url.trim_end_matches('/');
        let oauth = config
            .identity
            .oauth
            .as_ref()
            .map(|oauth| OAuth::new(oauth, &format!("{public_url}/mcp")))
            .transpose()?;
        let metrics = AccessTokens::from_secrets(config.server.metrics_token.iter());
        Ok(Self {
            own: tokens.with(&metrics),
            tokens,
            metadata_url: oauth
                .as_ref()
                .map(|_| format!("{public_url}{RESOURCE_METADATA_PATH}")),
            oauth,
            openwebui_jwt: config
                .identity
                .openwebui_jwt
                .as_ref()
                .map(OpenWebUiJwt::new),
            session,
        })
    }

    /// The OAuth verifier, when an issuer is configured.
    pub fn oauth(&self) -> Option<&OAuth> {
        self.oauth.as_ref()
    }

    /// Who sent a request with `headers`, or why it is refused. Credentials the tools must not
    /// see are taken out of `headers`: an OAuth token, and every header that carries one of
    /// the server's own tokens ([`Self::take_own_tokens`]), whatever its name.
    ///
    /// Admission, first match: an access token in `X-File-Agent-Key` (a wrong one refuses);
    /// an access token as the bearer; an OAuth token as the bearer (when a key admitted the
    /// request, the bearer is judged as one only if it claims a configured issuer: otherwise
    /// it is a user's Open WebUI token, kept for forwarding). With neither tokens nor issuers
    /// set, every request is admitted.
    ///
    /// The user: see [`Self::identify_user`], unless an OAuth token named one.
    pub async fn identify(&self, headers: &mut HeaderMap) -> Result<Identity, Refusal> {
        let mut identity = Identity {
            over_http: true,
            ..Identity::default()
        };
        let mut admitted = !self.tokens.enabled() && self.oauth.is_none();
        let key = text(headers, KEY_HEADER).map(str::to_string);
        let mut bearer = crate::bearer_token(headers);
        if let Some(key) = &key {
            if self.tokens.enabled() && self.tokens.accepts(key) {
                identity.token = Some(token_id(key).0);
                admitted = true;
            } else if self.tokens.enabled() {
                return Err(Refusal::InvalidToken);
            }
            headers.remove(KEY_HEADER);
        } else if let Some(token) = bearer
            .as_deref()
            .filter(|token| self.tokens.enabled() && self.tokens.accepts(token))
        {
            identity.token = Some(token_id(token).0);
            headers.remove(header::AUTHORIZATION);
            bearer = None;
            admitted = true;
        }
        if self
            .take_own_tokens(headers)
            .contains(&header::AUTHORIZATION)
        {
            bearer = None;
        }
        if let (Some(oauth), Some(token)) = (&self.oauth, bearer.as_deref())
            && (!admitted || oauth.claims_to_be_ours(token))
        {
            let verified = verify_oauth(oauth, token).await?;
            identity.user = Some(verified.user);
            identity.scopes = Some(verified.scopes);
            headers.remove(header::AUTHORIZATION);
            bearer = None;
            admitted = true;
        }
        if !admitted {
            return Err(match (key, bearer) {
                (None, None) => Refusal::Missing,
                _ => Refusal::InvalidToken,
            });
        }
        if identity.user.is_none() {
            self.identify_user(headers, bearer.as_deref(), &mut identity)
                .await;
        }
        Ok(identity)
    }

    /// Removes every header that carries one of the server's own tokens (the same token as the
    /// key sent again as the bearer, the metrics token, a token in any other header), so that
    /// none reaches the tools, Open WebUI, the model, a fetched URL or a log; the names of
    /// those removed. Runs after admission, which has already taken the headers it read.
    fn take_own_tokens(&self, headers: &mut HeaderMap) -> Vec<header::HeaderName> {
        let carrying: Vec<header::HeaderName> = headers
            .iter()
            .filter(|(_, value)| self.own.found_in(value.as_bytes()))
            .map(|(name, _)| name.clone())
            .collect();
        for name in &carrying {
            headers.remove(name);
        }
        if !carrying.is_empty() {
            tracing::debug!(
                headers = ?carrying,
                "headers that carried one of file-agent's own tokens were removed"
            );
        }
        carrying
    }

    /// The user of a request that no OAuth token named, first match: Open WebUI's signed token
    /// (while its secret is set, a missing token leaves only Open WebUI's session to prove the
    /// user, and a refused one leaves the user unknown); Open WebUI's word on the forwarded
    /// session token; and, only while no secret is set, the plain `X-OpenWebUI-User-Id`. A
    /// plain header or a session naming someone other than the proven user is a conflict: the
    /// request's tool calls are refused.
    async fn identify_user(
        &self,
        headers: &HeaderMap,
        bearer: Option<&str>,
        identity: &mut Identity,
    ) {
        // Whether a proof other than the signed token may still name the user.
        let open = match &self.openwebui_jwt {
            Some(jwt) => signed_user(jwt, headers, identity),
            None => true,
        };
        if open
            && let (Some(openwebui), Some(bearer)) = (&self.session, bearer)
            && let Some(session) = openwebui.session_user(bearer).await
        {
            session_user(&session, identity);
        }
        let plain = text(headers, USER_ID_HEADER)
            .filter(|id| !id.is_empty())
            .map(capped);
        match (&identity.user, plain) {
            (Some(proven), Some(plain)) if proven.source.is_proof() && proven.id != plain => {
                count(Source::Header, "conflict");
                identity.conflict.get_or_insert(format!(
                    "the plain X-OpenWebUI-User-Id header names {plain:?}, but {} proves the user {:?}; whatever sets that header between Open WebUI and file-agent must stop",
                    proven.source.as_str(),
                    proven.id
                ));
            }
            (None, Some(plain)) if self.openwebui_jwt.is_none() => {
                identity.user = Some(User::new(&plain, Source::Header));
            }
            _ => {}
        }
    }
}

/// Verifies an OAuth access token and that it grants [`SCOPE_RUN`]; a refusal is counted.
async fn verify_oauth(
    oauth: &OAuth,
    token: &str,
) -> Result<crate::identity::oauth::Verified, Refusal> {
    let verified = oauth.verify(token).await.map_err(|refusal| {
        count(Source::OAuth, refusal.reason());
        Refusal::OAuth(refusal)
    })?;
    if !verified.scopes.iter().any(|scope| scope == SCOPE_RUN) {
        count(Source::OAuth, "insufficient_scope");
        return Err(Refusal::Scope(SCOPE_RUN));
    }
    Ok(verified)
}

/// The user Open WebUI's signed token names, put in `identity`; a refusal is counted, and
/// says what to set. Returns whether another proof may still name the user: only when no
/// token came at all.
fn signed_user(jwt: &OpenWebUiJwt, headers: &HeaderMap, identity: &mut Identity) -> bool {
    let refusal = match jwt.verify(text(headers, jwt.header()), crate::identity::now_seconds()) {
        Ok(user) => {
            identity.user = Some(user);
            return true;
        }
        Err(refusal) => refusal,
    };
    count(Source::OpenWebUiJwt, refusal.reason());
    let open = matches!(refusal, JwtRefusal::Missing { .. });
    if !open {
        // The token came and was refused: say so (never the token itself).
        tracing::warn!(
            reason = refusal.reason(),
            "Open WebUI's signed user token was not accepted: {refusal}"
        );
        identity.refused = Some(format!(
            "{}: {}",
            Source::OpenWebUiJwt.as_str(),
            refusal.reason()
        ));
    }
    identity.user_required = Some(format!(
        "{refusal}. In Open WebUI, set ENABLE_FORWARD_USER_INFO_HEADERS=true and FORWARD_USER_INFO_HEADER_JWT_SECRET to the value of FILE_AGENT_OPENWEBUI_USER_JWT_SECRET here."
    ));
    open
}

/// The user Open WebUI says the forwarded session token is: the user when none is proven yet,
/// a conflict when the signed token named someone else.
fn session_user(session: &crate::storage::openwebui::SessionUser, identity: &mut Identity) {
    let user = User {
        id: capped(session.id.trim()),
        name: session.name.as_deref().map(capped),
        email: session.email.as_deref().map(capped),
        role: session.role.as_deref().map(capped),
        source: Source::OpenWebUiSession,
        issuer: None,
    };
    match &identity.user {
        Some(signed) if signed.id != user.id => {
            count(Source::OpenWebUiSession, "conflict");
            identity.conflict = Some(format!(
                "Open WebUI's signed token names the user {:?}, but the session token sent with it is {:?}'s",
                signed.id, user.id
            ));
        }
        Some(_) => {}
        None => {
            identity.user = Some(user);
            identity.user_required = None;
        }
    }
}

/// Refuses to serve `listen` beyond loopback when no credential is configured (neither access
/// tokens nor an OAuth issuer): anyone who reached the port would run code, spend the model
/// key and store files. The `Host` check is no credential: any program sets the header it likes.
pub fn require_credential_beyond_loopback(
    listen: std::net::SocketAddr,
    tokens: &AccessTokens,
    config: &crate::config::Config,
) -> Result<(), String> {
    if listen.ip().is_loopback() || tokens.enabled() || config.identity.oauth.is_some() {
        return Ok(());
    }
    Err(format!(
        "refusing to listen on {listen} without a credential: every machine that reaches it could run code here. Set FILE_AGENT_ACCESS_TOKENS (e.g. `openssl rand -hex 32`; clients send it as `Authorization: Bearer` or `X-File-Agent-Key`) or FILE_AGENT_OAUTH_ISSUER, or listen on loopback only (FILE_AGENT_LISTEN=127.0.0.1:{}, the default)",
        listen.port()
    ))
}

/// Counts an identity of `source` refused for `reason` in `/metrics`.
fn count(source: Source, reason: &'static str) {
    crate::metrics::metrics().identity_refused(source.as_str(), reason);
}

/// The value of header `name`, trimmed, when it is text.
fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
}

/// Why the gate refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No credential, where one is needed.
    Missing,
    /// An access token that is not one of `FILE_AGENT_ACCESS_TOKENS`.
    InvalidToken,
    /// An OAuth token that did not verify.
    OAuth(OAuthRefusal),
    /// An OAuth token without the scope needed.
    Scope(&'static str),
}

impl Refusal {
    /// 401 (403 for a missing scope) with a `WWW-Authenticate` challenge that, when OAuth is
    /// on (`metadata_url`), names the scopes to sign in with and points at the
    /// protected-resource metadata, and a JSON body whose `error` says what to fix.
    pub fn response(&self, metadata_url: Option<&str>) -> Response {
        let mut challenge = CHALLENGE.to_string();
        let (status, message) = match self {
            Refusal::Missing => (
                StatusCode::UNAUTHORIZED,
                match metadata_url {
                    Some(_) => "a credential is required: sign in with the identity provider this server's protected-resource metadata names (an MCP client with OAuth support does so by itself), or send one of the server's access tokens as `Authorization: Bearer <token>` or in `X-File-Agent-Key`".to_string(),
                    None => TOKEN_REQUIRED.to_string(),
                },
            ),
            Refusal::InvalidToken => {
                challenge.push_str(", error=\"invalid_token\"");
                (StatusCode::UNAUTHORIZED, INVALID_TOKEN.to_string())
            }
            Refusal::OAuth(refusal) => {
                let message = refusal.to_string();
                challenge.push_str(&format!(
                    ", error=\"invalid_token\", error_description=\"{}\"",
                    quotable(&message)
                ));
                (StatusCode::UNAUTHORIZED, message)
            }
            Refusal::Scope(scope) => {
                challenge.push_str(&format!(
                    ", error=\"insufficient_scope\", scope=\"{scope}\""
                ));
                (
                    StatusCode::FORBIDDEN,
                    format!(
                        "the access token lacks the scope {scope}, which every call of this server needs; ask for it when signing in (scope={scope}), and have the identity provider's administrator grant it to the client"
                    ),
                )
            }
        };
        if let Some(url) = metadata_url {
            // The scopes to sign in with (RFC 6750 §3; MCP's "Scope Selection Strategy": a
            // client asks for what the challenge names, else for the metadata's whole list).
            // Both, as the metadata lists them: a token without the saved-tools scope never
            // sees the tools that need it, so a client has nothing to step up from.
            if !matches!(self, Refusal::Scope(_)) {
                challenge.push_str(&format!(", scope=\"{}\"", SCOPES.join(" ")));
            }
            challenge.push_str(&format!(", resource_metadata=\"{}\"", quotable(url)));
        }
        refusal(status, &challenge, &message)
    }
}

/// `text` as the inside of an RFC 6750 quoted string: printable ASCII without `"` and `\`.
fn quotable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            ' '..='~' => c,
            _ => '?',
        })
        .collect()
}

/// The middleware of `/mcp` and uploads: [`Gate::identify`], then the request with its
/// [`Identity`] in its extensions; or the refusal.
pub async fn admit(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    match gate.identify(request.headers_mut()).await {
        Ok(identity) => {
            request.extensions_mut().insert(identity);
            next.run(request).await
        }
        Err(refusal) => {
            tracing::info!(refusal = ?refusal, "request refused at the gate");
            let mut response = refusal.response(gate.metadata_url.as_deref());
            // The body was not read: the connection cannot carry another request.
            let has_body = request.headers().contains_key(header::TRANSFER_ENCODING)
                || request
                    .headers()
                    .get(header::CONTENT_LENGTH)
                    .is_some_and(|length| length != "0");
            if has_body {
                response.headers_mut().insert(
                    header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
            }
            response
        }
    }
}

/// `GET /.well-known/oauth-protected-resource[/mcp]` (RFC 9728): the resource, the issuers
/// that may sign its tokens, and its scopes. 404 while OAuth is off.
pub async fn resource_metadata(State(gate): State<Gate>) -> Response {
    let Some(oauth) = gate.oauth() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    (
        [(header::CACHE_CONTROL, "max-age=300")],
        axum::Json(json!({
            "resource": oauth.audience(),
            "authorization_servers": oauth.issuers(),
            "bearer_methods_supported": ["header"],
            "scopes_supported": crate::identity::SCOPES,
            "resource_name": "file-agent",
        })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_is_quotable_whatever_it_holds() {
        assert_eq!(quotable("alg \"none\"\\ é\n"), "alg 'none'/ ??");
    }

    #[test]
    fn a_refusal_points_at_the_metadata_when_oauth_is_on() {
        let url = "http://localhost:8000/.well-known/oauth-protected-resource/mcp";
        let response = Refusal::Missing.response(Some(url));
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers()[header::WWW_AUTHENTICATE],
            format!(
                "Bearer realm=\"file-agent\", scope=\"file-agent.run file-agent.saved-tools\", resource_metadata=\"{url}\""
            )
            .as_str()
        );
        // Without OAuth (access tokens only) no scope is named: there are none.
        let response = Refusal::Missing.response(None);
        assert_eq!(
            response.headers()[header::WWW_AUTHENTICATE],
            "Bearer realm=\"file-agent\""
        );
        let response = Refusal::Scope(SCOPE_RUN).response(Some(url));
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let challenge = response.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            challenge.contains("error=\"insufficient_scope\"")
                && challenge.contains("scope=\"file-agent.run\""),
            "{challenge}"
        );
        assert_eq!(challenge.matches("scope=").count(), 1, "{challenge}");
        let response = Refusal::OAuth(OAuthRefusal::Expired).response(None);
        let challenge = response.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            challenge.contains(
                "error=\"invalid_token\", error_description=\"the access token has expired"
            ),
            "{challenge}"
        );
        assert!(!challenge.contains("resource_metadata"), "{challenge}");
    }
}
