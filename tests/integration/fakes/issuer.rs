//! The tests' own OAuth 2.1 issuer, for what a real one will not do on request: sign an expired
//! token, one for another audience, one with a key it never published; serve a JWKS that hangs
//! or runs to 10 MB. It speaks RFC 8414 (`/.well-known/oauth-authorization-server`) and serves
//! its keys at `/jwks`, signing with the keys of `tests/fixtures/oauth/`. The happy path also
//! runs against a real issuer, Debian's glewlwyd (`tests/issuer/glewlwyd.sh`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// The fixtures' folder.
fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/oauth/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A signing key of the fixtures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// RSA 2048, `kid` "rsa-1" (RS256 and PS256).
    Rsa1,
    /// RSA 2048, `kid` "rsa-2": published only after [`FakeIssuer::rotate`].
    Rsa2,
    /// EC P-256, `kid` "ec" (ES256).
    Ec,
    /// Ed25519, `kid` "ed" (EdDSA).
    Ed,
}

impl Key {
    fn kid(self) -> &'static str {
        match self {
            Key::Rsa1 => "rsa-1",
            Key::Rsa2 => "rsa-2",
            Key::Ec => "ec",
            Key::Ed => "ed",
        }
    }

    fn encoding(self) -> EncodingKey {
        match self {
            Key::Rsa1 => EncodingKey::from_rsa_pem(&fixture("rsa-1.pem")).unwrap(),
            Key::Rsa2 => EncodingKey::from_rsa_pem(&fixture("rsa-2.pem")).unwrap(),
            Key::Ec => EncodingKey::from_ec_pem(&fixture("ec.pem")).unwrap(),
            Key::Ed => EncodingKey::from_ed_pem(&fixture("ed25519.pem")).unwrap(),
        }
    }

    /// The algorithm it signs with by default.
    pub fn algorithm(self) -> Algorithm {
        match self {
            Key::Rsa1 | Key::Rsa2 => Algorithm::RS256,
            Key::Ec => Algorithm::ES256,
            Key::Ed => Algorithm::EdDSA,
        }
    }

    /// Its public JWK, as an issuer publishes it: an RSA key without `alg` (so that it
    /// verifies RS256 and PS256), the others with theirs.
    fn jwk(self) -> Jwk {
        let mut jwk = Jwk::from_encoding_key(&self.encoding(), self.algorithm()).unwrap();
        if matches!(self, Key::Rsa1 | Key::Rsa2) {
            jwk.common.key_algorithm = None;
        }
        jwk.common.key_id = Some(self.kid().into());
        jwk.common.public_key_use = Some(jsonwebtoken::jwk::PublicKeyUse::Signature);
        jwk
    }
}

/// How the JWKS endpoint answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jwks {
    /// The published keys.
    Keys,
    /// Never: the request hangs.
    Hang,
    /// 10 MB of a JSON key set.
    Huge,
}

struct Inner {
    published: Vec<Key>,
    jwks: Jwks,
    fetches: usize,
}

/// The issuer; its URL is its `iss`.
#[derive(Clone)]
pub struct FakeIssuer {
    inner: Arc<Mutex<Inner>>,
    /// Its URL, the `iss` of its tokens.
    pub url: String,
}

impl FakeIssuer {
    /// An issuer publishing every key but [`Key::Rsa2`].
    pub async fn start() -> Self {
        let mut issuer = Self {
            inner: Arc::new(Mutex::new(Inner {
                published: vec![Key::Rsa1, Key::Ec, Key::Ed],
                jwks: Jwks::Keys,
                fetches: 0,
            })),
            url: String::new(),
        };
        let app = axum::Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/jwks", get(jwks))
            .with_state(issuer.clone());
        issuer.url = super::spawn(app).await;
        issuer
    }

    /// Publishes [`Key::Rsa2`] beside the others (a key rotation).
    pub fn rotate(&self) {
        self.inner.lock().unwrap().published.push(Key::Rsa2);
    }

    /// How the JWKS endpoint answers from now on.
    pub fn serve_jwks(&self, jwks: Jwks) {
        self.inner.lock().unwrap().jwks = jwks;
    }

    /// Requests of the JWKS so far.
    pub fn jwks_fetches(&self) -> usize {
        self.inner.lock().unwrap().fetches
    }

    /// Claims of a good token for `audience`, user `sub`, with `scope`, valid for 5 minutes.
    pub fn claims(&self, audience: &str, sub: &str, scope: &str) -> Value {
        let now = now();
        json!({"iss": self.url, "aud": audience, "sub": sub, "scope": scope,
               "iat": now, "nbf": now, "exp": now + 300, "client_id": "test-client"})
    }

    /// `claims` signed by `key` with its algorithm.
    pub fn sign(&self, key: Key, claims: &Value) -> String {
        self.sign_as(key, key.algorithm(), claims)
    }

    /// `claims` signed by `key` with `algorithm`, `typ` at+jwt (RFC 9068).
    pub fn sign_as(&self, key: Key, algorithm: Algorithm, claims: &Value) -> String {
        let mut header = Header::new(algorithm);
        header.kid = Some(key.kid().into());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, claims, &key.encoding()).unwrap()
    }
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The issuer's own URL, from the address the request came to (the router is built before
/// the port is known).
fn own_url(headers: &axum::http::HeaderMap) -> String {
    format!(
        "http://{}",
        headers
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
    )
}

async fn metadata(headers: axum::http::HeaderMap) -> Json<Value> {
    let url = own_url(&headers);
    Json(json!({
        "issuer": url,
        "jwks_uri": format!("{url}/jwks"),
        "token_endpoint": format!("{url}/token"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["client_credentials"],
    }))
}

async fn jwks(State(issuer): State<FakeIssuer>) -> Response {
    let (published, mode) = {
        let mut inner = issuer.inner.lock().unwrap();
        inner.fetches += 1;
        (inner.published.clone(), inner.jwks)
    };
    match mode {
        Jwks::Keys => Json(JwkSet {
            keys: published.into_iter().map(Key::jwk).collect(),
        })
        .into_response(),
        Jwks::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            ().into_response()
        }
        Jwks::Huge => {
            let key = serde_json::to_string(&Key::Rsa1.jwk()).unwrap();
            let mut body = String::from("{\"keys\": [");
            while body.len() < 10 * 1024 * 1024 {
                body.push_str(&key);
                body.push(',');
            }
            body.push_str(&key);
            body.push_str("]}");
            ([("content-type", "application/json")], body).into_response()
        }
    }
}
