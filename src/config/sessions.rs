//! The settings of `run_python`'s sessions: whether they are on, how large one session's state
//! may be, how many sessions one owner may keep, and how long an idle one is kept.
//!
//! Parsing only: the store is `tools::session`.

use std::time::Duration;

use super::{ConfigError, MIB, Vars};

/// `FILE_AGENT_SESSION_MAX_MIB`: the largest state one session keeps.
pub const DEFAULT_SESSION_MAX_MIB: u64 = 256;
/// `FILE_AGENT_SESSIONS_PER_OWNER`: sessions one owner keeps at once.
pub const DEFAULT_SESSIONS_PER_OWNER: usize = 20;
/// `FILE_AGENT_SESSION_IDLE_EXPIRY`: seconds a session may go unused before it is deleted (a
/// day).
pub const DEFAULT_SESSION_IDLE_EXPIRY_SECS: u64 = 86_400;

/// `run_python`'s sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionsConfig {
    /// `FILE_AGENT_SESSIONS`: off, `run_python` refuses a `session` and ignores a chat's.
    pub enabled: bool,
    /// `FILE_AGENT_SESSION_MAX_MIB`, in bytes: a larger state is not kept (the previous stays).
    pub max_bytes: u64,
    /// `FILE_AGENT_SESSIONS_PER_OWNER`: a new session past it is refused until one is reset
    /// or expires.
    pub per_owner: usize,
    /// `FILE_AGENT_SESSION_IDLE_EXPIRY`: a session unused this long is deleted.
    pub idle_expiry: Duration,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_bytes: DEFAULT_SESSION_MAX_MIB * MIB,
            per_owner: DEFAULT_SESSIONS_PER_OWNER,
            idle_expiry: Duration::from_secs(DEFAULT_SESSION_IDLE_EXPIRY_SECS),
        }
    }
}

impl SessionsConfig {
    /// `FILE_AGENT_SESSIONS`, `FILE_AGENT_SESSION_MAX_MIB`, `FILE_AGENT_SESSIONS_PER_OWNER` and
    /// `FILE_AGENT_SESSION_IDLE_EXPIRY`.
    pub(super) fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            enabled: vars.flag("FILE_AGENT_SESSIONS", true)?,
            max_bytes: vars.mib(
                "FILE_AGENT_SESSION_MAX_MIB",
                DEFAULT_SESSION_MAX_MIB,
                1..=4096,
            )?,
            per_owner: vars.count(
                "FILE_AGENT_SESSIONS_PER_OWNER",
                DEFAULT_SESSIONS_PER_OWNER,
                1..=10_000,
            )?,
            idle_expiry: vars.seconds(
                "FILE_AGENT_SESSION_IDLE_EXPIRY",
                DEFAULT_SESSION_IDLE_EXPIRY_SECS,
                60..=31_536_000,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<SessionsConfig, ConfigError> {
        let lookup = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        };
        SessionsConfig::from_vars(&Vars::new(&lookup))
    }

    #[test]
    fn sessions_are_on_by_default_and_every_bound_is_range_checked() {
        assert_eq!(parse(&[]).unwrap(), SessionsConfig::default());
        let config = parse(&[
            ("FILE_AGENT_SESSIONS", "off"),
            ("FILE_AGENT_SESSION_MAX_MIB", "16"),
            ("FILE_AGENT_SESSIONS_PER_OWNER", "2"),
            ("FILE_AGENT_SESSION_IDLE_EXPIRY", "600"),
        ])
        .unwrap();
        assert!(!config.enabled);
        assert_eq!(config.max_bytes, 16 * MIB);
        assert_eq!(config.per_owner, 2);
        assert_eq!(config.idle_expiry, Duration::from_secs(600));
        for (var, value) in [
            ("FILE_AGENT_SESSIONS", "maybe"),
            ("FILE_AGENT_SESSION_MAX_MIB", "0"),
            ("FILE_AGENT_SESSION_MAX_MIB", "4097"),
            ("FILE_AGENT_SESSIONS_PER_OWNER", "0"),
            ("FILE_AGENT_SESSION_IDLE_EXPIRY", "59"),
        ] {
            let error = parse(&[(var, value)]).unwrap_err();
            assert_eq!(error.var, var, "{value}");
        }
    }
}
