//! Settings read from the environment, in two phases: [`SandboxConfig::from_lookup`] parses and
//! validates plain strings with no I/O (so it is unit-tested with a map), and only then does a
//! caller build clients from the result. Every default is a named constant below, and every
//! variable is listed in the settings table of `docs/OPERATING.md` and in `.env.example`.
//!
//! [`Config`] gathers everything `serve` needs: the sandbox part here, the server, model and
//! storage parts in [`service`], who called in [`identity`], the analysis tools' URL policy and research polling in
//! [`analysis`], long calls as MCP tasks in [`tasks`].
//!
//! This module does not read `.env` files (the CLI does, before calling it) or talk to anything.

mod analysis;
pub mod capacity;
mod identity;
pub mod image;
mod kubernetes;
pub mod names;
pub mod packages;
mod service;
mod sessions;
mod tasks;

use std::time::Duration;

pub use analysis::{Network, ResearchConfig, UrlFetchConfig};
pub use identity::{
    DEFAULT_OPENWEBUI_USER_JWT_HEADER, IdentityConfig, MIN_JWT_SECRET_BYTES, OAuthConfig,
    OpenWebUiJwtConfig,
};
pub use kubernetes::{Backend, DEFAULT_POD_START_TIMEOUT_SECS, KubernetesConfig, OwnerPod};
pub use service::{
    AdmissionConfig, AuditConfig, AuditOnFailure, AuditPlace, Config, DEFAULT_AUDIT_FOLDER,
    DynamicTools, LlmConfig, LocalStoreConfig, OpenWebUiConfig, Pinned, RETENTION_INTERVAL,
    ReceiptMode, RetentionConfig, Secret, ServerConfig, StorageConfig, TransferLimits,
    valid_chain_name,
};
pub use sessions::{
    DEFAULT_SESSION_IDLE_EXPIRY_SECS, DEFAULT_SESSION_MAX_MIB, DEFAULT_SESSIONS_PER_OWNER,
    SessionsConfig,
};
pub use tasks::{
    DEFAULT_TASK_RESULT_TTL_SECS, DEFAULT_TASK_TOOLS, DEFAULT_TASKS_PER_CALLER, TaskTools,
    TasksConfig,
};

use thiserror::Error;

/// `SCRIPT_TIMEOUT` (seconds), the Python File Agent's name and default.
pub const DEFAULT_TIMEOUT_SECS: u64 = 90;
/// `SANDBOX_MEMORY_MIB`: memory of one container; swap is set equal, so it cannot swap.
pub const DEFAULT_MEMORY_MIB: u64 = 1024;
/// `SANDBOX_CPUS`: CPUs of one container (fractions allowed).
pub const DEFAULT_CPUS: f64 = 1.0;
/// `SANDBOX_PIDS`: processes and threads of one container.
pub const DEFAULT_PIDS: i64 = 128;
/// `SANDBOX_NOFILE`: open files of one process.
pub const DEFAULT_NOFILE: u64 = 1024;
/// `SANDBOX_TMP_MIB`: size of the `/tmp` tmpfs (counted in the container's memory).
pub const DEFAULT_TMP_MIB: u64 = 64;
/// `SANDBOX_STDIO_MAX_BYTES`: stdout and stderr kept, each; the rest is read and dropped.
pub const DEFAULT_STDIO_MAX_BYTES: usize = 1024 * 1024;
/// `SANDBOX_OUTPUT_MAX_MIB`: all files written to `/work/out`, together.
pub const DEFAULT_OUTPUT_MAX_MIB: u64 = 256;
/// `SANDBOX_OUTPUT_MAX_FILES`: files and folders written to `/work/out`.
pub const DEFAULT_OUTPUT_MAX_FILES: usize = 1000;
/// `SANDBOX_WARM_MAX_IDLE` (seconds): how long a warm container waits for an attempt before
/// the pool replaces it.
pub const DEFAULT_WARM_MAX_IDLE_SECS: u64 = 300;
/// The largest `SANDBOX_WARM`: each warm container holds an interpreter with the libraries
/// imported.
pub const MAX_WARM: usize = 64;

pub(crate) const MIB: u64 = 1024 * 1024;

/// A variable that is set but unusable. Its message names the variable and what it takes.
#[derive(Debug, Error, PartialEq)]
#[error("{var}={value:?} is not valid: expected {expected}")]
pub struct ConfigError {
    /// The environment variable.
    pub var: &'static str,
    /// The value found.
    pub value: String,
    /// What the variable takes, in words.
    pub expected: String,
}

/// Why `value`, given for a token or a secret, is a placeholder from the docs or
/// `.env.example` rather than a secret, if it is: `<openssl rand -hex 32>` uncommented as it
/// stands is long enough to pass every length rule, and `$(openssl rand -hex 32)` is not run
/// by an env file or compose, so each would be a token everyone who read the docs knows.
pub fn placeholder(value: &str) -> Option<&'static str> {
    let lower = value.to_ascii_lowercase();
    if lower.contains('<') || lower.contains('>') {
        Some("it holds `<` or `>`, as the placeholders in the docs do")
    } else if lower.contains("$(") || lower.contains("${") || lower.contains('`') {
        Some("it holds a shell command, which an env file, compose and Kubernetes do not run")
    } else if [
        "openssl",
        "changeme",
        "change-me",
        "change_me",
        "placeholder",
        "your-",
        "your_",
    ]
    .iter()
    .any(|word| lower.contains(word))
    {
        Some("it reads as a placeholder, not a random value")
    } else {
        None
    }
}

/// A [`ConfigError`] for a placeholder found in `var`, if `value` is one; the value stays
/// hidden.
pub(crate) fn refuse_placeholder(var: &'static str, value: &str) -> Result<(), ConfigError> {
    match placeholder(value) {
        None => Ok(()),
        Some(why) => Err(ConfigError {
            var,
            value: "(hidden)".into(),
            expected: format!(
                "a random value, not a placeholder ({why}); make one with `openssl rand -hex 32` and paste its output"
            ),
        }),
    }
}

/// The variables, read by name: empty values count as unset, and each reader takes the name
/// once, for the lookup and for its error. Number readers say their range in the error from
/// the range itself.
pub(crate) struct Vars<'a>(&'a dyn Fn(&str) -> Option<String>);

impl<'a> Vars<'a> {
    /// Variables from `lookup`.
    pub(crate) fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self(lookup)
    }

    /// The value of `var`, unless unset or blank.
    pub(crate) fn get(&self, var: &str) -> Option<String> {
        (self.0)(var).filter(|value| !value.trim().is_empty())
    }

    /// A number of `unit`s in `range` ("a count", "MiB", ...); `default` when unset.
    pub(crate) fn number<T>(
        &self,
        var: &'static str,
        default: T,
        range: std::ops::RangeInclusive<T>,
        unit: &str,
    ) -> Result<T, ConfigError>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display,
    {
        let expected = format!("{unit} from {} to {}", range.start(), range.end());
        parse_int(self.get(var), var, default, range, &expected)
    }

    /// A count in `range`.
    pub(crate) fn count<T>(
        &self,
        var: &'static str,
        default: T,
        range: std::ops::RangeInclusive<T>,
    ) -> Result<T, ConfigError>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display,
    {
        self.number(var, default, range, "a count")
    }

    /// Whole seconds in `range`.
    pub(crate) fn seconds(
        &self,
        var: &'static str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<Duration, ConfigError> {
        self.number(var, default, range, "whole seconds")
            .map(Duration::from_secs)
    }

    /// MiB in `range`, as bytes.
    pub(crate) fn mib(
        &self,
        var: &'static str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ConfigError> {
        Ok(self.number(var, default, range, "MiB")? * MIB)
    }

    /// `true`/`false` (or 1/0, yes/no, on/off).
    pub(crate) fn flag(&self, var: &'static str, default: bool) -> Result<bool, ConfigError> {
        let value = self.get(var);
        match value.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if ["1", "true", "yes", "on"].contains(&v.as_str()) => Ok(true),
            Some(v) if ["0", "false", "no", "off"].contains(&v.as_str()) => Ok(false),
            Some(_) => Err(ConfigError {
                var,
                value: value.unwrap_or_default(),
                expected: "true or false".into(),
            }),
        }
    }
}

/// The resource limits of one attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Wall-clock time from start to exit; the container is killed past it.
    pub timeout: Duration,
    /// Memory in bytes, including the tmpfs folders; swap equals it.
    pub memory_bytes: u64,
    /// CPUs (Docker's `--cpus`).
    pub cpus: f64,
    /// Processes and threads.
    pub pids: i64,
    /// Open files per process (soft and hard).
    pub nofile: u64,
    /// Size of the `/tmp` tmpfs in bytes.
    pub tmp_bytes: u64,
    /// Bytes of stdout, and separately of stderr, that are kept.
    pub stdio_max_bytes: usize,
    /// Bytes of all output files together.
    pub output_max_bytes: u64,
    /// Number of output files and folders.
    pub output_max_files: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            memory_bytes: DEFAULT_MEMORY_MIB * MIB,
            cpus: DEFAULT_CPUS,
            pids: DEFAULT_PIDS,
            nofile: DEFAULT_NOFILE,
            tmp_bytes: DEFAULT_TMP_MIB * MIB,
            stdio_max_bytes: DEFAULT_STDIO_MAX_BYTES,
            output_max_bytes: DEFAULT_OUTPUT_MAX_MIB * MIB,
            output_max_files: DEFAULT_OUTPUT_MAX_FILES,
        }
    }
}

/// What the sandbox needs to know: which image, which OCI runtime, which limits.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxConfig {
    /// The sandbox image; by default the tag of the image this binary was built with.
    pub image: String,
    /// An OCI runtime such as `runsc` (gVisor); `None` is the engine's default.
    pub runtime: Option<String>,
    /// The resource limits of every attempt.
    pub limits: Limits,
    /// The value of the `io.file-agent.instance` label on this process's containers. The
    /// server defaults it to a value stable per host and data folder; other commands use a
    /// random one. Naming it lets an operator (or a test) find one replica's containers.
    pub instance: Option<String>,
    /// `SANDBOX_WARM`: containers the pool keeps ready; `None` means one per slot (the server
    /// knows the slots), `Some(0)` turns the pool off.
    pub warm: Option<usize>,
    /// `SANDBOX_WARM_MAX_IDLE`: how long a warm container waits before it is replaced.
    pub warm_max_idle: Duration,
    /// `SANDBOX_BACKEND`: Docker (the default) or Kubernetes, with its settings.
    pub backend: Backend,
    /// `SANDBOX_EXTRA_PACKAGES`: the operator's hash-pinned list, read and checked; the
    /// default image's tag covers its bytes.
    pub extra_packages: Option<std::sync::Arc<packages::ExtraPackages>>,
}

impl SandboxConfig {
    /// The configuration from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The configuration from any lookup of variable names; empty values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::from_vars(&Vars::new(&lookup))
    }

    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        let limits = Limits::from_vars(vars)?;
        let extra_packages = extra_packages(vars)?;
        let image = image_reference(vars, extra_packages.as_deref())?;
        let runtime = parse_name(
            vars,
            "SANDBOX_RUNTIME",
            "a runtime name registered with the Docker engine, e.g. runsc",
        )?;
        let instance = parse_name(
            vars,
            "SANDBOX_INSTANCE",
            "up to 64 letters, digits, '-', '_' or '.'",
        )?;
        let warm = match vars.get("SANDBOX_WARM") {
            None => None,
            Some(_) => Some(vars.number(
                "SANDBOX_WARM",
                0,
                0..=MAX_WARM,
                "a count of containers (0: no pool)",
            )?),
        };
        let warm_max_idle = vars.seconds(
            "SANDBOX_WARM_MAX_IDLE",
            DEFAULT_WARM_MAX_IDLE_SECS,
            10..=86_400,
        )?;
        Ok(Self {
            image,
            runtime,
            limits,
            instance,
            warm,
            warm_max_idle,
            backend: Backend::from_vars(vars)?,
            extra_packages,
        })
    }
}

impl Limits {
    /// The `SCRIPT_TIMEOUT` and `SANDBOX_*` limits of every attempt.
    fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            timeout: vars.seconds("SCRIPT_TIMEOUT", DEFAULT_TIMEOUT_SECS, 1..=3600)?,
            memory_bytes: vars.mib("SANDBOX_MEMORY_MIB", DEFAULT_MEMORY_MIB, 64..=65536)?,
            cpus: parse_cpus(vars.get("SANDBOX_CPUS"))?,
            pids: vars.count("SANDBOX_PIDS", DEFAULT_PIDS, 16..=4096)?,
            nofile: vars.count("SANDBOX_NOFILE", DEFAULT_NOFILE, 64..=65536)?,
            tmp_bytes: vars.mib("SANDBOX_TMP_MIB", DEFAULT_TMP_MIB, 1..=4096)?,
            stdio_max_bytes: vars.number(
                "SANDBOX_STDIO_MAX_BYTES",
                DEFAULT_STDIO_MAX_BYTES,
                1024..=64 * 1024 * 1024,
                "bytes",
            )?,
            output_max_bytes: vars.mib(
                "SANDBOX_OUTPUT_MAX_MIB",
                DEFAULT_OUTPUT_MAX_MIB,
                1..=16384,
            )?,
            output_max_files: vars.count(
                "SANDBOX_OUTPUT_MAX_FILES",
                DEFAULT_OUTPUT_MAX_FILES,
                1..=100_000,
            )?,
        })
    }
}

/// `SANDBOX_EXTRA_PACKAGES`: the list it names, read (the one file this module reads: the
/// image's tag is a hash of its bytes) and checked line by line and against the base set.
fn extra_packages(
    vars: &Vars<'_>,
) -> Result<Option<std::sync::Arc<packages::ExtraPackages>>, ConfigError> {
    let Some(path) = vars.get("SANDBOX_EXTRA_PACKAGES") else {
        return Ok(None);
    };
    packages::read_extra(std::path::Path::new(path.trim()))
        .map(|list| Some(std::sync::Arc::new(list)))
        .map_err(|error| ConfigError {
            var: "SANDBOX_EXTRA_PACKAGES",
            value: path,
            expected: format!(
                "a list of hash-pinned wheels ({}), but {error}",
                packages::ADDING_PACKAGES_DOCS
            ),
        })
}

/// `SANDBOX_IMAGE`, else the tag of the image `file-agent image build` builds (with the
/// extra list's packages when there is one).
fn image_reference(
    vars: &Vars<'_>,
    extra: Option<&packages::ExtraPackages>,
) -> Result<String, ConfigError> {
    Ok(match vars.get("SANDBOX_IMAGE") {
        Some(image) if image.chars().any(char::is_whitespace) => {
            return Err(ConfigError {
                var: "SANDBOX_IMAGE",
                value: image,
                expected: "an image reference without spaces, e.g. file-agent-sandbox:<hash>"
                    .into(),
            });
        }
        Some(image) => image,
        None => image::tag(extra.map(|list| list.content.as_slice())),
    })
}

fn parse_int<T>(
    value: Option<String>,
    var: &'static str,
    default: T,
    range: std::ops::RangeInclusive<T>,
    expected: &str,
) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd,
{
    let Some(value) = value else {
        return Ok(default);
    };
    match value.trim().parse::<T>() {
        Ok(parsed) if range.contains(&parsed) => Ok(parsed),
        _ => Err(ConfigError {
            var,
            value,
            expected: expected.into(),
        }),
    }
}

/// A short name of letters, digits, `-`, `_` and `.` (a runtime, a label value).
fn parse_name(
    vars: &Vars<'_>,
    var: &'static str,
    expected: &str,
) -> Result<Option<String>, ConfigError> {
    match vars.get(var) {
        Some(name)
            if name.len() > 64
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) =>
        {
            Err(ConfigError {
                var,
                value: name,
                expected: expected.into(),
            })
        }
        other => Ok(other),
    }
}

fn parse_cpus(value: Option<String>) -> Result<f64, ConfigError> {
    let Some(value) = value else {
        return Ok(DEFAULT_CPUS);
    };
    match value.trim().parse::<f64>() {
        Ok(cpus) if (0.01..=64.0).contains(&cpus) => Ok(cpus),
        _ => Err(ConfigError {
            var: "SANDBOX_CPUS",
            value,
            expected: "a number of CPUs from 0.01 to 64, e.g. 1 or 0.5".into(),
        }),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn placeholders_from_the_docs_are_told_from_random_values() {
        for placeholder in [
            "<openssl rand -hex 32>",
            "<another random token>",
            "<openssl rand -hex 32, set on both sides>",
            "$(openssl rand -hex 32)",
            "`openssl rand -hex 32`",
            "changeme-changeme-changeme-changeme",
            "your-token-goes-here-0123456789",
        ] {
            assert!(super::placeholder(placeholder).is_some(), "{placeholder}");
        }
        for random in [
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "front-door-token-0123456789abcdef",
            "Zm9vYmFyYmF6cXV4cXV1eHh5encxMjM0NTY3ODkw",
        ] {
            assert_eq!(super::placeholder(random), None, "{random}");
        }
    }

    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<SandboxConfig, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        SandboxConfig::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let config = config(&[]).unwrap();
        assert_eq!(config.limits.timeout, Duration::from_secs(90));
        assert_eq!(config.limits.memory_bytes, 1024 * MIB);
        assert_eq!(config.limits.pids, 128);
        assert_eq!(config.limits.stdio_max_bytes, 1024 * 1024);
        assert_eq!(config.limits.output_max_bytes, 256 * MIB);
        assert_eq!(config.limits.output_max_files, 1000);
        assert_eq!(config.runtime, None);
        assert!(config.image.starts_with("file-agent-sandbox:"));
        assert_eq!(config.warm, None, "one per slot, decided by the server");
        assert_eq!(config.warm_max_idle, Duration::from_secs(300));
    }

    #[test]
    fn the_pool_is_sized_or_turned_off() {
        assert_eq!(config(&[("SANDBOX_WARM", "0")]).unwrap().warm, Some(0));
        let config_3 = config(&[("SANDBOX_WARM", "3"), ("SANDBOX_WARM_MAX_IDLE", "60")]).unwrap();
        assert_eq!(config_3.warm, Some(3));
        assert_eq!(config_3.warm_max_idle, Duration::from_secs(60));
        assert_eq!(
            config(&[("SANDBOX_WARM", "65")]).unwrap_err().var,
            "SANDBOX_WARM"
        );
        assert_eq!(
            config(&[("SANDBOX_WARM_MAX_IDLE", "5")]).unwrap_err().var,
            "SANDBOX_WARM_MAX_IDLE"
        );
    }

    #[test]
    fn values_are_read_and_blank_means_unset() {
        let config = config(&[
            ("SCRIPT_TIMEOUT", "30"),
            ("SANDBOX_MEMORY_MIB", "512"),
            ("SANDBOX_CPUS", "0.5"),
            ("SANDBOX_RUNTIME", "runsc"),
            ("SANDBOX_IMAGE", "  "),
        ])
        .unwrap();
        assert_eq!(config.limits.timeout, Duration::from_secs(30));
        assert_eq!(config.limits.memory_bytes, 512 * MIB);
        assert_eq!(config.limits.cpus, 0.5);
        assert_eq!(config.runtime.as_deref(), Some("runsc"));
        assert!(config.image.starts_with("file-agent-sandbox:"));
    }

    #[test]
    fn bad_values_name_the_variable_and_what_it_takes() {
        let err = config(&[("SCRIPT_TIMEOUT", "ninety")]).unwrap_err();
        assert_eq!(err.var, "SCRIPT_TIMEOUT");
        assert!(err.to_string().contains("whole seconds"), "{err}");
        assert_eq!(
            config(&[("SANDBOX_MEMORY_MIB", "8")]).unwrap_err().var,
            "SANDBOX_MEMORY_MIB"
        );
        assert_eq!(
            config(&[("SANDBOX_CPUS", "-1")]).unwrap_err().var,
            "SANDBOX_CPUS"
        );
        assert_eq!(
            config(&[("SANDBOX_RUNTIME", "runsc; rm -rf /")])
                .unwrap_err()
                .var,
            "SANDBOX_RUNTIME"
        );
    }

    #[test]
    fn an_error_names_the_variable_and_the_range_it_takes() {
        let error = config(&[("SANDBOX_PIDS", "5")]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "SANDBOX_PIDS=\"5\" is not valid: expected a count from 16 to 4096"
        );
        let error = config(&[("SANDBOX_WARM_MAX_IDLE", "abc")]).unwrap_err();
        assert_eq!(error.expected, "whole seconds from 10 to 86400");
        let error = config(&[("SANDBOX_TMP_MIB", "0")]).unwrap_err();
        assert_eq!(error.expected, "MiB from 1 to 4096");
    }
}
