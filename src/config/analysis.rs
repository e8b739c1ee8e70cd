//! Settings of the analysis tools: which document URLs `data_analysis_tool` may fetch, and how
//! `conduct_deep_research` polls. Parsing only, like the rest of `config`.
//!
//! URL policy, secure by default: only global unicast addresses are fetched (what the IANA
//! special-purpose registries call globally reachable; `storage::url` holds the table).
//! Loopback, private, link-local (where cloud metadata services answer), CGNAT, documentation,
//! multicast and every other special-purpose address are refused unless their network is
//! listed in `FILE_AGENT_URL_ALLOWED_NETWORKS`, so an on-premises S3 (MinIO at 10.0.0.5, say)
//! is one setting away and a metadata endpoint is never reached by accident.

use std::net::IpAddr;
use std::time::Duration;

use super::{ConfigError, Vars};

/// `FILE_AGENT_URL_MAX_REDIRECTS`: redirects followed when fetching a document URL.
pub const DEFAULT_URL_MAX_REDIRECTS: usize = 3;
/// `DEEP_RESEARCH_MODEL`: the model `conduct_deep_research` asks.
pub const DEFAULT_RESEARCH_MODEL: &str = "o4-mini-deep-research";
/// `FILE_AGENT_RESEARCH_POLL`: seconds between two status checks of a research run.
pub const DEFAULT_RESEARCH_POLL_SECS: f64 = 5.0;
/// `FILE_AGENT_RESEARCH_TIMEOUT`: seconds a research run may take before it is given up.
pub const DEFAULT_RESEARCH_TIMEOUT_SECS: u64 = 600;
/// `FILE_AGENT_RESEARCH_KEEP`: seconds the report of a run whose caller went away is kept for
/// that caller (the run itself goes on for at most `FILE_AGENT_RESEARCH_TIMEOUT`).
pub const DEFAULT_RESEARCH_KEEP_SECS: u64 = 24 * 3600;
/// `FILE_AGENT_RESEARCH_KEPT_MAX`: runs going on without their caller and reports kept for
/// one, at most, server-wide; past it a run whose caller leaves is cancelled at the provider.
pub const DEFAULT_RESEARCH_KEPT_MAX: usize = 16;

/// Which document URLs may be fetched.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UrlFetchConfig {
    /// `FILE_AGENT_URL_ALLOWED_HOSTS`: when set, only these hosts (exact, or `*.example.com`
    /// for any subdomain) may be fetched, redirects included.
    pub allowed_hosts: Option<Vec<String>>,
    /// `FILE_AGENT_URL_ALLOWED_NETWORKS`: networks that may be fetched though they are not
    /// global unicast. An address is matched as written (IPv4-mapped IPv6 as IPv4): listing
    /// `10.0.0.0/8` does not allow `64:ff9b::10.0.0.5`.
    pub allowed_networks: Vec<Network>,
    /// `FILE_AGENT_URL_MAX_REDIRECTS`.
    pub max_redirects: usize,
}

/// An IP network in CIDR notation, e.g. `10.0.0.0/8` or `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    base: IpAddr,
    prefix: u8,
}

impl Network {
    /// The network of `prefix` bits at `base`. For constant tables: the prefix must be at
    /// most the address's width and `base` must have no bits past it (a test of each table
    /// checks both); [`Network::parse`] checks text.
    pub const fn new(base: IpAddr, prefix: u8) -> Self {
        Self { base, prefix }
    }

    /// Parses `a.b.c.d/n`, `x::y/n`, or a single address (a network of one).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix.parse::<u8>().ok()?)),
            None => (text, None),
        };
        let base: IpAddr = address.parse().ok()?;
        let width = if base.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(width);
        (prefix <= width).then_some(Self { base, prefix })
    }

    /// Whether `ip` is inside this network (IPv4-mapped IPv6 counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.contains_as_written(match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        })
    }

    /// Whether `ip`, taken as written, is inside this network: an IPv4-mapped IPv6 address is
    /// an IPv6 address here, inside `::ffff:0:0/96` and no IPv4 network.
    pub fn contains_as_written(&self, ip: IpAddr) -> bool {
        match (self.base, ip) {
            (IpAddr::V4(base), IpAddr::V4(ip)) => {
                prefix_matches(&base.octets(), &ip.octets(), self.prefix)
            }
            (IpAddr::V6(base), IpAddr::V6(ip)) => {
                prefix_matches(&base.octets(), &ip.octets(), self.prefix)
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Network {
    /// CIDR notation: `10.0.0.0/8`, `fc00::/7`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

fn prefix_matches(base: &[u8], ip: &[u8], prefix: u8) -> bool {
    let full = usize::from(prefix / 8);
    let rest = prefix % 8;
    if base[..full] != ip[..full] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xFFu8 << (8 - rest);
    base[full] & mask == ip[full] & mask
}

/// How `conduct_deep_research` runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ResearchConfig {
    /// `DEEP_RESEARCH_MODEL`.
    pub model: String,
    /// `FILE_AGENT_RESEARCH_POLL`: time between status checks.
    pub poll_interval: Duration,
    /// `FILE_AGENT_RESEARCH_TIMEOUT`: the longest a run may take.
    pub max_wait: Duration,
    /// `FILE_AGENT_RESEARCH_KEEP`: how long the report of a run whose caller left is kept.
    pub keep_for: Duration,
    /// `FILE_AGENT_RESEARCH_KEPT_MAX`: runs without their caller and kept reports, at most
    /// (0: a run whose caller leaves is cancelled).
    pub kept_max: usize,
}

impl UrlFetchConfig {
    /// Reads the `FILE_AGENT_URL_*` variables (`get` treats empty values as unset).
    pub(super) fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        let allowed_hosts = vars.get("FILE_AGENT_URL_ALLOWED_HOSTS").map(|value| {
            value
                .split(',')
                .map(|host| host.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|host| !host.is_empty())
                .collect()
        });
        let allowed_networks = match vars.get("FILE_AGENT_URL_ALLOWED_NETWORKS") {
            None => Vec::new(),
            Some(value) => value
                .split(',')
                .filter(|item| !item.trim().is_empty())
                .map(|item| {
                    Network::parse(item).ok_or_else(|| ConfigError {
                        var: "FILE_AGENT_URL_ALLOWED_NETWORKS",
                        value: value.clone(),
                        expected:
                            "comma-separated networks in CIDR notation, e.g. 10.0.0.0/8,fd00::/8"
                                .into(),
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Self {
            allowed_hosts,
            allowed_networks,
            max_redirects: vars.count(
                "FILE_AGENT_URL_MAX_REDIRECTS",
                DEFAULT_URL_MAX_REDIRECTS,
                0..=10,
            )?,
        })
    }
}

impl ResearchConfig {
    /// Reads `DEEP_RESEARCH_MODEL` and the `FILE_AGENT_RESEARCH_*` variables.
    pub(super) fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        let poll = match vars.get("FILE_AGENT_RESEARCH_POLL") {
            None => DEFAULT_RESEARCH_POLL_SECS,
            Some(value) => match value.trim().parse::<f64>() {
                Ok(secs) if (0.01..=300.0).contains(&secs) => secs,
                _ => {
                    return Err(ConfigError {
                        var: "FILE_AGENT_RESEARCH_POLL",
                        value,
                        expected: "seconds from 0.01 to 300, e.g. 5 or 0.5".into(),
                    });
                }
            },
        };
        Ok(Self {
            model: vars
                .get("DEEP_RESEARCH_MODEL")
                .map(|m| m.trim().to_string())
                .unwrap_or_else(|| DEFAULT_RESEARCH_MODEL.into()),
            poll_interval: Duration::from_secs_f64(poll),
            max_wait: vars.seconds(
                "FILE_AGENT_RESEARCH_TIMEOUT",
                DEFAULT_RESEARCH_TIMEOUT_SECS,
                1..=7200,
            )?,
            keep_for: vars.seconds(
                "FILE_AGENT_RESEARCH_KEEP",
                DEFAULT_RESEARCH_KEEP_SECS,
                1..=7 * 24 * 3600,
            )?,
            kept_max: vars.count(
                "FILE_AGENT_RESEARCH_KEPT_MAX",
                DEFAULT_RESEARCH_KEPT_MAX,
                0..=1000,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn networks_match_by_prefix() {
        let net = Network::parse("10.0.0.0/8").unwrap();
        assert!(net.contains("10.200.3.4".parse().unwrap()));
        assert!(!net.contains("11.0.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.2.3".parse().unwrap()));
        let odd = Network::parse("172.16.0.0/12").unwrap();
        assert!(odd.contains("172.31.255.255".parse().unwrap()));
        assert!(!odd.contains("172.32.0.0".parse().unwrap()));
        let one = Network::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let v6 = Network::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        assert!(Network::parse("10.0.0.0/33").is_none());
        assert!(Network::parse("example.com/8").is_none());
    }

    #[test]
    fn url_settings_parse_and_reject_bad_networks() {
        let config = UrlFetchConfig::from_vars(&Vars::new(&lookup(&[
            (
                "FILE_AGENT_URL_ALLOWED_HOSTS",
                "S3.example.com, *.minio.local",
            ),
            ("FILE_AGENT_URL_ALLOWED_NETWORKS", "10.0.0.0/8, fd00::/8"),
        ])))
        .unwrap();
        assert_eq!(
            config.allowed_hosts,
            Some(vec!["s3.example.com".into(), "*.minio.local".into()])
        );
        assert_eq!(config.allowed_networks.len(), 2);
        assert_eq!(config.max_redirects, DEFAULT_URL_MAX_REDIRECTS);
        let error = UrlFetchConfig::from_vars(&Vars::new(&lookup(&[(
            "FILE_AGENT_URL_ALLOWED_NETWORKS",
            "10.0.0.0/8,intranet",
        )])))
        .unwrap_err();
        assert_eq!(error.var, "FILE_AGENT_URL_ALLOWED_NETWORKS");
    }

    #[test]
    fn research_polling_takes_fractions_and_refuses_zero() {
        let config =
            ResearchConfig::from_vars(&Vars::new(&lookup(&[("FILE_AGENT_RESEARCH_POLL", "0.05")])))
                .unwrap();
        assert_eq!(config.poll_interval, Duration::from_millis(50));
        assert_eq!(config.model, DEFAULT_RESEARCH_MODEL);
        assert_eq!(config.max_wait, Duration::from_secs(600));
        let error =
            ResearchConfig::from_vars(&Vars::new(&lookup(&[("FILE_AGENT_RESEARCH_POLL", "0")])))
                .unwrap_err();
        assert_eq!(error.var, "FILE_AGENT_RESEARCH_POLL");
    }
}
