//! How file-agent learns who called: Open WebUI's signed user token
//! (`FILE_AGENT_OPENWEBUI_USER_JWT_*`) and OAuth 2.1 access tokens from an issuer
//! (`FILE_AGENT_OAUTH_*`). Parsing only; the verifiers live in `identity`.

use std::time::Duration;

use super::{ConfigError, Secret, Vars};

/// `FILE_AGENT_OPENWEBUI_USER_JWT_HEADER`: Open WebUI's `FORWARD_USER_INFO_HEADER_JWT` default.
pub const DEFAULT_OPENWEBUI_USER_JWT_HEADER: &str = "X-OpenWebUI-User-Jwt";
/// The shortest `FILE_AGENT_OPENWEBUI_USER_JWT_SECRET`: an HMAC key shorter than its hash
/// (32 bytes for SHA-256) is weaker than the signature (RFC 7518 §3.2).
pub const MIN_JWT_SECRET_BYTES: usize = 32;
/// `FILE_AGENT_OAUTH_USER_CLAIM`: the claim that names the user.
pub const DEFAULT_OAUTH_USER_CLAIM: &str = "sub";
/// `FILE_AGENT_OAUTH_FETCH_TIMEOUT`: seconds for one request for an issuer's metadata or keys.
pub const DEFAULT_OAUTH_FETCH_TIMEOUT_SECS: u64 = 5;

/// The identity sources beyond a plain header.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IdentityConfig {
    /// Open WebUI's signed user token, when its secret is set.
    pub openwebui_jwt: Option<OpenWebUiJwtConfig>,
    /// OAuth 2.1 access tokens, when an issuer is set.
    pub oauth: Option<OAuthConfig>,
}

/// Open WebUI's `X-OpenWebUI-User-Jwt` (`FORWARD_USER_INFO_HEADER_JWT_SECRET` on its side).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenWebUiJwtConfig {
    /// `FILE_AGENT_OPENWEBUI_USER_JWT_SECRET`: the HS256 key, trimmed as Open WebUI trims it.
    pub secret: Secret,
    /// `FILE_AGENT_OPENWEBUI_USER_JWT_HEADER`: the header it comes in.
    pub header: String,
}

/// File-agent as an OAuth 2.1 resource server (the MCP authorization specification).
#[derive(Debug, Clone, PartialEq)]
pub struct OAuthConfig {
    /// `FILE_AGENT_OAUTH_ISSUER`: the issuers whose tokens are accepted, each exactly as it
    /// writes its `iss` (a trailing slash counts).
    pub issuers: Vec<String>,
    /// `FILE_AGENT_OAUTH_AUDIENCE`: the resource a token must be issued for; `None` means the
    /// canonical URL of `/mcp` under `FILE_AGENT_PUBLIC_URL`, known once the server listens.
    pub audience: Option<String>,
    /// `FILE_AGENT_OAUTH_USER_CLAIM`: the claim that names the user.
    pub user_claim: String,
    /// `FILE_AGENT_OAUTH_FETCH_TIMEOUT`: one request for metadata or keys.
    pub fetch_timeout: Duration,
}

impl IdentityConfig {
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            openwebui_jwt: OpenWebUiJwtConfig::from_vars(vars)?,
            oauth: OAuthConfig::from_vars(vars)?,
        })
    }
}

impl OpenWebUiJwtConfig {
    /// `FILE_AGENT_OPENWEBUI_USER_JWT_SECRET` and the header that carries the token, when the
    /// secret is set.
    fn from_vars(vars: &Vars<'_>) -> Result<Option<Self>, ConfigError> {
        Ok(match vars.get("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET") {
            None => None,
            // Open WebUI strips the secret before it signs with it.
            Some(secret) if secret.trim().len() < MIN_JWT_SECRET_BYTES => {
                return Err(ConfigError {
                    var: "FILE_AGENT_OPENWEBUI_USER_JWT_SECRET",
                    value: "(hidden)".into(),
                    expected: format!(
                        "at least {MIN_JWT_SECRET_BYTES} characters, the same value as Open WebUI's FORWARD_USER_INFO_HEADER_JWT_SECRET (make one with `openssl rand -hex 32` and set it on both)"
                    ),
                });
            }
            Some(secret) => {
                super::refuse_placeholder("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET", &secret)?;
                Some(OpenWebUiJwtConfig {
                    secret: Secret::new(secret.trim()),
                    header: header_name(vars)?,
                })
            }
        })
    }
}

impl OAuthConfig {
    /// `FILE_AGENT_OAUTH_*`, when an issuer is set.
    fn from_vars(vars: &Vars<'_>) -> Result<Option<Self>, ConfigError> {
        Ok(match vars.get("FILE_AGENT_OAUTH_ISSUER") {
            None => None,
            Some(value) => Some(OAuthConfig {
                issuers: issuers(&value)?,
                audience: vars
                    .get("FILE_AGENT_OAUTH_AUDIENCE")
                    .map(|audience| audience.trim().to_string()),
                user_claim: claim_name(vars)?,
                fetch_timeout: vars.seconds(
                    "FILE_AGENT_OAUTH_FETCH_TIMEOUT",
                    DEFAULT_OAUTH_FETCH_TIMEOUT_SECS,
                    1..=60,
                )?,
            }),
        })
    }
}

/// `FILE_AGENT_OPENWEBUI_USER_JWT_HEADER`, a valid header name.
fn header_name(vars: &Vars<'_>) -> Result<String, ConfigError> {
    let value = vars
        .get("FILE_AGENT_OPENWEBUI_USER_JWT_HEADER")
        .unwrap_or_else(|| DEFAULT_OPENWEBUI_USER_JWT_HEADER.into());
    let name = value.trim();
    match http::HeaderName::from_bytes(name.as_bytes()) {
        Ok(_) => Ok(name.to_string()),
        Err(_) => Err(ConfigError {
            var: "FILE_AGENT_OPENWEBUI_USER_JWT_HEADER",
            value,
            expected:
                "an HTTP header name, the same as Open WebUI's FORWARD_USER_INFO_HEADER_JWT (default X-OpenWebUI-User-Jwt)"
                    .into(),
        }),
    }
}

/// `FILE_AGENT_OAUTH_ISSUER`: comma-separated https URLs (http only on a loopback host, for a
/// local issuer), kept exactly as written.
fn issuers(value: &str) -> Result<Vec<String>, ConfigError> {
    let bad = |expected: &str| ConfigError {
        var: "FILE_AGENT_OAUTH_ISSUER",
        value: value.to_string(),
        expected: expected.into(),
    };
    let mut issuers = Vec::new();
    for issuer in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let url = reqwest::Url::parse(issuer).map_err(|_| {
            bad("the issuer URLs, comma-separated, each exactly as the issuer writes `iss` (e.g. https://keycloak.example.com/realms/main)")
        })?;
        let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        let secure = url.scheme() == "https" || (url.scheme() == "http" && loopback);
        if !secure || url.query().is_some() || url.fragment().is_some() {
            return Err(bad(
                "https URLs without a query or fragment (RFC 8414; http only for an issuer on this host's loopback)",
            ));
        }
        issuers.push(issuer.to_string());
    }
    if issuers.is_empty() {
        return Err(bad("at least one issuer URL"));
    }
    Ok(issuers)
}

/// `FILE_AGENT_OAUTH_USER_CLAIM`: a claim name.
fn claim_name(vars: &Vars<'_>) -> Result<String, ConfigError> {
    let value = vars
        .get("FILE_AGENT_OAUTH_USER_CLAIM")
        .unwrap_or_else(|| DEFAULT_OAUTH_USER_CLAIM.into());
    let claim = value.trim();
    if claim.len() > 64 || claim.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ConfigError {
            var: "FILE_AGENT_OAUTH_USER_CLAIM",
            value,
            expected: "a claim name such as sub, preferred_username, email or oid".into(),
        });
    }
    Ok(claim.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(vars: &[(&str, &str)]) -> Result<IdentityConfig, ConfigError> {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        IdentityConfig::from_vars(&Vars::new(&lookup))
    }

    #[test]
    fn nothing_set_means_no_source_beyond_headers() {
        assert_eq!(identity(&[]).unwrap(), IdentityConfig::default());
    }

    #[test]
    fn the_openwebui_secret_is_trimmed_and_must_be_long() {
        let secret = "0123456789abcdef0123456789abcdef";
        let config = identity(&[(
            "FILE_AGENT_OPENWEBUI_USER_JWT_SECRET",
            &format!(" {secret}\n"),
        )])
        .unwrap();
        let jwt = config.openwebui_jwt.unwrap();
        assert_eq!(jwt.secret.expose(), secret);
        assert_eq!(jwt.header, DEFAULT_OPENWEBUI_USER_JWT_HEADER);
        let error =
            identity(&[("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET", "short-secret")]).unwrap_err();
        assert_eq!(error.var, "FILE_AGENT_OPENWEBUI_USER_JWT_SECRET");
        assert!(!error.to_string().contains("short-secret"), "{error}");
        assert!(error.expected.contains("openssl rand"), "{error}");
        let error = identity(&[
            ("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET", secret),
            ("FILE_AGENT_OPENWEBUI_USER_JWT_HEADER", "X Bad"),
        ])
        .unwrap_err();
        assert_eq!(error.var, "FILE_AGENT_OPENWEBUI_USER_JWT_HEADER");
    }

    #[test]
    fn issuers_are_kept_exactly_and_must_be_https_or_loopback() {
        let config = identity(&[(
            "FILE_AGENT_OAUTH_ISSUER",
            "https://tenant.auth0.com/, http://127.0.0.1:9000/realms/x",
        )])
        .unwrap();
        let oauth = config.oauth.unwrap();
        assert_eq!(
            oauth.issuers,
            [
                "https://tenant.auth0.com/",
                "http://127.0.0.1:9000/realms/x"
            ]
        );
        assert_eq!(oauth.user_claim, "sub");
        assert_eq!(oauth.audience, None);
        assert_eq!(oauth.fetch_timeout, Duration::from_secs(5));
        for bad in [
            "http://issuer.example.com",
            "https://issuer.example.com/?x=1",
            "not a url",
            ",",
        ] {
            let error = identity(&[("FILE_AGENT_OAUTH_ISSUER", bad)]).unwrap_err();
            assert_eq!(error.var, "FILE_AGENT_OAUTH_ISSUER", "{bad}");
        }
    }
}
