//! `file-agent doctor`: is everything in place to run attempts, and if not, what fixes it. It
//! reads the same configuration as `serve` (what `serve` refuses, it refuses), names variables
//! that look like ours but are not (a misspelt setting is otherwise off in silence), and asks
//! the model API and Open WebUI whether they answer.

use std::process::ExitCode;
use std::time::Duration;

use crate::config::{Config, StorageConfig};
use crate::sandbox::Sandbox;
use crate::sandbox::kubernetes::Cluster;

/// How long doctor waits for the model API or Open WebUI.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Prints one line per check; exits 1 when something must be fixed.
pub(super) async fn doctor(config: Config) -> anyhow::Result<ExitCode> {
    let mut checks = Checks::default();
    for unknown in crate::config::names::unknown_in_env() {
        checks.line(Some(false), "settings", unknown.to_string());
    }
    match crate::server::auth::AccessTokens::load(&config.server) {
        Err(error) => checks.line(Some(false), "tokens", error.to_string()),
        Ok(tokens) => checks.problems += front_door(&config, &tokens),
    }
    checks.problems += probe_services(&config).await;
    audit_checks(&mut checks, &config);
    let config = config.sandbox;
    let limits = config.limits.clone();
    let image = config.image.clone();
    let runtime = config.runtime.clone();
    let kubernetes = config.backend.name() == "kubernetes";
    let sandbox = match Sandbox::connect(config).await {
        Ok(sandbox) => sandbox,
        Err(error) => {
            let what = if kubernetes { "api     " } else { "docker  " };
            println!("{what} FAIL  {error}");
            return Ok(ExitCode::from(1));
        }
    };
    if let Some(cluster) = sandbox.cluster() {
        kubernetes_checks(&mut checks, &sandbox, cluster, runtime.as_deref()).await;
    } else {
        docker_checks(&mut checks, &sandbox, &image, runtime.as_deref()).await?;
        limit_lines(&limits);
    }
    Ok(checks.exit_code())
}

/// The checks' verdicts so far: each prints its line, and a failure counts.
#[derive(Debug, Default)]
struct Checks {
    /// Checks that failed.
    problems: usize,
}

impl Checks {
    /// Prints `what`, the verdict (`ok`, `FAIL`, or `?` when it could not be told) and `text`.
    fn line(&mut self, ok: Option<bool>, what: &str, text: String) {
        let verdict = match ok {
            Some(true) => "ok   ",
            Some(false) => {
                self.problems += 1;
                "FAIL "
            }
            None => "?    ",
        };
        println!("{what:<9}{verdict} {text}");
    }

    /// 1 when something must be fixed.
    fn exit_code(&self) -> ExitCode {
        if self.problems == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }
    }
}

/// `doctor` with Docker: the engine, the image and the runtime.
async fn docker_checks(
    checks: &mut Checks,
    sandbox: &Sandbox,
    image: &str,
    runtime: Option<&str>,
) -> anyhow::Result<()> {
    let diagnosis = sandbox.diagnose().await?;
    checks.line(
        Some(true),
        "docker",
        format!(
            "engine {}, API {} (negotiated), cgroup v{}",
            diagnosis.engine_version, diagnosis.api_version, diagnosis.cgroup_version
        ),
    );
    image_check(checks, image, diagnosis.image.as_ref());
    if diagnosis.image.is_some() {
        package_check(checks, sandbox, image).await;
    }
    let (ok, line) = runtime_line(runtime, &diagnosis.runtimes);
    checks.line(Some(ok), "runtime", line);
    Ok(())
}

/// Whether the sandbox image is on the engine: its id and size, or how to get it.
fn image_check(checks: &mut Checks, image: &str, found: Option<&(String, i64)>) {
    match found {
        Some((id, size)) => checks.line(
            Some(true),
            "image",
            format!(
                "{image} ({}, {:.0} MB)",
                id.trim_start_matches("sha256:").get(..12).unwrap_or(id),
                *size as f64 / 1e6
            ),
        ),
        None if image == crate::sandbox::image::default_tag() => checks.line(
            Some(false),
            "image",
            format!("{image} is missing; build it with `file-agent image build`"),
        ),
        None => checks.line(
            Some(false),
            "image",
            format!(
                "{image} (SANDBOX_IMAGE) is missing; build or pull it, or unset SANDBOX_IMAGE to use the one `file-agent image build` builds"
            ),
        ),
    }
}

/// What the image holds, from its manifest: how many packages, the extra ones (`name==version`)
/// and the list they came from; a failure when the image was built from another extra list
/// than `SANDBOX_EXTRA_PACKAGES` names (possible only with `SANDBOX_IMAGE` set).
async fn package_check(checks: &mut Checks, sandbox: &Sandbox, image: &str) {
    use crate::config::packages::Manifest;
    let configured = sandbox.config().extra_packages.as_deref();
    let (manifest, source) = match sandbox.image_manifest(image).await {
        Ok(Some(manifest)) => (manifest, "the image's manifest"),
        Ok(None) | Err(_) => (
            Manifest::from_lists(configured),
            "the lists (the image has no manifest label: rebuild it with `file-agent image build`)",
        ),
    };
    let wanted = Manifest::from_lists(configured)
        .extra_list
        .map(|list| list.sha256);
    let built = manifest.extra_list.as_ref().map(|list| list.sha256.clone());
    let extras = match &manifest.extra_list {
        Some(list) => format!(
            "; extra packages from {}: {}",
            list.name,
            manifest.extras().join(", ")
        ),
        None => "; no extra packages".to_string(),
    };
    let line = format!(
        "{} importable packages{}{extras} (from {source})",
        manifest.packages.len(),
        if manifest.python.is_empty() {
            String::new()
        } else {
            format!(" for Python {}", manifest.python)
        },
    );
    if wanted != built && source == "the image's manifest" {
        checks.line(
            Some(false),
            "packages",
            format!(
                "{line}; but SANDBOX_EXTRA_PACKAGES names {}: build the image with that list (`file-agent image build`) or unset SANDBOX_IMAGE",
                configured.map_or("no list".to_string(), |list| list.path.display().to_string())
            ),
        );
    } else {
        checks.line(Some(true), "packages", line);
    }
}

/// What every attempt is held to: the limits, the outputs kept, the container's policy.
fn limit_lines(limits: &crate::config::Limits) {
    println!(
        "limits   ok    timeout {} s, memory {} MiB (no swap), {} CPU, {} pids, {} open files, /tmp {} MiB",
        limits.timeout.as_secs(),
        limits.memory_bytes >> 20,
        limits.cpus,
        limits.pids,
        limits.nofile,
        limits.tmp_bytes >> 20
    );
    println!(
        "outputs  ok    {} MiB and {} files at most; stdout and stderr kept up to {} bytes each",
        limits.output_max_bytes >> 20,
        limits.output_max_files,
        limits.stdio_max_bytes
    );
    println!(
        "policy   ok    network none, read-only root, all capabilities dropped, no-new-privileges, user 10001, checked after every create"
    );
}

/// Asks the model API (`GET /models` with the key) and Open WebUI (`GET /health`) whether they
/// answer; prints a line for each and returns how many failed.
async fn probe_services(config: &Config) -> usize {
    let Ok(client) = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build() else {
        return 0;
    };
    let mut problems = 0;
    let llm = &config.llm;
    match &llm.api_key {
        None => println!(
            "model    ok    no OPENAI_API_KEY: run_python and the saved tools work, the tools that need the model answer with an error"
        ),
        Some(key) => {
            let url = format!("{}/models", llm.base_url);
            let answer = client.get(&url).bearer_auth(key.expose()).send().await;
            let (ok, line) = probe_line(&url, answer, "OPENAI_BASE_URL and OPENAI_API_KEY");
            problems += usize::from(!ok);
            println!("model    {} {line}", if ok { "ok   " } else { "FAIL " });
        }
    }
    if let StorageConfig::OpenWebUi(owui) = &config.storage {
        let url = format!("{}/health", owui.internal_url);
        let answer = client.get(&url).send().await;
        let (ok, line) = probe_line(&url, answer, "INTERNAL_API_URL");
        problems += usize::from(!ok);
        println!("openwebui {} {line}", if ok { "ok  " } else { "FAIL" });
    }
    problems + identity_checks(config).await
}

/// The audit trail's signing key and witnesses; each chain held against the checkpoints its
/// key signed, as the server's start-up check and `audit verify --key` hold it (a contradiction
/// is a failure: the server signs nothing on that chain until an operator acts); and what the
/// witnesses answered last, as the record beside the chain says (unsigned): a checkpoint one
/// refused as inconsistent is a failure, as is one refused for its configuration; one
/// unreachable is a doubt.
fn audit_checks(checks: &mut Checks, config: &Config) {
    use crate::audit::checkpoints;
    let folder = match &config.audit.place {
        crate::config::AuditPlace::Folder(folder) => folder.clone(),
        crate::config::AuditPlace::File(path) => path
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .to_path_buf(),
        crate::config::AuditPlace::Off => return,
    };
    let signing = match checkpoints::settings(&config.audit, &config.data_dir, Some(&folder)) {
        Ok(Some((key, witnesses))) => {
            checks.line(
                Some(true),
                "audit",
                format!(
                    "checkpoints signed every {} s by {} ({} witnesses)",
                    config.audit.checkpoint_interval.as_secs(),
                    key.verifier(),
                    witnesses.len()
                ),
            );
            Some((key.verifier(), witnesses))
        }
        Ok(None) => {
            checks.line(
                Some(true),
                "audit",
                "checkpoints are not signed: whoever can write the audit folder can rewrite the trail unseen (FILE_AGENT_AUDIT_SIGNING_KEY_FILE, docs/SECURITY.md)".into(),
            );
            None
        }
        Err(error) => {
            checks.line(Some(false), "audit", error);
            None
        }
    };
    let chains = crate::audit::chain::chains(&folder).unwrap_or_default();
    if let Some((key, witnesses)) = &signing {
        signed_chain_checks(checks, config, &chains, key, witnesses);
    }
    for chain in chains {
        witness_lines(checks, &chain);
    }
}

/// What the witnesses answered to `chain`'s last kept checkpoint, as its record says (the
/// answers are not signed, and are shown as such).
fn witness_lines(checks: &mut Checks, chain: &crate::audit::chain::Chain) {
    use crate::audit::checkpoints;
    let Some(live) = chain.files.last() else {
        return;
    };
    let Some(last) = checkpoints::read(&checkpoints::path_of(live))
        .ok()
        .and_then(|kept| kept.into_iter().last())
    else {
        return;
    };
    let body = crate::audit::note::Note::parse(&last.checkpoint)
        .map_err(|e| e.to_string())
        .and_then(|note| checkpoints::note_body(&last, &note));
    let Ok((body, _)) = body else {
        return;
    };
    for answer in &last.witnesses {
        let ok = match answer.outcome.as_str() {
            "cosigned" => Some(true),
            "unreachable" => None,
            _ => Some(false),
        };
        checks.line(
            ok,
            "witness",
            format!(
                "{} {} the checkpoint of {} lines of {} (as the record kept at {} says; neither is signed){}",
                answer.name,
                answer.outcome,
                body.size,
                body.origin,
                last.time,
                answer
                    .detail
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ),
        );
    }
}

/// Each chain against the checkpoints `key` signed, as `audit verify --key` checks it.
fn signed_chain_checks(
    checks: &mut Checks,
    config: &Config,
    chains: &[crate::audit::chain::Chain],
    key: &crate::audit::note::VerifierKey,
    witnesses: &[crate::audit::checkpoints::Witness],
) {
    use crate::audit::{chain, proof};
    let witness_keys: Vec<_> = witnesses.iter().map(|w| w.key.clone()).collect();
    let origin_of = |chain: &chain::Chain| {
        config.audit.origin.as_deref().map(|prefix| {
            let live = chain.files.last().cloned().unwrap_or_default();
            format!("{prefix}/{}", crate::audit::chain_name(&live))
        })
    };
    let (checked, _) = proof::check_signed_chains(chains, origin_of, key, &witness_keys, &[]);
    for (chain, check) in chains.iter().zip(checked) {
        signed_chain_line(checks, chain, &check);
    }
}

/// The doctor's line for one chain checked against its signed checkpoints.
fn signed_chain_line(
    checks: &mut Checks,
    chain: &crate::audit::chain::Chain,
    check: &crate::audit::proof::SignedCheck,
) {
    if let (Ok(_), Some((first, last))) = (&check.chain, check.unsigned) {
        checks.line(
            None,
            "audit",
            format!(
                "{}: lines {first}..{last} are covered by no signed checkpoint: they prove nothing; if no server writes this chain now, they were written after its last checkpoint (a crash) or by hand, and the next server on it signs them, naming them at start-up",
                chain.name
            ),
        );
    }
    if let Err(broken) = &check.chain {
        checks.line(
            Some(false),
            "audit",
            format!("{}: broken: {broken}", chain.name),
        );
        return;
    }
    if let Some(error) = &check.store_error {
        checks.line(Some(false), "audit", format!("{}: {error}", chain.name));
        return;
    }
    if check.checkpoints.is_empty() {
        checks.line(
            None,
            "audit",
            format!(
                "{}: no checkpoint of {} signed by this key is kept beside it",
                chain.name, check.origin
            ),
        );
        return;
    }
    if !check.problems.is_empty() {
        checks.line(
            Some(false),
            "audit",
            format!(
                "{}: {} (the server signs nothing on it until an operator acts: docs/OPERATING.md, \"The audit alarm\")",
                chain.name,
                check.problems.join("; ")
            ),
        );
        return;
    }
    if let Some((size, point)) = check.checkpoints.last_key_value() {
        checks.line(
            Some(true),
            "audit",
            format!(
                "{}: matches its {} signed checkpoints, the latest of {size} lines{}",
                chain.name,
                check.checkpoints.len(),
                if point.cosigned.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", cosigned by {}",
                        crate::audit::checkpoints::describe_cosigned(&point.cosigned)
                    )
                }
            ),
        );
    }
}

/// Who can call (and from where), the data folder's modes, the connection cap against the
/// descriptor limit.
fn front_door(config: &Config, tokens: &crate::server::auth::AccessTokens) -> usize {
    let problems = access_check(config, tokens) + data_check(config) + links_check(config);
    let descriptors = crate::server::connections::raise_descriptor_limit();
    let cap = crate::server::connections::effective_cap(config.server.max_connections, descriptors);
    println!(
        "clients  ok    {cap} connections at once (FILE_AGENT_MAX_CONNECTIONS {}, descriptor limit {descriptors}), headers and idle within {} s, bodies silent at most {} s, {} uploads at once",
        config.server.max_connections,
        config.server.header_timeout.as_secs(),
        config.server.body_timeout.as_secs(),
        config.server.max_uploads
    );
    println!("long     ok    {}", long_calls(config));
    problems
}

/// What the longest call needs of everything between file-agent and the user: the longest
/// call the settings allow, the keep-alive, and the settings of a proxy and of Open WebUI
/// that must let it live (docs/PRODUCTION.md#long-calls).
fn long_calls(config: &Config) -> String {
    use crate::tools::catalog::Tool;
    let call = config.admission.call_timeout.as_secs();
    let research = Tool::DeepResearch
        .deadline(config.admission.call_timeout, config.research.max_wait)
        .as_secs();
    format!(
        "the longest call: {research} s for research (FILE_AGENT_RESEARCH_TIMEOUT {} s and a minute), {call} s for the others (FILE_AGENT_CALL_TIMEOUT); a call still working after {keep} s is answered with SSE, a comment every {keep} s (FILE_AGENT_KEEP_ALIVE): a proxy in front needs a read timeout above {keep} s and no buffering of text/event-stream, and Open WebUI AIOHTTP_CLIENT_TIMEOUT_TOOL_SERVER unset or above {research} s. A research run whose client leaves goes on; its report is kept {} s (FILE_AGENT_RESEARCH_KEEP) for the caller's next call, at most {} at once",
        config.research.max_wait.as_secs(),
        config.research.keep_for.as_secs(),
        config.research.kept_max,
        keep = config.server.keep_alive.as_secs(),
    )
}

/// Who can call, from where and with which credential; 1 when a non-loopback address asks
/// for none.
fn access_check(config: &Config, tokens: &crate::server::auth::AccessTokens) -> usize {
    let listen = config.server.listen;
    let mut credentials = Vec::new();
    if tokens.enabled() {
        credentials.push("access tokens (FILE_AGENT_ACCESS_TOKENS)".to_string());
    }
    if let Some(oauth) = &config.identity.oauth {
        credentials.push(format!("OAuth tokens from {}", oauth.issuers.join(", ")));
    }
    match (
        crate::server::gate::require_credential_beyond_loopback(listen, tokens, config),
        credentials.is_empty(),
    ) {
        (Err(error), _) => {
            println!("access   FAIL  {error}");
            return 1;
        }
        (Ok(()), true) => println!(
            "access   ok    {listen} is loopback only: every program on this host may call, no credential is asked"
        ),
        (Ok(()), false) => println!(
            "access   ok    {listen}: callers need {}",
            credentials.join(" or ")
        ),
    }
    0
}

/// Whether users can open the local store's download links; 1 when they cannot
/// ([`Config::unreachable_links`]).
fn links_check(config: &Config) -> usize {
    match (config.unreachable_links(), &config.storage) {
        (Some(problem), _) => {
            println!("links    FAIL  {problem}");
            1
        }
        (None, crate::config::StorageConfig::Local(local)) => {
            println!(
                "links    ok    download links start with {}",
                local.public_url
            );
            0
        }
        (None, crate::config::StorageConfig::OpenWebUi(_)) => 0,
    }
}

/// The data folder's modes: what other users could read; 1 when they cannot be read.
fn data_check(config: &Config) -> usize {
    let found = match crate::server::private::inspect(config) {
        Err(error) => {
            println!("data     FAIL  {error}");
            return 1;
        }
        Ok(found) => found,
    };
    let open: Vec<String> = found
        .iter()
        .filter(|checked| checked.verdict != "private")
        .map(|checked| {
            format!(
                "{} {:04o} ({})",
                checked.path.display(),
                checked.mode,
                checked.verdict
            )
        })
        .collect();
    if open.is_empty() {
        println!(
            "data     ok    {} and what is in it: no access for other users (serve creates folders 0700, files 0600)",
            config.data_dir.display()
        );
    } else {
        println!("data     ok    {}", open.join("; "));
    }
    0
}

/// Who can be named a user, and each OAuth issuer's metadata and keys, fetched now.
async fn identity_checks(config: &Config) -> usize {
    match &config.identity.openwebui_jwt {
        Some(jwt) => println!(
            "identity ok    Open WebUI's users are proven by its signed token in {} (FILE_AGENT_OPENWEBUI_USER_JWT_SECRET); plain X-OpenWebUI-User-* headers are ignored",
            jwt.header
        ),
        None => println!(
            "identity ok    Open WebUI's users are named by plain X-OpenWebUI-User-Id headers, which prove nothing; for per-user set-ups set FILE_AGENT_OPENWEBUI_USER_JWT_SECRET (and FORWARD_USER_INFO_HEADER_JWT_SECRET in Open WebUI)"
        ),
    }
    match &config.identity.oauth {
        Some(oauth) => oauth_checks(config, oauth).await,
        None => 0,
    }
}

/// Each OAuth issuer's metadata and signing keys, fetched now; returns how many failed.
async fn oauth_checks(config: &Config, oauth: &crate::config::OAuthConfig) -> usize {
    let public_url = config.server.public_url.trim_end_matches('/');
    let verifier = match crate::identity::oauth::OAuth::new(oauth, &format!("{public_url}/mcp")) {
        Ok(verifier) => verifier,
        Err(error) => {
            println!("oauth    FAIL  cannot build the HTTP client: {error}");
            return 1;
        }
    };
    println!(
        "oauth    ok    tokens must be issued for {} (FILE_AGENT_OAUTH_AUDIENCE), user claim {:?}",
        verifier.audience(),
        oauth.user_claim
    );
    let mut problems = 0;
    for check in verifier.check().await {
        problems += usize::from(!issuer_check(&check));
    }
    problems
}

/// One issuer's metadata and keys: whether file-agent can check its tokens (the line says
/// why not).
fn issuer_check(check: &crate::identity::oauth::IssuerCheck) -> bool {
    match (&check.metadata, &check.keys) {
        (Ok((metadata, _)), Ok(keys)) if !keys.is_empty() => {
            println!(
                "oauth    ok    {}: metadata at {metadata}, signing keys {}",
                check.issuer,
                keys.join(", ")
            );
            true
        }
        (Ok((_, jwks)), Ok(_)) => {
            println!(
                "oauth    FAIL  {}: its key set {jwks} holds no key file-agent can use (RS256, PS256, ES256, EdDSA)",
                check.issuer
            );
            false
        }
        (Err(error), _) | (_, Err(error)) => {
            println!(
                "oauth    FAIL  {}: {error}; check FILE_AGENT_OAUTH_ISSUER (exactly as the issuer writes `iss`)",
                check.issuer
            );
            false
        }
    }
}

/// Whether a probe of `url` answered with success, and the line saying so (or which
/// variables to check).
fn probe_line(
    url: &str,
    answer: Result<reqwest::Response, reqwest::Error>,
    check: &str,
) -> (bool, String) {
    match answer {
        Ok(response) if response.status().is_success() => (true, format!("{url} answers")),
        Ok(response) => (
            false,
            format!("{url} answered {}; check {check}", response.status()),
        ),
        Err(error) => (
            false,
            format!("no answer from {url} ({error}); check {check}"),
        ),
    }
}

/// The RBAC verbs the Kubernetes backend uses: (verb, API group, resource).
const KUBERNETES_VERBS: [(&str, &str, &str); 9] = [
    ("create", "", "pods"),
    ("get", "", "pods"),
    ("list", "", "pods"),
    ("watch", "", "pods"),
    ("delete", "", "pods"),
    ("get", "", "pods/attach"),
    ("create", "", "pods/attach"),
    ("get", "", "pods/log"),
    ("list", "networking.k8s.io", "networkpolicies"),
];

/// `doctor` under `SANDBOX_BACKEND=kubernetes`: the API, the namespace, the RuntimeClass, the
/// NetworkPolicy, the network canary, the data claim and every RBAC verb (by
/// SelfSubjectAccessReview).
async fn kubernetes_checks(
    checks: &mut Checks,
    sandbox: &Sandbox,
    cluster: &Cluster,
    runtime: Option<&str>,
) {
    match sandbox.diagnose().await {
        Ok(found) => checks.line(
            Some(true),
            "api",
            format!("API server {}", found.engine_version),
        ),
        Err(error) => checks.line(Some(false), "api", error.to_string()),
    }
    namespace_check(checks, cluster).await;
    runtime_class_check(checks, cluster, runtime).await;
    isolation_check(checks, sandbox, cluster).await;
    if let Some(report) = sandbox.probe_network().await {
        canary_check(checks, report);
    }
    match cluster.data_claim().await {
        Ok(check) => {
            let (ok, text) = check.line();
            checks.line(ok, "storage", text);
        }
        Err(error) => checks.line(Some(false), "storage", error.to_string()),
    }
    rbac_checks(checks, cluster).await;
    println!(
        "policy   ok    Pod Security restricted, uid 10001, read-only root, no service-account token, limits = requests, checked after every create"
    );
}

/// Whether a NetworkPolicy denies the sandbox pods all traffic.
async fn isolation_check(checks: &mut Checks, sandbox: &Sandbox, cluster: &Cluster) {
    let namespace = cluster.namespace();
    match sandbox.check_isolation().await {
        Ok(()) => checks.line(
            Some(true),
            "network",
            format!(
                "a NetworkPolicy in {namespace} denies all ingress and egress to the sandbox pods (the CNI must enforce it)"
            ),
        ),
        Err(error) => checks.line(Some(false), "network", error.to_string()),
    }
}

/// Whether the sandbox's namespace exists (when doctor may read namespaces).
async fn namespace_check(checks: &mut Checks, cluster: &Cluster) {
    let namespace = cluster.namespace().to_string();
    match cluster.namespace_exists().await {
        Ok(Some(true)) => checks.line(Some(true), "namespace", namespace),
        Ok(Some(false)) => checks.line(
            Some(false),
            "namespace",
            format!(
                "{namespace} does not exist; kubectl apply -k deploy/kubernetes (or set SANDBOX_NAMESPACE)"
            ),
        ),
        Ok(None) => checks.line(
            None,
            "namespace",
            format!(
                "{namespace}: not allowed to read namespaces (not needed to run); pod creation fails if it is missing"
            ),
        ),
        Err(error) => checks.line(Some(false), "namespace", error.to_string()),
    }
}

/// Whether the RuntimeClass asked for exists, or what the cluster's default means.
async fn runtime_class_check(checks: &mut Checks, cluster: &Cluster, runtime: Option<&str>) {
    let Some(name) = runtime else {
        return checks.line(Some(true), "runtime", "the cluster's default; for users you do not trust, install gVisor on the nodes and set SANDBOX_RUNTIME=gvisor (deploy/kubernetes/runtimeclass.yaml)".into());
    };
    match cluster.runtime_class_exists(name).await {
        Ok(Some(true)) => checks.line(Some(true), "runtime", format!("RuntimeClass {name}")),
        Ok(Some(false)) => checks.line(Some(false), "runtime", format!("RuntimeClass {name} does not exist; apply deploy/kubernetes/runtimeclass.yaml or unset SANDBOX_RUNTIME")),
        Ok(None) => checks.line(None, "runtime", format!("RuntimeClass {name}: not allowed to read RuntimeClasses; pod creation fails if it is missing")),
        Err(error) => checks.line(Some(false), "runtime", error.to_string()),
    }
}

/// The network canary's verdict: whether a pod made like an attempt's reached the network.
fn canary_check(checks: &mut Checks, report: crate::sandbox::CanaryReport) {
    use crate::sandbox::Verdict;
    let targets = report.targets.join(", ");
    match report.verdict {
        Verdict::Isolated => checks.line(
            Some(true),
            "canary",
            format!("a pod made like an attempt's reached none of {targets}"),
        ),
        Verdict::Reached(reached) => checks.line(
            Some(false),
            "canary",
            format!(
                "a pod made like an attempt's reached {}: the sandbox pods have network, and the server runs no code while its canary says so; fix the NetworkPolicy, the CNI's enforcement or a cluster-wide policy",
                reached.join(", ")
            ),
        ),
        Verdict::Failed(error) => checks.line(
            Some(false),
            "canary",
            format!(
                "the network canary could not conclude: {error}; the server runs no code until one reaches nothing (it tries again within seconds), so find why the pod did not start or finish"
            ),
        ),
        Verdict::Pending => checks.line(None, "canary", "no verdict".into()),
    }
}

/// Whether the server's service account may do each of [`KUBERNETES_VERBS`].
async fn rbac_checks(checks: &mut Checks, cluster: &Cluster) {
    let namespace = cluster.namespace();
    for (verb, group, resource) in KUBERNETES_VERBS {
        match cluster.may(verb, group, resource).await {
            Ok(true) => checks.line(Some(true), "rbac", format!("{verb} {resource}")),
            Ok(false) => checks.line(
                Some(false),
                "rbac",
                format!(
                    "{verb} {resource} is not allowed in {namespace}; grant it in the Role (deploy/kubernetes/rbac.yaml)"
                ),
            ),
            Err(error) => checks.line(Some(false), "rbac", error.to_string()),
        }
    }
}

/// The runtime line: whether the configured runtime can run, and what to do about it.
fn runtime_line(runtime: Option<&str>, registered: &[String]) -> (bool, String) {
    let has_gvisor = registered.iter().any(|name| name == "runsc");
    match runtime {
        None if has_gvisor => (
            true,
            "the engine's default (runc); gVisor is registered too: set SANDBOX_RUNTIME=runsc for users you do not trust".into(),
        ),
        None => (
            true,
            "the engine's default (runc); for users you do not trust, install gVisor (scripts/bootstrap.sh does) and set SANDBOX_RUNTIME=runsc".into(),
        ),
        Some(name) if registered.iter().any(|known| known == name) => (
            true,
            if name == "runsc" {
                "runsc (gVisor)".into()
            } else {
                name.to_string()
            },
        ),
        Some(name) => (
            false,
            format!(
                "{name} is not registered with the engine (it has: {}); {}",
                registered.join(", "),
                if name == "runsc" {
                    "scripts/bootstrap.sh installs gVisor and registers it, or unset SANDBOX_RUNTIME"
                } else {
                    "register it in /etc/docker/daemon.json, or unset SANDBOX_RUNTIME"
                }
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_line_says_what_to_do() {
        let both = ["runc".to_string(), "runsc".to_string()];
        let runc = ["runc".to_string()];
        let (ok, line) = runtime_line(None, &both);
        assert!(ok && line.contains("gVisor is registered"), "{line}");
        let (ok, line) = runtime_line(None, &runc);
        assert!(ok && line.contains("install gVisor"), "{line}");
        assert_eq!(
            runtime_line(Some("runsc"), &both),
            (true, "runsc (gVisor)".into())
        );
        let (ok, line) = runtime_line(Some("runsc"), &runc);
        assert!(!ok && line.contains("scripts/bootstrap.sh"), "{line}");
        let (ok, line) = runtime_line(Some("kata"), &both);
        assert!(
            !ok && line.contains("it has: runc, runsc") && line.contains("daemon.json"),
            "{line}"
        );
    }

    #[test]
    fn the_long_calls_line_names_the_longest_call_and_what_it_needs() {
        let config = Config::from_lookup(|name| match name {
            "FILE_AGENT_RESEARCH_TIMEOUT" => Some("1200".into()),
            "FILE_AGENT_KEEP_ALIVE" => Some("20".into()),
            _ => None,
        })
        .unwrap();
        let line = long_calls(&config);
        for said in [
            "1260 s for research",
            "600 s for the others",
            "a comment every 20 s",
            "AIOHTTP_CLIENT_TIMEOUT_TOOL_SERVER unset or above 1260 s",
            "kept 86400 s",
        ] {
            assert!(line.contains(said), "{said}: {line}");
        }
    }
}
