//! The names of every variable file-agent reads, in one list, and the check that finds a
//! `FILE_AGENT_*` or `SANDBOX_*` variable that is not among them: a misspelt
//! `SANDBOX_RUNTME=runsc` or `FILE_AGENT_ACCES_TOKENS` would otherwise be ignored in silence,
//! and the hardened runtime or the authentication the admin asked for would simply be off.
//! `serve` and `doctor` warn about each, with the closest known name.
//!
//! A new variable is appended to [`KNOWN`] (a unit test checks that every name the
//! configuration reads is there).

/// The prefixes of file-agent's own variables: a name with one of them that is not in
/// [`KNOWN`] is a mistake.
pub const PREFIXES: &[&str] = &["FILE_AGENT_", "SANDBOX_"];

/// Every variable file-agent reads (the Python File Agent's names without a prefix, too).
pub const KNOWN: &[&str] = &[
    // The model.
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "MODEL_NAME",
    "DEEP_RESEARCH_MODEL",
    "FILE_AGENT_LLM_TIMEOUT",
    "FILE_AGENT_LLM_RETRIES",
    "FILE_AGENT_RESEARCH_POLL",
    "FILE_AGENT_RESEARCH_TIMEOUT",
    "FILE_AGENT_RESEARCH_KEEP",
    "FILE_AGENT_RESEARCH_KEPT_MAX",
    // Storage and the server.
    "INTERNAL_API_URL",
    "PUBLIC_DOMAIN",
    "OPENWEBUI_API_KEY",
    "FILE_AGENT_FORWARD_USER_TOKEN",
    "FILE_AGENT_CHAT_STATUS",
    "FILE_AGENT_TASKS",
    "FILE_AGENT_TASK_RESULT_TTL",
    "FILE_AGENT_TASKS_PER_CALLER",
    "FILE_AGENT_SESSIONS",
    "FILE_AGENT_SESSION_MAX_MIB",
    "FILE_AGENT_SESSIONS_PER_OWNER",
    "FILE_AGENT_SESSION_IDLE_EXPIRY",
    "FILE_AGENT_LISTEN",
    "FILE_AGENT_PUBLIC_URL",
    "FILE_AGENT_ALLOWED_HOSTS",
    "FILE_AGENT_ALLOWED_ORIGINS",
    "FILE_AGENT_ACCESS_TOKENS",
    "FILE_AGENT_ACCESS_TOKENS_FILE",
    "FILE_AGENT_METRICS_TOKEN",
    // Who called.
    "FILE_AGENT_OPENWEBUI_USER_JWT_SECRET",
    "FILE_AGENT_OPENWEBUI_USER_JWT_HEADER",
    "FILE_AGENT_OAUTH_ISSUER",
    "FILE_AGENT_OAUTH_AUDIENCE",
    "FILE_AGENT_OAUTH_USER_CLAIM",
    "FILE_AGENT_OAUTH_FETCH_TIMEOUT",
    "FILE_AGENT_DATA_DIR",
    "FILE_AGENT_DYNAMIC_TOOLS",
    "FILE_AGENT_INPUT_MAX_MIB",
    "FILE_AGENT_DOWNLOAD_TIMEOUT",
    "FILE_AGENT_URL_ALLOWED_NETWORKS",
    "FILE_AGENT_URL_ALLOWED_HOSTS",
    "FILE_AGENT_URL_MAX_REDIRECTS",
    "FILE_AGENT_MAX_CONCURRENT",
    "FILE_AGENT_QUEUE_MAX",
    "FILE_AGENT_QUEUE_TIMEOUT",
    "FILE_AGENT_CALL_TIMEOUT",
    "FILE_AGENT_PROMPTS_DIR",
    "FILE_AGENT_SHUTDOWN_GRACE",
    "FILE_AGENT_REAP_INTERVAL",
    "FILE_AGENT_HEADER_TIMEOUT",
    "FILE_AGENT_BODY_TIMEOUT",
    "FILE_AGENT_MAX_CONNECTIONS",
    "FILE_AGENT_MAX_CONNECTIONS_PER_PEER",
    "FILE_AGENT_WRITE_TIMEOUT",
    "FILE_AGENT_KEEP_ALIVE",
    "FILE_AGENT_MAX_UPLOADS",
    "FILE_AGENT_LOCAL_ROOTS",
    "FILE_AGENT_AUDIT_DIR",
    "FILE_AGENT_AUDIT_FILE",
    "FILE_AGENT_AUDIT_STDOUT",
    "FILE_AGENT_AUDIT_CODE",
    "FILE_AGENT_AUDIT_MAX_MIB",
    "FILE_AGENT_AUDIT_RETENTION_DAYS",
    "FILE_AGENT_AUDIT_ON_FAILURE",
    "FILE_AGENT_AUDIT_ORIGIN",
    "FILE_AGENT_AUDIT_SIGNING_KEY_FILE",
    "FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL",
    "FILE_AGENT_AUDIT_WITNESSES",
    "FILE_AGENT_AUDIT_RECEIPTS",
    "FILE_AGENT_FILES_RETENTION_DAYS",
    "FILE_AGENT_LOG",
    "FILE_AGENT_LOG_FORMAT",
    // Traces (`crate::traces`): OpenTelemetry's own names, read by its SDK and exporter.
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_EXPORT_TIMEOUT",
    // The sandbox.
    "SCRIPT_TIMEOUT",
    "SANDBOX_MEMORY_MIB",
    "SANDBOX_CPUS",
    "SANDBOX_PIDS",
    "SANDBOX_NOFILE",
    "SANDBOX_TMP_MIB",
    "SANDBOX_STDIO_MAX_BYTES",
    "SANDBOX_OUTPUT_MAX_MIB",
    "SANDBOX_OUTPUT_MAX_FILES",
    "SANDBOX_IMAGE",
    "SANDBOX_EXTRA_PACKAGES",
    "SANDBOX_RUNTIME",
    "SANDBOX_INSTANCE",
    "SANDBOX_WARM",
    "SANDBOX_WARM_MAX_IDLE",
    "DOCKER_HOST",
    // The Kubernetes backend.
    "SANDBOX_BACKEND",
    "SANDBOX_NAMESPACE",
    "POD_NAME",
    "POD_UID",
    // Read only under `kubernetes` with `POD_NAME` and `POD_UID` set, which the unit test
    // below does not set.
    "POD_NAMESPACE",
    "KUBECONFIG",
    // Read by compose.yaml (the address it publishes the port on), whose `env_file: .env`
    // hands the whole file to the server as well.
    "FILE_AGENT_PUBLISH",
    "SANDBOX_CANARY_INTERVAL",
    "SANDBOX_CANARY_ADDRESSES",
    "FILE_AGENT_DATA_CLAIM",
    "SANDBOX_API_OUTAGE_MAX",
    "SANDBOX_POD_START_TIMEOUT",
    // The tests' venvs (set in the environment of a test run, which starts servers).
    "FILE_AGENT_TEST_PYTHON_ENV",
    "FILE_AGENT_TEST_SDK_ENV",
];

/// An unknown variable of ours, and the known name it most likely meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    /// The name as set.
    pub name: String,
    /// The closest known name, when one is close enough to be a misspelling.
    pub closest: Option<&'static str>,
}

impl std::fmt::Display for Unknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.closest {
            Some(closest) => write!(
                f,
                "{} is not a file-agent setting and is ignored; did you mean {closest}?",
                self.name
            ),
            None => write!(
                f,
                "{} is not a file-agent setting and is ignored (the settings table in docs/OPERATING.md lists them all)",
                self.name
            ),
        }
    }
}

/// The names among `names` that have one of our [`PREFIXES`] but are not [`KNOWN`], sorted.
pub fn unknown(names: impl IntoIterator<Item = String>) -> Vec<Unknown> {
    let mut found: Vec<Unknown> = names
        .into_iter()
        .filter(|name| PREFIXES.iter().any(|prefix| name.starts_with(prefix)))
        .filter(|name| !KNOWN.contains(&name.as_str()))
        .map(|name| {
            let closest = closest(&name);
            Unknown { name, closest }
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// The variables of this process's environment (after `.env`) that [`unknown`] finds.
pub fn unknown_in_env() -> Vec<Unknown> {
    unknown(std::env::vars_os().filter_map(|(name, _)| name.into_string().ok()))
}

/// The known name closest to `name` by edit distance, if it is within a third of its length.
fn closest(name: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .map(|known| (edit_distance(name, known), *known))
        .min()
        .filter(|(distance, _)| *distance <= (name.len() / 3).max(1))
        .map(|(_, known)| known)
}

/// The Levenshtein distance of two ASCII-ish names, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_variable_is_found_with_the_name_it_meant() {
        let found = unknown(
            [
                "SANDBOX_RUNTME",
                "FILE_AGENT_ACCES_TOKENS",
                "SANDBOX_RUNTIME",
                "PATH",
                "FILE_AGENT_SOMETHING_ELSE_ENTIRELY",
            ]
            .map(String::from),
        );
        assert_eq!(
            found,
            vec![
                Unknown {
                    name: "FILE_AGENT_ACCES_TOKENS".into(),
                    closest: Some("FILE_AGENT_ACCESS_TOKENS"),
                },
                Unknown {
                    name: "FILE_AGENT_SOMETHING_ELSE_ENTIRELY".into(),
                    closest: None,
                },
                Unknown {
                    name: "SANDBOX_RUNTME".into(),
                    closest: Some("SANDBOX_RUNTIME"),
                },
            ]
        );
        assert!(
            found[2]
                .to_string()
                .contains("did you mean SANDBOX_RUNTIME?")
        );
    }

    /// Every name the configuration reads, in any of a few configurations, is known.
    #[test]
    fn every_variable_the_configuration_reads_is_known() {
        let read = std::cell::RefCell::new(std::collections::BTreeSet::new());
        for set in [
            &[][..],
            &[("INTERNAL_API_URL", "http://open-webui:8080")][..],
            &[("FILE_AGENT_AUDIT_FILE", "off"), ("SANDBOX_WARM", "0")][..],
        ] {
            let _ = super::super::Config::from_lookup(|name| {
                read.borrow_mut().insert(name.to_string());
                set.iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| value.to_string())
            });
        }
        let read = read.into_inner();
        assert!(read.len() > 30, "{read:?}");
        for name in read {
            assert!(
                KNOWN.contains(&name.as_str()),
                "{name} is read but not in KNOWN"
            );
        }
    }
}
