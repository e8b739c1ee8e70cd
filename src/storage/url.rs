//! Fetching a document by URL for `data_analysis_tool` (a presigned S3 link, say), as a
//! server-side request forgery risk handled on purpose:
//!
//! - `http` and `https` only, no proxy from the environment (the checks below would not apply
//!   to what a proxy connects to);
//! - every host, redirects included, must pass `FILE_AGENT_URL_ALLOWED_HOSTS` when it is set;
//! - every address a host resolves to must be global unicast (the IANA special-purpose
//!   registries' "globally reachable", in `special.rs`), or in `FILE_AGENT_URL_ALLOWED_NETWORKS`.
//!   The check sits in the DNS resolver reqwest connects with, so the address checked is the
//!   address used (no second lookup for a rebinding DNS server to answer differently); an IP
//!   literal is checked before the request, since reqwest does not resolve those;
//! - redirects are followed by hand, at most `FILE_AGENT_URL_MAX_REDIRECTS`, each hop checked;
//! - the body is capped in bytes while it streams, and the whole fetch in time.
//!
//! A message shows a URL's scheme, host, port and path only: never its user information or
//! its query (a presigned URL's signature is a credential), not even for a link that does not
//! parse. This module logs nothing itself; its errors are logged as the tool's result.

mod special;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use thiserror::Error;

use self::special::{NonPublic, non_public};
use super::{CappedRead, Download, read_capped};
use crate::config::{TransferLimits, UrlFetchConfig};

/// Why a document URL was not fetched. Each message says what to do; none shows a query string.
#[derive(Debug, Error)]
pub enum FetchError {
    /// Not an absolute http(s) URL.
    #[error("{url:?} is not a document URL: {why}; pass an http:// or https:// link to the file")]
    BadUrl {
        /// What was given (without its query).
        url: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The policy refuses the host or its address.
    #[error("refused to fetch {url}: {reason}")]
    Refused {
        /// The URL (without its query).
        url: String,
        /// Why, and which setting allows it.
        reason: String,
    },
    /// More redirects than allowed.
    #[error(
        "{url} redirected more than {max} times; pass the final link (FILE_AGENT_URL_MAX_REDIRECTS)"
    )]
    TooManyRedirects {
        /// The first URL (without its query).
        url: String,
        /// The limit.
        max: usize,
    },
    /// The server answered with an error status.
    #[error("{url} answered HTTP {status}{hint}")]
    Status {
        /// The URL (without its query).
        url: String,
        /// The status.
        status: u16,
        /// What it likely means.
        hint: &'static str,
    },
    /// Bigger than `FILE_AGENT_INPUT_MAX_MIB`.
    #[error(
        "the document at {url} is larger than the {limit_mib} MiB allowed for inputs (FILE_AGENT_INPUT_MAX_MIB)"
    )]
    TooLarge {
        /// The URL (without its query).
        url: String,
        /// The cap in MiB.
        limit_mib: u64,
    },
    /// Slower than `FILE_AGENT_DOWNLOAD_TIMEOUT`.
    #[error(
        "fetching {url} took longer than {after:?} (FILE_AGENT_DOWNLOAD_TIMEOUT); try again or raise the limit"
    )]
    Timeout {
        /// The URL (without its query).
        url: String,
        /// The limit.
        after: Duration,
    },
    /// No connection, or it broke.
    #[error("cannot fetch {url}: {detail}; check that the link works from the server")]
    Unreachable {
        /// The URL (without its query).
        url: String,
        /// The transport error.
        detail: String,
    },
}

/// Fetches documents by URL under the configured policy.
#[derive(Debug, Clone)]
pub struct UrlFetcher {
    client: reqwest::Client,
    policy: Arc<UrlFetchConfig>,
    limits: TransferLimits,
}

impl UrlFetcher {
    /// A fetcher with its own HTTP client (no proxy, no automatic redirects, guarded DNS).
    pub fn new(policy: UrlFetchConfig, limits: TransferLimits) -> Result<Self, FetchError> {
        let policy = Arc::new(policy);
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardedResolver {
                policy: policy.clone(),
            }))
            .connect_timeout(limits.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("file-agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| FetchError::Unreachable {
                url: String::new(),
                detail: format!("cannot build the HTTP client: {error}"),
            })?;
        Ok(Self {
            client,
            policy,
            limits,
        })
    }

    /// Fetches `url`; the name is `name` if given, else the URL path's last segment.
    pub async fn fetch(&self, url: &str, name: Option<&str>) -> Result<Download, FetchError> {
        let first = parse(url)?;
        let shown = redact(&first);
        let after = self.limits.timeout;
        match tokio::time::timeout(after, self.follow(first, name)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout { url: shown, after }),
        }
    }

    async fn follow(&self, first: Url, name: Option<&str>) -> Result<Download, FetchError> {
        let mut url = first.clone();
        for _hop in 0..=self.policy.max_redirects {
            self.check(&url)?;
            let response = self
                .client
                .get(url.clone())
                .send()
                .await
                .map_err(|error| transport_error(&url, &error))?;
            let status = response.status();
            if status.is_redirection() {
                url = redirect(&url, &response)?;
                continue;
            }
            if !status.is_success() {
                return Err(FetchError::Status {
                    url: redact(&url),
                    status: status.as_u16(),
                    hint: status_hint(status.as_u16()),
                });
            }
            return self.download(&first, &url, name, response).await;
        }
        Err(FetchError::TooManyRedirects {
            url: redact(&first),
            max: self.policy.max_redirects,
        })
    }

    /// Reads the document at `url` (reached from `first`) within the size cap: its bytes, its
    /// content type, and its name (`name` if given, else the first URL's last segment).
    async fn download(
        &self,
        first: &Url,
        url: &Url,
        name: Option<&str>,
        response: reqwest::Response,
    ) -> Result<Download, FetchError> {
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        let bytes =
            read_capped(response, self.limits.max_bytes)
                .await
                .map_err(|error| match error {
                    CappedRead::TooLarge => FetchError::TooLarge {
                        url: redact(url),
                        limit_mib: self.limits.max_bytes / crate::config::MIB,
                    },
                    CappedRead::Transport(error) => transport_error(url, &error),
                })?;
        let name = name
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(str::to_string)
            .or_else(|| last_segment(first))
            .unwrap_or_else(|| "document".into());
        Ok(Download {
            name,
            content_type,
            bytes,
        })
    }

    /// The scheme, the host allow-list, and an IP literal's address (names are checked when
    /// they are resolved).
    fn check(&self, url: &Url) -> Result<(), FetchError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(FetchError::Refused {
                url: redact(url),
                reason: format!("the scheme {:?} is not http or https", url.scheme()),
            });
        }
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Some(allowed) = &self.policy.allowed_hosts
            && !allowed.iter().any(|pattern| host_matches(pattern, bare))
        {
            return Err(FetchError::Refused {
                url: redact(url),
                reason: format!(
                    "the host {bare} is not in FILE_AGENT_URL_ALLOWED_HOSTS; ask the operator to add it"
                ),
            });
        }
        if let Ok(ip) = bare.parse::<IpAddr>()
            && let Err(why) = address_allowed(&self.policy, ip)
        {
            return Err(FetchError::Refused {
                url: redact(url),
                reason: refusal(bare, ip, why),
            });
        }
        Ok(())
    }
}

fn parse(text: &str) -> Result<Url, FetchError> {
    let text = text.trim();
    let url = Url::parse(text).map_err(|_| FetchError::BadUrl {
        url: redact_unparsed(text),
        why: "it is not an absolute URL",
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(FetchError::BadUrl {
            url: redact(&url),
            why: "only http and https are fetched",
        });
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(FetchError::BadUrl {
            url: redact(&url),
            why: "it has no host",
        });
    }
    Ok(url)
}

/// The URL without credentials, query or fragment, for messages and logs.
pub fn redact(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    // Without a host (`user:pw@host` reads as the scheme `user` and a path), user information
    // cannot be told from the rest: only the scheme shows.
    if shown.host().is_none() && shown.as_str().contains('@') {
        return format!("{}:…", shown.scheme());
    }
    shown.to_string()
}

/// What a message may show of `text`, a link that did not parse: no query or fragment, and
/// only its scheme if it holds an `@` anywhere, since in a broken link user information cannot
/// be told apart from an `@` in its path or query (and a password may hold a `?`).
fn redact_unparsed(text: &str) -> String {
    /// Enough to recognise the link.
    const SHOWN_CHARS: usize = 200;
    if text.contains('@') {
        return match text.split_once("://") {
            Some((scheme, _))
                if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric()) =>
            {
                format!("{scheme}://…")
            }
            _ => "…".to_string(),
        };
    }
    let shown = text.split(['?', '#']).next().unwrap_or_default();
    shown.chars().take(SHOWN_CHARS).collect()
}

/// Where a redirect from `url` leads: its `Location`, resolved against `url` (checked again
/// before it is followed).
fn redirect(url: &Url, response: &reqwest::Response) -> Result<Url, FetchError> {
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| FetchError::Status {
            url: redact(url),
            status: response.status().as_u16(),
            hint: " (a redirect without a Location)",
        })?;
    url.join(location).map_err(|_| FetchError::BadUrl {
        url: redact(url),
        why: "it redirected to an unusable Location",
    })
}

/// What to do about a refusal with HTTP `status`, for the error.
fn status_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => {
            "; the link is not authorised (a presigned URL may have expired: get a new one)"
        }
        404 => "; there is no document at this link",
        _ => "; try again later",
    }
}

fn last_segment(url: &Url) -> Option<String> {
    let segment = url.path_segments()?.rev().find(|s| !s.is_empty())?;
    super::decode_percent(segment).filter(|decoded| !decoded.trim().is_empty())
}

/// `pattern` is a host name, or `*.suffix` for any subdomain of `suffix`.
fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() && host.ends_with(&format!(".{suffix}")),
        None => pattern == host,
    }
}

/// `Ok` when `ip` is global unicast or inside an allowed network; else why it is not fetched.
fn address_allowed(policy: &UrlFetchConfig, ip: IpAddr) -> Result<(), NonPublic> {
    match non_public(ip) {
        Some(why) if !policy.allowed_networks.iter().any(|net| net.contains(ip)) => Err(why),
        _ => Ok(()),
    }
}

fn refusal(host: &str, ip: IpAddr, why: NonPublic) -> String {
    format!(
        "{host} is {ip}, {why}; only public (global unicast) addresses are fetched unless the operator lists the network in FILE_AGENT_URL_ALLOWED_NETWORKS"
    )
}

/// The refusal raised inside the resolver, found again in reqwest's error chain.
#[derive(Debug, Error)]
#[error("{0}")]
struct ResolverRefusal(String);

/// Resolves names with the system resolver and refuses the host if any address is not
/// allowed, so that a name cannot smuggle in an internal address next to a public one.
struct GuardedResolver {
    policy: Arc<UrlFetchConfig>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for addr in &addrs {
                if let Err(why) = address_allowed(&policy, addr.ip()) {
                    let refusal = ResolverRefusal(refusal(&host, addr.ip(), why));
                    return Err(Box::new(refusal) as Box<dyn std::error::Error + Send + Sync>);
                }
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

fn transport_error(url: &Url, error: &reqwest::Error) -> FetchError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(refusal) = current.downcast_ref::<ResolverRefusal>() {
            return FetchError::Refused {
                url: redact(url),
                reason: refusal.0.clone(),
            };
        }
        source = current.source();
    }
    // reqwest's message includes the URL with its query: build one without it.
    let mut detail = if error.is_connect() {
        "the connection failed".to_string()
    } else if error.is_body() || error.is_decode() {
        "the download broke off".to_string()
    } else {
        "the request failed".to_string()
    };
    let mut source = std::error::Error::source(error);
    while let Some(current) = source {
        detail.push_str(&format!(": {current}"));
        source = current.source();
    }
    FetchError::Unreachable {
        url: redact(url),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Network;

    #[test]
    fn an_allowed_network_lets_its_addresses_through() {
        let policy = UrlFetchConfig {
            allowed_networks: vec![Network::parse("10.0.0.0/8").unwrap()],
            ..UrlFetchConfig::default()
        };
        assert!(address_allowed(&policy, "10.0.0.5".parse().unwrap()).is_ok());
        assert!(address_allowed(&policy, "::ffff:10.0.0.5".parse().unwrap()).is_ok());
        assert!(address_allowed(&policy, "169.254.169.254".parse().unwrap()).is_err());
        // Another spelling of an allowed address is another address: listed, or refused.
        assert!(address_allowed(&policy, "::10.0.0.5".parse().unwrap()).is_err());
        let policy = UrlFetchConfig {
            allowed_networks: vec![Network::parse("fec0::/10").unwrap()],
            ..UrlFetchConfig::default()
        };
        assert!(address_allowed(&policy, "fec0::1".parse().unwrap()).is_ok());
    }

    #[test]
    fn host_patterns_match_exactly_or_by_subdomain() {
        assert!(host_matches("s3.example.com", "s3.example.com"));
        assert!(!host_matches("s3.example.com", "evil-s3.example.com"));
        assert!(host_matches("*.example.com", "bucket.s3.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "badexample.com"));
    }

    #[test]
    fn redaction_drops_the_signature_and_credentials() {
        let url = Url::parse(
            "https://user:pw@bucket.s3.amazonaws.com/data/sales.csv?X-Amz-Signature=secret#x",
        )
        .unwrap();
        let shown = redact(&url);
        assert_eq!(shown, "https://bucket.s3.amazonaws.com/data/sales.csv");
        // A redirect may name a URL without a host, where an `@` may be anything.
        let hostless = Url::parse("user:pw@bucket.s3.amazonaws.com/a.csv").unwrap();
        assert_eq!(redact(&hostless), "user:…");
        assert_eq!(last_segment(&url).as_deref(), Some("sales.csv"));
    }

    /// A fetcher under the default policy.
    fn default_fetcher() -> UrlFetcher {
        UrlFetcher::new(
            UrlFetchConfig::default(),
            TransferLimits {
                max_bytes: 1024,
                timeout: Duration::from_secs(5),
            },
        )
        .unwrap()
    }

    #[tokio::test]
    async fn other_spellings_of_internal_addresses_and_userinfo_tricks_are_refused() {
        let fetcher = default_fetcher();
        for url in [
            "http://2130706433/a.csv",
            "http://0x7f000001/a.csv",
            "http://017700000001/a.csv",
            "http://127.1/a.csv",
            "http://0177.0.0.1/a.csv",
            "http://[::ffff:127.0.0.1]/a.csv",
            "http://[::ffff:7f00:1]/a.csv",
            "http://0.0.0.0/a.csv",
            "http://0/a.csv",
            "http://[::]/a.csv",
            "http://[::1]/a.csv",
            "http://169.254.169.254/latest/meta-data/",
            "http://s3.amazonaws.com@127.0.0.1/a.csv",
            "http://user:pass@169.254.169.254/a.csv",
            "http://127.0.0.1#@s3.amazonaws.com/a.csv",
            "http://127.0.0.1:80\\@s3.amazonaws.com/a.csv",
            "http://localhost/a.csv",
        ] {
            let error = fetcher.fetch(url, None).await.unwrap_err();
            assert!(
                matches!(error, FetchError::Refused { .. }),
                "{url}: {error}"
            );
            assert!(!error.to_string().contains("pass@"), "{error}");
        }
        for url in [
            "file:///etc/passwd",
            "file://localhost/etc/passwd",
            "ftp://127.0.0.1/a",
        ] {
            assert!(
                matches!(
                    fetcher.fetch(url, None).await,
                    Err(FetchError::BadUrl { .. })
                ),
                "{url}"
            );
        }
    }

    #[tokio::test]
    async fn special_purpose_literals_are_refused_with_their_range_before_any_connection() {
        let fetcher = default_fetcher();
        // Each range is in `special`'s tests; here, that the literal check names it.
        for (url, named) in [
            (
                "http://[::127.0.0.1]/a.csv",
                "(::/96) embedding 127.0.0.1, a loopback address",
            ),
            (
                "http://[fec0::1]/a.csv",
                "a deprecated site-local address (fec0::/10)",
            ),
            (
                "http://192.88.99.1/a.csv",
                "a deprecated 6to4 relay anycast address (192.88.99.0/24)",
            ),
        ] {
            let error = fetcher.fetch(url, None).await.unwrap_err();
            assert!(
                matches!(error, FetchError::Refused { .. }),
                "{url}: {error}"
            );
            let message = error.to_string();
            assert!(message.contains(named), "{url}: {message}");
            assert!(
                message.contains("FILE_AGENT_URL_ALLOWED_NETWORKS"),
                "{message}"
            );
        }
    }

    #[test]
    fn a_bad_link_keeps_neither_its_password_nor_its_query() {
        for (text, shown) in [
            (
                "https://bucket.example.com:99999/data/sales.csv?X-Amz-Signature=sig-secret#frag",
                "\"https://bucket.example.com:99999/data/sales.csv\"",
            ),
            (
                "http://user:pw-secret@[::1/a.csv?X-Amz-Signature=sig-secret",
                "\"http://…\"",
            ),
            // A `?` in the password ends the authority early: nothing past the scheme shows.
            ("http://user:pw?secret@host:x/a.csv", "\"http://…\""),
            // Read as the scheme `user` and a path, not as user information.
            ("user:pw-secret@host/a.csv", "\"user:…\""),
            ("//host/path?sig-secret", "\"//host/path\""),
        ] {
            let error = parse(text).unwrap_err();
            assert!(
                matches!(error, FetchError::BadUrl { .. }),
                "{text}: {error}"
            );
            let message = error.to_string();
            assert!(message.starts_with(shown), "{text}: {message}");
            assert!(
                !message.contains("secret") && !message.contains("frag"),
                "{message}"
            );
        }
    }

    #[test]
    fn only_absolute_http_urls_are_accepted() {
        assert!(matches!(
            parse("file:///etc/passwd"),
            Err(FetchError::BadUrl { .. })
        ));
        assert!(matches!(
            parse("/relative/path.csv"),
            Err(FetchError::BadUrl { .. })
        ));
        assert!(matches!(
            parse("gopher://x/1"),
            Err(FetchError::BadUrl { .. })
        ));
        assert!(parse("https://example.com/a.csv").is_ok());
    }
}
