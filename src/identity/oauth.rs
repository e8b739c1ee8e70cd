//! File-agent as an OAuth 2.1 resource server, as the MCP authorization specification asks:
//! a client (Claude Desktop, VS Code, an agent, Open WebUI's "OAuth 2.1" connection) gets an
//! access token from an issuer the operator named (`FILE_AGENT_OAUTH_ISSUER`) and sends it as
//! `Authorization: Bearer`; [`OAuth::verify`] checks it and names the user.
//!
//! A token is accepted when all of these hold, checked in this order, each refusal with its
//! reason ([`OAuthRefusal`]):
//! - it is at most [`MAX_TOKEN_BYTES`], and a JWT (RFC 9068 access tokens are);
//! - its header's `alg` is in [`ALGORITHMS`] (never `none`, never an HMAC: an issuer's key is
//!   public, so an HS256 token "signed" with it proves nothing);
//! - its `iss` is one of the configured issuers, exactly;
//! - it is signed by a key of that issuer's JWKS whose type fits the algorithm, chosen by
//!   `kid`. The JWKS is found through the issuer's RFC 8414 metadata or its OpenID Connect
//!   discovery document (whose `issuer` must be the issuer itself), kept for [`KEYS_TTL`], and
//!   fetched again when a token names a `kid` it does not hold (a key rotation), at most once
//!   per [`REFETCH_MIN_INTERVAL`]. Every fetch is bounded by `FILE_AGENT_OAUTH_FETCH_TIMEOUT`
//!   and [`MAX_DOCUMENT_BYTES`], follows no redirect, and an issuer's key check waits for one
//!   fetch at a time;
//! - `aud` holds this server's resource (RFC 8707: `FILE_AGENT_OAUTH_AUDIENCE`, by default the
//!   URL of `/mcp`); `exp` is in the future and `nbf` in the past, each with [`SKEW_SECS`];
//! - the user claim (`FILE_AGENT_OAUTH_USER_CLAIM`, `sub` by default) is a non-empty string.
//!
//! The token itself is never kept, logged or passed on; only its digest-free verdict is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};
use serde_json::{Map, Value};

use super::{JwtHeader, Source, User, capped};
use crate::config::OAuthConfig;
use crate::storage::{CappedRead, read_capped};

/// The signature algorithms accepted.
pub const ALGORITHMS: [&str; 4] = ["RS256", "PS256", "ES256", "EdDSA"];
/// The largest access token looked at (Entra's and Keycloak's are 1-4 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The largest metadata document or JWKS read from an issuer.
pub const MAX_DOCUMENT_BYTES: u64 = 256 * 1024;
/// Keys of a JWKS looked at; the rest are ignored.
pub const MAX_KEYS: usize = 32;
/// How long an issuer's keys are used before they are fetched again.
pub const KEYS_TTL: Duration = Duration::from_secs(15 * 60);
/// The shortest time between two fetches of one issuer's keys, so that tokens naming unknown
/// keys cannot make the server hammer the issuer.
pub const REFETCH_MIN_INTERVAL: Duration = Duration::from_secs(10);
/// Clock skew allowed on `exp` and `nbf`, in seconds.
pub const SKEW_SECS: u64 = 30;

/// Why an access token was not accepted. Each message says what is wrong and what to check;
/// none holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthRefusal {
    /// Larger than [`MAX_TOKEN_BYTES`].
    #[error("the access token is larger than {MAX_TOKEN_BYTES} bytes")]
    TooLarge,
    /// Not a JWT.
    #[error(
        "the access token is not a JWT; configure the issuer to issue JWT access tokens (RFC 9068) for this resource"
    )]
    Malformed,
    /// An algorithm outside [`ALGORITHMS`].
    #[error("the access token is signed with {alg:?}; accepted: RS256, PS256, ES256, EdDSA")]
    Algorithm {
        /// The algorithm it named.
        alg: String,
    },
    /// `iss` is not a configured issuer.
    #[error(
        "the access token's issuer {issuer:?} is not one this server accepts (FILE_AGENT_OAUTH_ISSUER)"
    )]
    Issuer {
        /// The `iss` it named (cut short).
        issuer: String,
    },
    /// The issuer's keys could not be fetched.
    #[error("the signing keys of {issuer} could not be fetched ({detail}); try again later")]
    KeysUnavailable {
        /// The issuer.
        issuer: String,
        /// What went wrong.
        detail: String,
    },
    /// No key of the issuer fits the token.
    #[error("the access token's signing key {kid:?} is not among its issuer's keys")]
    UnknownKey {
        /// The `kid` it named.
        kid: String,
    },
    /// The signature does not verify.
    #[error("the access token's signature does not verify with its issuer's keys")]
    Signature,
    /// `aud` does not hold this resource.
    #[error(
        "the access token was not issued for this server: its audience must include {audience} (request it with resource={audience}, or set FILE_AGENT_OAUTH_AUDIENCE)"
    )]
    Audience {
        /// This server's resource.
        audience: String,
    },
    /// Past `exp`.
    #[error("the access token has expired; get a new one")]
    Expired,
    /// Before `nbf`.
    #[error("the access token is not valid yet; check the clocks")]
    NotYetValid,
    /// A required claim is missing or of the wrong type.
    #[error("the access token lacks the claim {claim:?} (or it is not a string)")]
    Claim {
        /// The claim.
        claim: String,
    },
}

impl OAuthRefusal {
    /// The reason, as `/metrics` labels it.
    pub fn reason(&self) -> &'static str {
        match self {
            OAuthRefusal::TooLarge => "too_large",
            OAuthRefusal::Malformed => "malformed",
            OAuthRefusal::Algorithm { .. } => "algorithm",
            OAuthRefusal::Issuer { .. } => "wrong_issuer",
            OAuthRefusal::KeysUnavailable { .. } => "keys_unavailable",
            OAuthRefusal::UnknownKey { .. } => "unknown_key",
            OAuthRefusal::Signature => "bad_signature",
            OAuthRefusal::Audience { .. } => "wrong_audience",
            OAuthRefusal::Expired => "expired",
            OAuthRefusal::NotYetValid => "not_yet_valid",
            OAuthRefusal::Claim { .. } => "missing_claim",
        }
    }
}

/// An accepted token: its user and scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The user it names.
    pub user: User,
    /// Its scopes (`scope`, or `scp` as some issuers write it).
    pub scopes: Vec<String>,
}

/// One issuer's keys, as last fetched.
#[derive(Default)]
struct Keys {
    keys: Vec<Jwk>,
    fetched_at: Option<Instant>,
    tried_at: Option<Instant>,
    last_error: Option<String>,
}

impl Keys {
    fn may_fetch(&self) -> bool {
        self.tried_at
            .is_none_or(|at| at.elapsed() >= REFETCH_MIN_INTERVAL)
    }
}

/// One configured issuer and its key cache. The lock is held across a fetch, so that a burst
/// of tokens waits for one fetch instead of starting many.
struct Issuer {
    url: String,
    keys: tokio::sync::Mutex<Keys>,
}

/// What `doctor` learns of one issuer.
#[derive(Debug, Clone)]
pub struct IssuerCheck {
    /// The issuer.
    pub issuer: String,
    /// The metadata document that answered, and its JWKS URL.
    pub metadata: Result<(String, String), String>,
    /// The keys found that can verify a token: `kid (kty)`.
    pub keys: Result<Vec<String>, String>,
}

/// The verifier of access tokens.
#[derive(Clone)]
pub struct OAuth {
    issuers: Arc<Vec<Issuer>>,
    audience: String,
    user_claim: String,
    http: reqwest::Client,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("issuers", &self.issuers())
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl OAuth {
    /// The verifier of `config`; `default_audience` is the canonical URL of `/mcp` (used when
    /// `FILE_AGENT_OAUTH_AUDIENCE` is unset). Sends nothing yet.
    pub fn new(config: &OAuthConfig, default_audience: &str) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(config.fetch_timeout)
            .connect_timeout(config.fetch_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            issuers: Arc::new(
                config
                    .issuers
                    .iter()
                    .map(|url| Issuer {
                        url: url.clone(),
                        keys: tokio::sync::Mutex::default(),
                    })
                    .collect(),
            ),
            audience: config
                .audience
                .clone()
                .unwrap_or_else(|| default_audience.to_string()),
            user_claim: config.user_claim.clone(),
            http,
        })
    }

    /// The issuers, as configured.
    pub fn issuers(&self) -> Vec<String> {
        self.issuers
            .iter()
            .map(|issuer| issuer.url.clone())
            .collect()
    }

    /// The resource a token must be issued for.
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// Whether `token` claims (unverified) to come from one of the configured issuers: the
    /// bearer is then this verifier's to judge, not a token to forward to Open WebUI.
    pub fn claims_to_be_ours(&self, token: &str) -> bool {
        super::unverified_claims(token, MAX_TOKEN_BYTES)
            .and_then(|claims| claims.get("iss")?.as_str().map(str::to_string))
            .is_some_and(|iss| self.issuers.iter().any(|issuer| issuer.url == iss))
    }

    /// Fetches every issuer's keys once, so that the first call does not wait for them.
    pub async fn warm_up(&self) {
        for issuer in self.issuers.iter() {
            let mut keys = issuer.keys.lock().await;
            if keys.fetched_at.is_none() && keys.may_fetch() {
                self.refresh(&issuer.url, &mut keys).await;
            }
        }
    }

    /// The user and scopes of `token`, if it passes every check in the module's doc.
    pub async fn verify(&self, token: &str) -> Result<Verified, OAuthRefusal> {
        let token = token.trim();
        if token.len() > MAX_TOKEN_BYTES {
            return Err(OAuthRefusal::TooLarge);
        }
        let header = super::unverified_header(token).ok_or(OAuthRefusal::Malformed)?;
        let algorithm = algorithm(&header.alg)?;
        let claims =
            super::unverified_claims(token, MAX_TOKEN_BYTES).ok_or(OAuthRefusal::Malformed)?;
        let claimed = claims
            .get("iss")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let issuer = self
            .issuers
            .iter()
            .find(|issuer| issuer.url == claimed)
            .ok_or_else(|| OAuthRefusal::Issuer {
                issuer: claimed.chars().take(100).collect(),
            })?;
        let candidates = self.keys_for(issuer, &header).await?;
        let validation = self.validation(algorithm, &issuer.url);
        let mut refusal = OAuthRefusal::Signature;
        for key in &candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation) {
                Ok(data) => return self.accepted(&issuer.url, data.claims),
                Err(error) => match self.claims_refusal(error.kind(), claimed) {
                    None => continue,
                    Some(claims_refused) => {
                        // The signature held: the claims decided.
                        refusal = claims_refused;
                        break;
                    }
                },
            }
        }
        Err(refusal)
    }

    /// The checks of the registered claims: the issuer, this server as the audience, `exp`,
    /// `iss` and `aud` required, `nbf` checked, with [`SKEW_SECS`] of leeway.
    fn validation(&self, algorithm: Algorithm, issuer: &str) -> Validation {
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = SKEW_SECS;
        validation.validate_nbf = true;
        validation
    }

    /// Why a token whose signature held under a key was refused by its claims; `None` when
    /// the key did not verify the signature (the next key is tried).
    fn claims_refusal(&self, error: &ErrorKind, claimed: &str) -> Option<OAuthRefusal> {
        Some(match error {
            ErrorKind::InvalidSignature
            | ErrorKind::InvalidAlgorithm
            | ErrorKind::InvalidKeyFormat
            | ErrorKind::InvalidEcdsaKey
            | ErrorKind::InvalidRsaKey(_) => return None,
            ErrorKind::ExpiredSignature => OAuthRefusal::Expired,
            ErrorKind::ImmatureSignature => OAuthRefusal::NotYetValid,
            ErrorKind::InvalidAudience => OAuthRefusal::Audience {
                audience: self.audience.clone(),
            },
            ErrorKind::InvalidIssuer => OAuthRefusal::Issuer {
                issuer: claimed.chars().take(100).collect(),
            },
            ErrorKind::MissingRequiredClaim(claim) => OAuthRefusal::Claim {
                claim: claim.clone(),
            },
            _ => OAuthRefusal::Malformed,
        })
    }

    /// The verdict on claims whose signature and registered claims held.
    fn accepted(&self, issuer: &str, claims: Map<String, Value>) -> Result<Verified, OAuthRefusal> {
        let text = |name: &str| {
            claims
                .get(name)
                .and_then(Value::as_str)
                .map(|v| capped(v.trim()))
                .filter(|v| !v.is_empty())
        };
        let id = match claims.get(&self.user_claim) {
            Some(Value::Number(number)) => Some(number.to_string()),
            _ => text(&self.user_claim),
        }
        .ok_or_else(|| OAuthRefusal::Claim {
            claim: self.user_claim.clone(),
        })?;
        let scopes = match claims.get("scope").or_else(|| claims.get("scp")) {
            Some(Value::String(scopes)) => scopes.split_whitespace().map(str::to_string).collect(),
            Some(Value::Array(scopes)) => scopes
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        };
        Ok(Verified {
            user: User {
                id,
                name: text("name").or_else(|| text("preferred_username")),
                email: text("email"),
                role: None,
                source: Source::OAuth,
                issuer: Some(issuer.to_string()),
            },
            scopes,
        })
    }

    /// The keys of `issuer` that may have signed a token with `header`: fetched when none are
    /// held or they are older than [`KEYS_TTL`], and again when none fits (a rotation), each
    /// fetch at most once per [`REFETCH_MIN_INTERVAL`].
    async fn keys_for(
        &self,
        issuer: &Issuer,
        header: &JwtHeader,
    ) -> Result<Vec<DecodingKey>, OAuthRefusal> {
        let mut keys = issuer.keys.lock().await;
        let stale = keys.fetched_at.is_none_or(|at| at.elapsed() > KEYS_TTL);
        if stale && keys.may_fetch() {
            self.refresh(&issuer.url, &mut keys).await;
        }
        let mut fitting = fitting_keys(&keys.keys, header);
        if fitting.is_empty() && keys.may_fetch() {
            self.refresh(&issuer.url, &mut keys).await;
            fitting = fitting_keys(&keys.keys, header);
        }
        if !fitting.is_empty() {
            return Ok(fitting);
        }
        if keys.keys.is_empty() {
            return Err(OAuthRefusal::KeysUnavailable {
                issuer: issuer.url.clone(),
                detail: keys
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "its key set is empty".into()),
            });
        }
        Err(OAuthRefusal::UnknownKey {
            kid: header
                .kid
                .as_deref()
                .unwrap_or("(none)")
                .chars()
                .take(100)
                .collect(),
        })
    }

    /// Fetches the keys of `issuer` into `keys`; on failure the keys held stay (an issuer that
    /// is down for a moment does not lock everyone out) and the error is kept for the refusal.
    async fn refresh(&self, issuer: &str, keys: &mut Keys) {
        keys.tried_at = Some(Instant::now());
        match self.fetch_keys(issuer).await {
            Ok((_, fetched)) => {
                tracing::info!(
                    issuer,
                    keys = fetched.len(),
                    "fetched the OAuth issuer's signing keys"
                );
                keys.keys = fetched;
                keys.fetched_at = Some(Instant::now());
                keys.last_error = None;
            }
            Err(error) => {
                tracing::warn!(issuer, %error, "could not fetch the OAuth issuer's signing keys");
                keys.last_error = Some(error);
            }
        }
    }

    /// The JWKS URL of `issuer` (from its metadata) and its keys.
    async fn fetch_keys(&self, issuer: &str) -> Result<(String, Vec<Jwk>), String> {
        let (_, jwks_uri) = self.metadata(issuer).await?;
        let jwks = self.fetch_json(&jwks_uri).await?;
        let keys: Vec<Jwk> = jwks
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("{jwks_uri} is not a JWK set (no \"keys\" array)"))?
            .iter()
            .take(MAX_KEYS)
            // A key of a kind this server does not use (an encryption key, an unknown
            // algorithm) is skipped, not a reason to refuse the whole set.
            .filter_map(|key| serde_json::from_value(key.clone()).ok())
            .collect();
        Ok((jwks_uri, keys))
    }

    /// The first metadata document of `issuer` that answers (RFC 8414, then OpenID Connect
    /// discovery, in the order the MCP specification gives) whose `issuer` is `issuer`
    /// exactly: its URL and its `jwks_uri`.
    async fn metadata(&self, issuer: &str) -> Result<(String, String), String> {
        let mut errors = Vec::new();
        for url in metadata_urls(issuer) {
            match self.fetch_json(&url).await {
                Ok(document) => {
                    let named = document.get("issuer").and_then(Value::as_str);
                    if named != Some(issuer) {
                        return Err(format!(
                            "{url} names the issuer {:?}, not {issuer:?} (RFC 8414 §3.3)",
                            named.unwrap_or_default()
                        ));
                    }
                    let jwks_uri = document
                        .get("jwks_uri")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("{url} has no jwks_uri"))?;
                    if issuer.starts_with("https:") && !jwks_uri.starts_with("https:") {
                        return Err(format!("{url} gives a jwks_uri that is not https"));
                    }
                    return Ok((url, jwks_uri.to_string()));
                }
                Err(error) => errors.push(error),
            }
        }
        Err(errors.join("; "))
    }

    /// `url` as a JSON object, within the time and size bounds.
    async fn fetch_json(&self, url: &str) -> Result<Map<String, Value>, String> {
        let response = self
            .http
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|error| format!("{url}: {}", describe(&error)))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status().as_u16()));
        }
        let bytes =
            read_capped(response, MAX_DOCUMENT_BYTES)
                .await
                .map_err(|error| match error {
                    CappedRead::TooLarge => {
                        format!("{url}: larger than {} KiB", MAX_DOCUMENT_BYTES / 1024)
                    }
                    CappedRead::Transport(error) => format!("{url}: {}", describe(&error)),
                })?;
        serde_json::from_slice(&bytes).map_err(|_| format!("{url}: not a JSON object"))
    }

    /// Each issuer's metadata and keys, fetched now (for `doctor`).
    pub async fn check(&self) -> Vec<IssuerCheck> {
        let mut checks = Vec::new();
        for issuer in self.issuers.iter() {
            let metadata = self.metadata(&issuer.url).await;
            let keys = match &metadata {
                Ok(_) => self.fetch_keys(&issuer.url).await.map(|(_, keys)| {
                    keys.iter()
                        .filter(|key| {
                            ALGORITHMS.iter().any(|alg| {
                                let header = JwtHeader {
                                    alg: (*alg).to_string(),
                                    kid: None,
                                };
                                !fitting_keys(std::slice::from_ref(*key), &header).is_empty()
                            })
                        })
                        .map(|key| {
                            format!(
                                "{} ({})",
                                key.common.key_id.as_deref().unwrap_or("no kid"),
                                key_type(key)
                            )
                        })
                        .collect()
                }),
                Err(error) => Err(error.clone()),
            };
            checks.push(IssuerCheck {
                issuer: issuer.url.clone(),
                metadata,
                keys,
            });
        }
        checks
    }
}

/// A reqwest error in a few words (a timeout says so).
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "timed out (FILE_AGENT_OAUTH_FETCH_TIMEOUT)".into()
    } else if error.is_connect() {
        "cannot connect".into()
    } else {
        crate::error_chain(error)
    }
}

/// Where the metadata of `issuer` may be, in the order to try: RFC 8414's well-known URI
/// inserted before the issuer's path, OpenID Connect's inserted there, and OpenID Connect's
/// appended to the path (for an issuer without a path, the last two are the same).
pub fn metadata_urls(issuer: &str) -> Vec<String> {
    let (origin, path) = match issuer.find("://").map(|at| at + 3) {
        Some(start) => match issuer[start..].find('/') {
            Some(slash) => issuer.split_at(start + slash),
            None => (issuer, ""),
        },
        None => (issuer, ""),
    };
    let path = path.trim_end_matches('/');
    let mut urls = vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
        format!("{origin}{path}/.well-known/openid-configuration"),
    ];
    urls.dedup();
    urls
}

/// The keys of `keys` that may verify a token with `header`: by `kid` when it names one (else
/// every key), for signing, of the type the algorithm needs, and of that algorithm when the
/// key says which. HMAC keys never fit.
fn fitting_keys(keys: &[Jwk], header: &JwtHeader) -> Vec<DecodingKey> {
    keys.iter()
        .filter(|key| header.kid.is_none() || key.common.key_id.as_deref() == header.kid.as_deref())
        .filter(|key| {
            key.common
                .public_key_use
                .as_ref()
                .is_none_or(|usage| *usage == PublicKeyUse::Signature)
        })
        .filter(|key| {
            key.common
                .key_algorithm
                .is_none_or(|alg| key_algorithm_name(alg) == Some(header.alg.as_str()))
        })
        .filter(|key| match (&key.algorithm, header.alg.as_str()) {
            (AlgorithmParameters::RSA(_), "RS256" | "PS256") => true,
            (AlgorithmParameters::EllipticCurve(ec), "ES256") => ec.curve == EllipticCurve::P256,
            (AlgorithmParameters::OctetKeyPair(okp), "EdDSA") => {
                okp.curve == EllipticCurve::Ed25519
            }
            _ => false,
        })
        .filter_map(|key| DecodingKey::from_jwk(key).ok())
        .collect()
}

/// The name of a JWK's `alg`, for the algorithms accepted.
fn key_algorithm_name(alg: KeyAlgorithm) -> Option<&'static str> {
    match alg {
        KeyAlgorithm::RS256 => Some("RS256"),
        KeyAlgorithm::PS256 => Some("PS256"),
        KeyAlgorithm::ES256 => Some("ES256"),
        KeyAlgorithm::EdDSA => Some("EdDSA"),
        _ => None,
    }
}

/// A JWK's type, for `doctor`.
fn key_type(key: &Jwk) -> &'static str {
    match key.algorithm {
        AlgorithmParameters::RSA(_) => "RSA",
        AlgorithmParameters::EllipticCurve(_) => "EC",
        AlgorithmParameters::OctetKeyPair(_) => "OKP",
        AlgorithmParameters::OctetKey(_) => "oct",
        _ => "other",
    }
}

/// The signing algorithm a token's header names, of those accepted (asymmetric only: RS256,
/// PS256, ES256, EdDSA).
fn algorithm(alg: &str) -> Result<Algorithm, OAuthRefusal> {
    match alg {
        "RS256" => Ok(Algorithm::RS256),
        "PS256" => Ok(Algorithm::PS256),
        "ES256" => Ok(Algorithm::ES256),
        "EdDSA" => Ok(Algorithm::EdDSA),
        other => Err(OAuthRefusal::Algorithm {
            alg: other.chars().take(20).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_looked_for_where_the_mcp_specification_says() {
        assert_eq!(
            metadata_urls("https://idp.example.com"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server",
                "https://idp.example.com/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("https://idp.example.com/realms/main"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server/realms/main",
                "https://idp.example.com/.well-known/openid-configuration/realms/main",
                "https://idp.example.com/realms/main/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("https://tenant.auth0.com/")[0],
            "https://tenant.auth0.com/.well-known/oauth-authorization-server"
        );
    }

    #[test]
    fn only_signing_keys_of_the_algorithms_type_fit() {
        let keys: Vec<Jwk> = serde_json::from_value(serde_json::json!([
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "kid": "rsa", "use": "sig", "alg": "RS256", "n": "AQAB", "e": "AQAB"},
            {"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}
        ]))
        .unwrap();
        let header = |alg: &str, kid: Option<&str>| JwtHeader {
            alg: alg.into(),
            kid: kid.map(str::to_string),
        };
        assert_eq!(fitting_keys(&keys, &header("RS256", Some("rsa"))).len(), 1);
        assert_eq!(fitting_keys(&keys, &header("RS256", None)).len(), 1);
        assert_eq!(
            fitting_keys(&keys, &header("PS256", Some("rsa"))).len(),
            0,
            "the key says RS256"
        );
        assert_eq!(fitting_keys(&keys, &header("RS256", Some("enc"))).len(), 0);
        assert_eq!(fitting_keys(&keys, &header("HS256", Some("hmac"))).len(), 0);
        assert_eq!(fitting_keys(&keys, &header("EdDSA", None)).len(), 1);
        assert_eq!(fitting_keys(&keys, &header("ES256", Some("rsa"))).len(), 0);
    }
}
