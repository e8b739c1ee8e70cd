//! Open WebUI's signed user token. With `ENABLE_FORWARD_USER_INFO_HEADERS` and
//! `FORWARD_USER_INFO_HEADER_JWT_SECRET` set, Open WebUI 0.12 sends one HS256 JWT
//! (`open_webui/utils/headers.py`, `_mint_forward_user_jwt`) in `X-OpenWebUI-User-Jwt` instead
//! of the plain `X-OpenWebUI-User-*` headers: claims `sub` (the user id), `email`, `name`,
//! `role`, `iss` = `open-webui`, `iat`, and `exp` = `iat` +
//! `FORWARD_USER_INFO_HEADER_JWT_EXPIRES_SECONDS` (300 by default), signed with the secret's
//! UTF-8 bytes after trimming.
//!
//! [`OpenWebUiJwt::verify`] accepts exactly that: HS256 only, the issuer `open-webui`, `exp`
//! required, `nbf` and `iat` (when present) not in the future, each with [`SKEW_SECS`] of clock
//! skew, and a non-empty `sub`.

use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};
use serde::Deserialize;

use super::{Source, User, capped};
use crate::config::OpenWebUiJwtConfig;

/// The issuer Open WebUI writes.
pub const ISSUER: &str = "open-webui";
/// Clock skew allowed on `exp`, `nbf` and `iat`, in seconds.
pub const SKEW_SECS: u64 = 60;
/// The largest token looked at; Open WebUI's are a few hundred bytes.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Why a signed user token was not accepted. Each message says what to check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtRefusal {
    /// No token came.
    #[error("the request carries no {header} header")]
    Missing {
        /// The header expected.
        header: String,
    },
    /// Larger than [`MAX_TOKEN_BYTES`].
    #[error("the {header} token is larger than {MAX_TOKEN_BYTES} bytes")]
    TooLarge {
        /// The header.
        header: String,
    },
    /// Not a JWT, or claims of the wrong type.
    #[error("the {header} token is not a JWT with Open WebUI's claims")]
    Malformed {
        /// The header.
        header: String,
    },
    /// Signed with another algorithm than HS256.
    #[error("the {header} token is signed with {alg:?}; only HS256 is accepted")]
    Algorithm {
        /// The header.
        header: String,
        /// The algorithm it named.
        alg: String,
    },
    /// The signature does not match the secret.
    #[error(
        "the {header} token's signature does not match FILE_AGENT_OPENWEBUI_USER_JWT_SECRET; it must equal Open WebUI's FORWARD_USER_INFO_HEADER_JWT_SECRET"
    )]
    Signature {
        /// The header.
        header: String,
    },
    /// `iss` is not `open-webui`.
    #[error("the {header} token's issuer is not {ISSUER:?}")]
    Issuer {
        /// The header.
        header: String,
    },
    /// Past `exp`.
    #[error(
        "the {header} token has expired. Open WebUI mints it once per chat turn, so a turn that runs longer than FORWARD_USER_INFO_HEADER_JWT_EXPIRES_SECONDS (300 by default) outlives it: raise that setting in Open WebUI (e.g. 3600), and check that the clocks of Open WebUI and file-agent agree"
    )]
    Expired {
        /// The header.
        header: String,
    },
    /// `nbf` or `iat` in the future.
    #[error(
        "the {header} token is not valid yet (issued in the future); check the clocks of Open WebUI and file-agent"
    )]
    NotYetValid {
        /// The header.
        header: String,
    },
}

impl JwtRefusal {
    /// The reason, as `/metrics` labels it.
    pub fn reason(&self) -> &'static str {
        match self {
            JwtRefusal::Missing { .. } => "missing",
            JwtRefusal::TooLarge { .. } => "too_large",
            JwtRefusal::Malformed { .. } => "malformed",
            JwtRefusal::Algorithm { .. } => "algorithm",
            JwtRefusal::Signature { .. } => "bad_signature",
            JwtRefusal::Issuer { .. } => "wrong_issuer",
            JwtRefusal::Expired { .. } => "expired",
            JwtRefusal::NotYetValid { .. } => "not_yet_valid",
        }
    }
}

/// The claims Open WebUI signs.
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    iat: Option<u64>,
    exp: u64,
}

/// The user-token lifetime IDENTITY.md advises (Open WebUI's
/// `FORWARD_USER_INFO_HEADER_JWT_EXPIRES_SECONDS`; 300 s by default there): a chat turn whose
/// calls go on past a token's life sends its later calls with an expired one, naming no user.
pub const ADVISED_LIFETIME_SECS: u64 = 3600;

/// The lifetime of a token issued at `iat` for `exp`, when it is shorter than advised.
fn short_lifetime(iat: Option<u64>, exp: u64) -> Option<u64> {
    let lifetime = exp.checked_sub(iat?)?;
    (lifetime < ADVISED_LIFETIME_SECS).then_some(lifetime)
}

/// Warns once per process when Open WebUI signs its user tokens for less than advised.
fn warn_if_short_lived(claims: &Claims) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Some(lifetime) = short_lifetime(claims.iat, claims.exp)
        && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(
            lifetime_s = lifetime,
            "Open WebUI signs its user tokens for {lifetime} s: a chat turn whose tool calls go on longer sends its later calls with an expired token, which names no user; set FORWARD_USER_INFO_HEADER_JWT_EXPIRES_SECONDS={ADVISED_LIFETIME_SECS} in Open WebUI"
        );
    }
}

/// The verifier of Open WebUI's signed user token.
#[derive(Clone)]
pub struct OpenWebUiJwt {
    key: DecodingKey,
    header: String,
    validation: Validation,
}

impl std::fmt::Debug for OpenWebUiJwt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenWebUiJwt")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl OpenWebUiJwt {
    /// The verifier of `config`'s secret.
    pub fn new(config: &OpenWebUiJwtConfig) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        validation.leeway = SKEW_SECS;
        validation.validate_nbf = true;
        // Open WebUI names no audience.
        validation.validate_aud = false;
        Self {
            key: DecodingKey::from_secret(config.secret.expose().as_bytes()),
            header: config.header.clone(),
            validation,
        }
    }

    /// The header the token comes in, as configured.
    pub fn header(&self) -> &str {
        &self.header
    }

    /// The user `token` names, if Open WebUI signed it with the shared secret and it is
    /// current at `now` (seconds since the epoch).
    pub fn verify(&self, token: Option<&str>, now: u64) -> Result<User, JwtRefusal> {
        let header = self.header.clone();
        let Some(token) = token.map(str::trim) else {
            return Err(JwtRefusal::Missing { header });
        };
        if token.len() > MAX_TOKEN_BYTES {
            return Err(JwtRefusal::TooLarge { header });
        }
        let Some(jwt_header) = super::unverified_header(token) else {
            return Err(JwtRefusal::Malformed { header });
        };
        if jwt_header.alg != "HS256" {
            return Err(JwtRefusal::Algorithm {
                header,
                alg: jwt_header.alg.chars().take(20).collect(),
            });
        }
        let claims = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation)
            .map_err(|error| refusal(error.kind(), &header))?
            .claims;
        if claims.iat.is_some_and(|iat| iat > now + SKEW_SECS) {
            return Err(JwtRefusal::NotYetValid { header });
        }
        if claims.sub.trim().is_empty() {
            return Err(JwtRefusal::Malformed { header });
        }
        warn_if_short_lived(&claims);
        Ok(user(claims))
    }
}

/// Why the token's signature or registered claims were refused.
fn refusal(error: &ErrorKind, header: &str) -> JwtRefusal {
    let header = header.to_string();
    match error {
        ErrorKind::InvalidSignature => JwtRefusal::Signature { header },
        ErrorKind::InvalidIssuer => JwtRefusal::Issuer { header },
        ErrorKind::ExpiredSignature => JwtRefusal::Expired { header },
        ErrorKind::ImmatureSignature => JwtRefusal::NotYetValid { header },
        _ => JwtRefusal::Malformed { header },
    }
}

/// The user the verified claims name, each field trimmed and capped (an empty one is none).
fn user(claims: Claims) -> User {
    let field = |value: Option<String>| value.map(|v| capped(v.trim())).filter(|v| !v.is_empty());
    User {
        id: capped(claims.sub.trim()),
        name: field(claims.name),
        email: field(claims.email),
        role: field(claims.role),
        source: Source::OpenWebUiJwt,
        issuer: None,
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    use super::*;
    use crate::config::Secret;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn verifier() -> OpenWebUiJwt {
        OpenWebUiJwt::new(&OpenWebUiJwtConfig {
            secret: Secret::new(SECRET),
            header: "X-OpenWebUI-User-Jwt".into(),
        })
    }

    /// Signed as Open WebUI 0.12's `_mint_forward_user_jwt` signs (PyJWT, HS256).
    fn minted(claims: serde_json::Value, secret: &str) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    }

    fn alice(now: u64) -> serde_json::Value {
        json!({"sub": "u-alice", "email": "alice@example.com", "name": "Alice", "role": "user",
               "iss": "open-webui", "iat": now, "exp": now + 300})
    }

    #[test]
    fn a_lifetime_shorter_than_advised_is_told_and_a_long_or_unknown_one_is_not() {
        assert_eq!(
            short_lifetime(Some(1000), 1300),
            Some(300),
            "Open WebUI's default"
        );
        assert_eq!(
            short_lifetime(Some(1000), 1000 + ADVISED_LIFETIME_SECS),
            None
        );
        assert_eq!(short_lifetime(None, 1300), None, "no iat: unknown");
        assert_eq!(short_lifetime(Some(2000), 1300), None, "exp before iat");
    }

    #[test]
    fn a_token_open_webui_minted_names_its_user() {
        let now = super::super::now_seconds();
        let user = verifier()
            .verify(Some(&minted(alice(now), SECRET)), now)
            .unwrap();
        assert_eq!(user.id, "u-alice");
        assert_eq!(user.name.as_deref(), Some("Alice"));
        assert_eq!(user.email.as_deref(), Some("alice@example.com"));
        assert_eq!(user.role.as_deref(), Some("user"));
        assert_eq!(user.source, Source::OpenWebUiJwt);
    }

    #[test]
    fn every_flaw_is_refused_with_its_reason() {
        let now = super::super::now_seconds();
        let verify = |token: &str| verifier().verify(Some(token), now).unwrap_err().reason();
        let with = |change: &dyn Fn(&mut serde_json::Value)| {
            let mut claims = alice(now);
            change(&mut claims);
            minted(claims, SECRET)
        };
        assert_eq!(
            verifier().verify(None, now).unwrap_err().reason(),
            "missing"
        );
        assert_eq!(
            verify(&minted(alice(now), "another-secret-of-enough-length!")),
            "bad_signature"
        );
        assert_eq!(verify(&with(&|c| c["iss"] = json!("evil"))), "wrong_issuer");
        assert_eq!(
            verify(&with(&|c| c["exp"] = json!(now - 61))),
            "expired",
            "past the minute of skew"
        );
        assert!(
            verifier()
                .verify(Some(&with(&|c| c["exp"] = json!(now - 30))), now)
                .is_ok(),
            "within the skew"
        );
        assert_eq!(
            verify(&with(&|c| c["iat"] = json!(now + 120))),
            "not_yet_valid"
        );
        assert_eq!(
            verify(&with(&|c| c["nbf"] = json!(now + 120))),
            "not_yet_valid"
        );
        assert_eq!(
            verify(&with(&|c| {
                c.as_object_mut().unwrap().remove("exp");
            })),
            "malformed"
        );
        assert_eq!(verify(&with(&|c| c["sub"] = json!(" "))), "malformed");
        assert_eq!(verify("not-a-jwt"), "malformed");
        assert_eq!(verify(&"a".repeat(MAX_TOKEN_BYTES + 1)), "too_large");
        // {"alg":"none","typ":"JWT"} with Alice's claims and no signature.
        let payload = minted(alice(now), SECRET);
        let unsigned = format!(
            "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.",
            payload.split('.').nth(1).unwrap()
        );
        assert_eq!(verify(&unsigned), "algorithm");
        let hs512 = jsonwebtoken::encode(
            &Header::new(Algorithm::HS512),
            &alice(now),
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        assert_eq!(verify(&hs512), "algorithm");
    }

    #[test]
    fn a_refusal_names_the_setting_to_check() {
        let now = super::super::now_seconds();
        let error = verifier()
            .verify(Some(&minted(alice(now), "x".repeat(40).as_str())), now)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET")
                && error.contains("FORWARD_USER_INFO_HEADER_JWT_SECRET"),
            "{error}"
        );
    }
}
