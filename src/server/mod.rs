//! The running server: builds the parts from a [`Config`] (two phases: the config was parsed
//! with no I/O; here the clients are made), then serves MCP over Streamable HTTP at `/mcp`
//! (stateless, so replicas can share load), `/health`, and the local store's `/files` routes;
//! or MCP over stdio.
//!
//! Shutdown: SIGINT/SIGTERM cancel the root token; the accept loop ([`connections`]) stops
//! accepting and lets running calls finish for `FILE_AGENT_SHUTDOWN_GRACE`, then
//! `Tools::stopping` stops the rest. Each call's
//! token fires when its HTTP client disconnects (or on `notifications/cancelled` over stdio) or
//! at that stop; the tools hand it to the attempt, whose container guard removes the container.
//! The stopped calls and the sandbox's pending removals are awaited before exit. Leftovers of a
//! crash are reaped at start-up and every `FILE_AGENT_REAP_INTERVAL`.

pub mod auth;
pub mod checkpoints;
pub mod connections;
mod files;
pub mod gate;
pub mod hosts;
pub mod long_calls;
pub mod private;
pub mod requests;
pub mod retention;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::audit::AuditLog;
use crate::config::{AuditOnFailure, AuditPlace, Config};
use crate::llm::Llm;
use crate::mcp::{FileAgentServer, InFlight, TaskStore};
use crate::prompts::Prompts;
use crate::sandbox::{ReapFilter, ReapScope, Runner, Sandbox};
use crate::storage::Storage;
use crate::storage::url::UrlFetcher;
use crate::tools::Tools;
use crate::tools::dynamic::SavedTools;
use auth::AccessTokens;
use gate::Gate;

/// Largest MCP request body (a `run_python` script is the biggest thing sent).
pub(crate) const MAX_MCP_BODY_BYTES: usize = 4 * 1024 * 1024;
/// In the data folder: held locked by the server whose containers carry the folder's stable
/// instance label.
const INSTANCE_LOCK_FILE: &str = ".sandbox-instance.lock";
/// How long shutdown waits for stopped calls to remove their containers.
const CALLS_STOP_WAIT: Duration = Duration::from_secs(30);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The sandbox is unusable.
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    /// The store could not be opened.
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
    /// A prompt override is broken.
    #[error(transparent)]
    Prompts(#[from] crate::prompts::PromptError),
    /// The model client could not be built.
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    /// The document fetcher could not be built.
    #[error(transparent)]
    Fetch(#[from] crate::storage::url::FetchError),
    /// The audit trail cannot be written.
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    /// The folder of saved tools cannot be written.
    #[error("{0}; check FILE_AGENT_DATA_DIR, or set FILE_AGENT_DYNAMIC_TOOLS=off")]
    SavedTools(#[from] crate::tools::dynamic::RegistryError),
    /// The data folder or the audit trail is open to other local users.
    #[error(transparent)]
    OpenToOthers(#[from] private::OpenToOthers),
    /// The checkpoints cannot be signed as configured (the key, the witnesses).
    #[error("{0}")]
    Signing(String),
    /// The sandbox image was built from another extra package list than
    /// `SANDBOX_EXTRA_PACKAGES` names.
    #[error("{0}")]
    Packages(String),
}

/// Removes leftover containers: what belongs to no live server (stopped a while ago, or running
/// longer than any live container can), and at start-up every container of this instance,
/// whatever its state (a restarted server cleans up after its own crash at once: the default
/// instance is stable per host and data folder).
async fn reap_leftovers(sandbox: &Sandbox, at_start: bool) {
    let mut filters = vec![ReapFilter {
        scope: ReapScope::safe(sandbox.config()),
        instance: None,
    }];
    if at_start {
        filters.insert(
            0,
            ReapFilter {
                scope: ReapScope::All,
                instance: Some(sandbox.instance().to_string()),
            },
        );
    }
    for filter in filters {
        match sandbox.reap(&filter).await {
            Ok(report) if report.containers > 0 => tracing::warn!(
                containers = report.containers,
                "removed leftover sandbox containers"
            ),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "could not look for leftover containers"),
        }
    }
}

/// The default `SANDBOX_INSTANCE` and the lock that makes it this process's: the
/// [`stable_instance`] of the data folder while no other server holds it (a stdio and an HTTP
/// server may share a folder), else a random one, so that no server ever takes a live
/// sibling's containers for leftovers of its own.
fn claim_instance(data_dir: &std::path::Path) -> (String, Option<std::fs::File>) {
    let path = data_dir.join(INSTANCE_LOCK_FILE);
    let claimed = std::fs::create_dir_all(data_dir)
        .and_then(|()| std::fs::File::create(&path))
        .and_then(|file| match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(error)) => Err(error),
        });
    match claimed {
        Ok(Some(lock)) => (stable_instance(data_dir), Some(lock)),
        Ok(None) => {
            let instance = format!("fa-{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
            tracing::warn!(%instance, folder = %data_dir.display(), "another file-agent server uses this data folder; this one labels its containers with a random instance, so its leftovers are reaped only by age");
            (instance, None)
        }
        Err(error) => {
            tracing::warn!(%error, file = %path.display(), "cannot lock the instance file; using the stable instance without a lock");
            (stable_instance(data_dir), None)
        }
    }
}

/// The default `SANDBOX_INSTANCE`: a hash of the host's name and the data folder's full path,
/// so that a restarted server finds (and removes) what its previous run left, and two servers
/// with different data folders never take each other's containers for their own.
pub fn stable_instance(data_dir: &std::path::Path) -> String {
    use sha2::Digest;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let folder = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let mut hasher = sha2::Sha256::new();
    hasher.update(host.trim().as_bytes());
    hasher.update([0]);
    hasher.update(folder.as_os_str().as_encoded_bytes());
    format!("fa-{}", &hex::encode(hasher.finalize())[..16])
}

/// A replica's instance under Kubernetes: `namespace.pod` (`POD_NAMESPACE`, `POD_NAME`), so
/// that servers of two namespaces whose pods share a name (both `file-agent-0`) never take
/// each other's sandbox pods for their own; the pod's name alone without a namespace. A label
/// value holds 63 characters: a longer one is cut and ends with a hash of the whole.
pub fn kube_instance(namespace: Option<&str>, pod: &str) -> String {
    use sha2::Digest;
    const LABEL_VALUE_MAX: usize = 63;
    let whole = match namespace {
        Some(namespace) => format!("{namespace}.{pod}"),
        None => pod.to_string(),
    };
    if whole.len() <= LABEL_VALUE_MAX {
        return whole;
    }
    let hash = hex::encode(sha2::Sha256::digest(whole.as_bytes()));
    let kept = whole[..LABEL_VALUE_MAX - 17].trim_end_matches(['-', '.', '_']);
    format!("{kept}-{}", &hash[..16])
}

/// Checks that the data folder is private ([`private::secure`]), connects to Docker, opens the
/// store, loads the prompts, builds the model client, and removes leftover containers. A missing image is only warned about (`/health` reports it).
pub async fn build_tools(config: &Config) -> Result<Tools, StartError> {
    for checked in private::secure(config)? {
        if checked.verdict != "private" {
            tracing::warn!(path = %checked.path.display(), mode = format!("{:04o}", checked.mode), "{}", checked.verdict);
        }
    }
    let (sandbox_config, instance_lock) = with_instance(config);
    let instance = sandbox_config.instance.clone().unwrap_or_default();
    let mut parts = ToolParts::load_as(config, &instance)?;
    let sandbox = Sandbox::connect(sandbox_config)
        .await?
        .holding(instance_lock);
    sandbox.check_isolation().await?;
    reap_leftovers(&sandbox, true).await;
    if !sandbox
        .image_present(&config.sandbox.image)
        .await
        .unwrap_or(false)
    {
        tracing::warn!(
            image = %config.sandbox.image,
            "the sandbox image is missing; build it with `file-agent image build` (tools fail until then)"
        );
    }
    // The model is told what the image itself holds, when its manifest can be read; an image
    // built from another extra list than the configured one runs nothing.
    if let Ok(Some(manifest)) = sandbox.image_manifest(&config.sandbox.image).await {
        check_extra_list(&config.sandbox, &manifest)?;
        parts.prompts = Prompts::load_with(config.prompts_dir.as_deref(), &manifest.prompt_text())?;
    }
    let warm = config
        .sandbox
        .warm
        .unwrap_or(config.admission.max_concurrent);
    let sandbox = sandbox
        .with_warm_pool(warm, config.sandbox.warm_max_idle)
        .with_network_canary()
        .await;
    Ok(parts.with_runner(config, Arc::new(sandbox)))
}

/// Refuses an image whose manifest names another extra list (by its bytes' hash) than
/// `SANDBOX_EXTRA_PACKAGES`: possible only with `SANDBOX_IMAGE` set, since the default tag
/// covers the list.
fn check_extra_list(
    config: &crate::config::SandboxConfig,
    manifest: &crate::config::packages::Manifest,
) -> Result<(), StartError> {
    let wanted = crate::config::packages::Manifest::from_lists(config.extra_packages.as_deref());
    let digest =
        |m: &crate::config::packages::Manifest| m.extra_list.as_ref().map(|l| l.sha256.clone());
    if digest(&wanted) == digest(manifest) {
        return Ok(());
    }
    let name = |m: &crate::config::packages::Manifest| {
        m.extra_list
            .as_ref()
            .map_or("no extra list".to_string(), |l| {
                format!("the extra list {}", l.name)
            })
    };
    Err(StartError::Packages(format!(
        "the sandbox image {} was built with {}, but SANDBOX_EXTRA_PACKAGES names {}: build the image with this list (`file-agent image build`, then point SANDBOX_IMAGE at the tag it prints) or unset SANDBOX_IMAGE",
        config.image,
        name(manifest),
        name(&wanted)
    )))
}

/// The sandbox's settings with the instance this server is: the configured one; under
/// Kubernetes, its pod; else the data folder's stable instance, with the lock that claims it
/// (or a random one when another server holds it).
fn with_instance(config: &Config) -> (crate::config::SandboxConfig, Option<std::fs::File>) {
    let mut sandbox_config = config.sandbox.clone();
    let mut instance_lock = None;
    // Under Kubernetes a replica is its pod: its sandbox pods carry its namespace and name.
    if let crate::config::Backend::Kubernetes(kube) = &config.sandbox.backend
        && sandbox_config.instance.is_none()
        && let Some(owner) = kube.owner.as_ref()
    {
        sandbox_config.instance = Some(kube_instance(owner.namespace.as_deref(), &owner.name));
    }
    if sandbox_config.instance.is_none() {
        let (instance, lock) = claim_instance(&config.data_dir);
        sandbox_config.instance = Some(instance);
        instance_lock = lock;
    }
    (sandbox_config, instance_lock)
}

/// Everything of the tools but what runs the attempts, read from the configuration (no
/// Docker): [`build_tools`] adds the sandbox; the tests' fast tier adds a local runner.
pub struct ToolParts {
    prompts: Prompts,
    storage: Storage,
    llm: Llm,
    fetcher: UrlFetcher,
    audit: Option<AuditLog>,
    saved_tools: Option<SavedTools>,
    sessions: crate::tools::session::Sessions,
}

impl ToolParts {
    /// [`Self::load_as`] the configured `SANDBOX_INSTANCE`, else the data folder's stable
    /// instance.
    pub fn load(config: &Config) -> Result<Self, StartError> {
        let instance = config
            .sandbox
            .instance
            .clone()
            .unwrap_or_else(|| stable_instance(&config.data_dir));
        Self::load_as(config, &instance)
    }

    /// Loads the prompts, opens the store and the audit trail (in a shared audit folder, the
    /// chain of `POD_NAME`, else of `instance`), builds the model client and the URL fetcher.
    pub fn load_as(config: &Config, instance: &str) -> Result<Self, StartError> {
        // The packages as the lists say; `build_tools` puts the image's manifest's instead.
        let packages =
            crate::config::packages::Manifest::from_lists(config.sandbox.extra_packages.as_deref());
        let prompts = Prompts::load_with(config.prompts_dir.as_deref(), &packages.prompt_text())?;
        let storage = Storage::new(&config.storage, config.transfer)?;
        let llm = Llm::new(config.llm.clone())?;
        let fetcher = UrlFetcher::new(config.url_fetch.clone(), config.transfer)?;
        let audit = open_audit(config, instance)?;
        if !llm.is_configured() {
            tracing::warn!(
                "OPENAI_API_KEY is not set: the tools that need the model (generate_file, modify_file, analyze_file, data_analysis_tool, conduct_deep_research, generate_tool) will answer with an error; run_python and the saved tools work"
            );
        }
        let saved_tools = SavedTools::open(
            config.dynamic_tools,
            &config
                .data_dir
                .join(crate::tools::dynamic::registry::TOOLS_FOLDER),
        )?;
        let sessions = crate::tools::session::Sessions::open(
            config.data_dir.join(crate::tools::session::SESSIONS_FOLDER),
            config.sessions.clone(),
        )
        .with_trail(audit.as_ref().and_then(|log| log.session_states().cloned()));
        Ok(Self {
            prompts,
            storage,
            llm,
            fetcher,
            audit,
            saved_tools,
            sessions,
        })
    }

    /// The tools, running their attempts with `runner`.
    pub fn with_runner<R: Runner>(self, config: &Config, runner: Arc<R>) -> Tools<R> {
        let tools = Tools::new(
            runner,
            self.llm,
            self.storage,
            self.fetcher,
            Arc::new(self.prompts),
            config.research.clone(),
            config.admission.clone(),
        )
        .with_saved_tools(self.saved_tools)
        .with_sessions(self.sessions);
        let Some(audit) = self.audit.map(Arc::new) else {
            return tools;
        };
        let tools = tools.with_audit(audit.clone());
        if config.receipts == crate::config::ReceiptMode::Signed && audit.signing().is_some() {
            let batcher =
                crate::audit::receipt::Batcher::new(audit, config.audit.checkpoint_interval);
            tools.with_signed_receipts(Arc::new(batcher))
        } else {
            tools
        }
    }
}

/// Opens the audit trail where it is configured: in a shared audit folder, the chain of
/// `POD_NAME`, else of `instance`; `None` when it is off.
fn open_audit(config: &Config, instance: &str) -> Result<Option<AuditLog>, StartError> {
    let (log, folder) = match &config.audit.place {
        AuditPlace::Folder(folder) => {
            let chain = config.audit.chain.as_deref().unwrap_or(instance);
            let log = AuditLog::open_chain(folder, chain, config.audit.clone())?;
            (log, folder.clone())
        }
        AuditPlace::File(path) => {
            let log = AuditLog::open(path, config.audit.clone())?;
            (log, path.parent().unwrap_or(Path::new(".")).to_path_buf())
        }
        AuditPlace::Off => {
            if config.audit.signing_key_file.is_some() {
                tracing::warn!(
                    "FILE_AGENT_AUDIT_SIGNING_KEY_FILE is set but the audit trail is off: nothing is signed"
                );
            }
            tracing::warn!("the audit trail is off (FILE_AGENT_AUDIT_FILE=off)");
            return Ok(None);
        }
    };
    tracing::info!(file = %log.path().display(), origin = log.origin(), "audit trail");
    let signing =
        crate::audit::checkpoints::load(&config.audit, &config.data_dir, Some(&folder), log.path())
            .map_err(StartError::Signing)?;
    let log = match signing {
        Some(signing) => log.with_signing(signing)?,
        None => log,
    };
    // Sessions' states are checked against the trail: every chain of the folder is read.
    Ok(Some(if config.sessions.enabled {
        log.follow_sessions(&folder)
    } else {
        log
    }))
}

/// The HTTP application: `/mcp`, `/health`, `/metrics`, the protected-resource metadata, and
/// `/files` when the local store is in use. `/mcp` and uploads pass the `gate` (credentials
/// and the caller's identity). `shutdown` ends every request rmcp still serves, unanswered.
pub fn router(
    tools: Tools,
    config: &Config,
    gate: Gate,
    shutdown: CancellationToken,
) -> axum::Router {
    let mut app = mcp_routes(&tools, config, &gate, &shutdown)
        .merge(metrics_routes(config))
        .merge(metadata_routes(gate.clone()))
        .route(
            "/health",
            get(health).layer(axum::Extension(HealthProbe::default())),
        )
        .route("/livez", get(livez));
    if let Some(store) = tools.storage().local() {
        app = app.merge(files::routes(
            store.clone(),
            gate,
            config.retention.files,
            config.server.max_uploads,
        ));
    }
    app.layer(axum::middleware::from_fn(requests::reject_ambiguous))
        .layer(axum::middleware::from_fn(requests::nosniff))
        .with_state(tools)
}

/// `/mcp`: rmcp's stateless service behind the JSON-RPC envelope check (which hands a
/// `notifications/cancelled` to the calls under way), the gate and the `Host` check; a long
/// `tools/call` is answered as a stream with keep-alive comments ([`long_calls`]).
fn mcp_routes(
    tools: &Tools,
    config: &Config,
    gate: &Gate,
    shutdown: &CancellationToken,
) -> axum::Router<Tools> {
    let handler_tools = tools.clone();
    // Shared by every request's handler: each POST is served by a handler of its own.
    let (in_flight, tasks) = (InFlight::default(), TaskStore::new(config.tasks.clone()));
    let handler_in_flight = in_flight.clone();
    let mcp = StreamableHttpService::new(
        move || {
            Ok(FileAgentServer::new(handler_tools.clone())
                .with_calls(handler_in_flight.clone(), tasks.clone()))
        },
        Arc::new(NeverSessionManager::default()),
        mcp_config(config, shutdown),
    );
    axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(
            config.server.keep_alive,
            long_calls::stream_long_calls,
        ))
        .layer(axum::middleware::from_fn(requests::check_jsonrpc))
        .layer(axum::Extension(in_flight))
        .layer(axum::middleware::from_fn_with_state(
            gate.clone(),
            gate::admit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            hosts::AllowedHosts::new(config.server.allowed_hosts.as_deref()),
            hosts::require_allowed_host,
        ))
}

/// rmcp's settings for `/mcp`: stateless, JSON answers (SSE once a call sends progress, with
/// keep-alive comments every `FILE_AGENT_KEEP_ALIVE`), the body bound, and the allowed hosts
/// and browser origins.
fn mcp_config(config: &Config, shutdown: &CancellationToken) -> StreamableHttpServerConfig {
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(Some(config.server.keep_alive))
        .with_max_request_body_bytes(MAX_MCP_BODY_BYTES)
        .with_cancellation_token(shutdown.child_token());
    mcp_config = match &config.server.allowed_hosts {
        Some(hosts) => mcp_config.with_allowed_hosts(hosts.clone()),
        None => mcp_config.disable_allowed_hosts(),
    };
    // The MCP spec's advice against DNS rebinding: a browser's Origin must be one we know. A
    // request without an Origin (any non-browser client) passes.
    mcp_config = match &config.server.allowed_origins {
        Some(origins) => mcp_config
            .with_allowed_origins(origins.clone())
            .enforce_origin_validation(),
        None => mcp_config.disable_allowed_origins(),
    };
    mcp_config
}

/// `/metrics`, behind its own token when `FILE_AGENT_METRICS_TOKEN` is set.
fn metrics_routes(config: &Config) -> axum::Router<Tools> {
    let metrics_tokens = AccessTokens::from_secrets(config.server.metrics_token.iter());
    let local_only = !metrics_tokens.enabled() && !config.server.listen.ip().is_loopback();
    axum::Router::new()
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn_with_state(
            metrics_tokens,
            auth::require_token,
        ))
        .layer(axum::middleware::from_fn_with_state(
            local_only,
            this_host_only,
        ))
}

/// `/metrics` of a server that listens beyond loopback without `FILE_AGENT_METRICS_TOKEN`:
/// served to this host only (a request from another address, or of unknown origin, gets 403
/// saying what to set). What it shows (who calls, how often, what fails) is for the operator.
async fn this_host_only(
    State(local_only): State<bool>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let peer = request
        .extensions()
        .get::<connections::Peer>()
        .map(|peer| peer.0);
    if !local_only || peer.is_some_and(|peer| peer.to_canonical().is_loopback()) {
        return next.run(request).await;
    }
    (
        axum::http::StatusCode::FORBIDDEN,
        axum::Json(serde_json::json!({
            "error": "/metrics is served to this host only while FILE_AGENT_METRICS_TOKEN is unset and the server listens beyond loopback; set the token, and have the scraper send it as `Authorization: Bearer <token>`"
        })),
    )
        .into_response()
}

/// The protected-resource metadata, at its path and at the root's.
fn metadata_routes(gate: Gate) -> axum::Router<Tools> {
    axum::Router::new()
        .route(gate::RESOURCE_METADATA_PATH, get(gate::resource_metadata))
        .route(
            gate::RESOURCE_METADATA_ROOT_PATH,
            get(gate::resource_metadata),
        )
        .with_state(gate)
}

/// Serves HTTP on `listener` until `shutdown` fires, then waits for the sandbox's cleanup.
pub async fn serve_http(
    tools: Tools,
    config: &Config,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let gate = open_gate(&tools, config, listener.local_addr()?)?;
    // Ends what rmcp still serves, unanswered: only should a request outlive the stop of the
    // calls by CALLS_STOP_WAIT (`killer` says why).
    let abandon = CancellationToken::new();
    let killer = spawn_killer(
        &tools,
        config.server.shutdown_grace,
        &shutdown,
        abandon.clone(),
    );
    let reaper = config
        .server
        .reap_interval
        .map(|every| spawn_reaper(&tools, every, &shutdown));
    let app = router(tools.clone(), config, gate, abandon)
        .layer(axum::Extension(requests::Draining(shutdown.clone())));
    // The drain: after SIGTERM the listener stays open (readiness says 503, a new tool call is
    // refused with 503, everything else is served) until the last call has ended, or the
    // grace ran out and `killer` stopped the rest.
    let drained = {
        let (shutdown, tools) = (shutdown.clone(), tools.clone());
        async move {
            shutdown.cancelled().await;
            tools.calls_finished().await;
        }
    };
    let result = connections::serve(listener, app, connection_bounds(config), drained).await;
    killer.abort();
    if let Some(reaper) = reaper {
        reaper.abort();
    }
    drain(&tools).await;
    result
}

/// The gate of `/mcp` and uploads, from the access tokens and the OAuth issuers; refuses to
/// serve `address` beyond loopback without a credential, and warns about what is left open.
fn open_gate(
    tools: &Tools,
    config: &Config,
    address: std::net::SocketAddr,
) -> std::io::Result<Gate> {
    let tokens = AccessTokens::load(&config.server).map_err(std::io::Error::other)?;
    gate::require_credential_beyond_loopback(address, &tokens, config)
        .map_err(std::io::Error::other)?;
    let open = !tokens.enabled() && config.identity.oauth.is_none();
    let gate = Gate::new(tokens, config, tools.storage().openwebui().cloned())
        .map_err(std::io::Error::other)?;
    if let Some(oauth) = gate.oauth().cloned() {
        tracing::info!(issuers = ?oauth.issuers(), audience = oauth.audience(), "OAuth access tokens accepted");
        if !config.server.pinned.public_url
            && config
                .identity
                .oauth
                .as_ref()
                .is_some_and(|o| o.audience.is_none())
        {
            tracing::warn!(
                audience = oauth.audience(),
                "FILE_AGENT_PUBLIC_URL is not set, so OAuth tokens must be issued for this address; set it to the URL MCP clients use, or they get 401 'not issued for this server'"
            );
        }
        tokio::spawn(async move { oauth.warm_up().await });
    }
    if open {
        warn_open(config);
    }
    Ok(gate)
}

/// What a server without credentials leaves open: every local program may call, and per-user
/// saved tools rest on Open WebUI's headers alone.
fn warn_open(config: &Config) {
    tracing::warn!(
        "no FILE_AGENT_ACCESS_TOKENS and no FILE_AGENT_OAUTH_ISSUER: every program on this host can call the tools (the server listens on loopback only); set tokens or an issuer before listening beyond it"
    );
    if config.dynamic_tools == crate::config::DynamicTools::PerUser {
        tracing::warn!(
            "saved tools are per user, and without access tokens only Open WebUI's user headers name the user: set ENABLE_FORWARD_USER_INFO_HEADERS=true in Open WebUI (with FORWARD_USER_INFO_HEADER_JWT_SECRET, and FILE_AGENT_OPENWEBUI_USER_JWT_SECRET here), or FILE_AGENT_DYNAMIC_TOOLS=shared for a team that may share its tools; requests naming no user get no saved tools"
        );
    }
}

/// The second step of shutdown, on SIGTERM: stop accepting and let running calls finish
/// (the drain in [`serve_http`], the first step); after `grace`, stop the calls, which kills
/// their containers. A stopped call still answers its caller (an error: it was cancelled), and
/// the listener waits for that answer as for any other. rmcp's own token, `abandon`, is not
/// the calls' stop: fired with it, rmcp would drop the stopped calls' answers, and with them
/// those of calls that had just ended (their callers saw the connection close, "Transport
/// closed"). It fires only should a request still be unanswered [`CALLS_STOP_WAIT`] after the
/// stop (a call that ignores it), so that the server exits all the same.
fn spawn_killer(
    tools: &Tools,
    grace: Duration,
    shutdown: &CancellationToken,
    abandon: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let (shutdown, tools) = (shutdown.clone(), tools.clone());
    tokio::spawn(async move {
        shutdown.cancelled().await;
        tracing::info!(
            grace_s = grace.as_secs(),
            calls = tools.calls_running(),
            "shutting down: running calls may finish (new tool calls get 503), then the server exits"
        );
        tokio::time::sleep(grace).await;
        tracing::warn!(
            calls = tools.calls_running(),
            "shutdown grace period over: stopping the calls still running (their callers get an error)"
        );
        tools.stopping().cancel();
        tokio::time::sleep(CALLS_STOP_WAIT).await;
        tracing::error!(
            wait_s = CALLS_STOP_WAIT.as_secs(),
            "requests still unanswered after the calls were stopped: ending them without an answer"
        );
        abandon.cancel();
    })
}

/// Reaps leftovers `every` so often until `shutdown`.
fn spawn_reaper(
    tools: &Tools,
    every: Duration,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let (sandbox, shutdown) = (tools.sandbox().clone(), shutdown.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(every) => reap_leftovers(&sandbox, false).await,
            }
        }
    })
}

/// The accept loop's bounds: the timeouts, and the connection cap kept below the descriptor
/// limit (raised first as far as allowed).
fn connection_bounds(config: &Config) -> connections::Bounds {
    let descriptors = connections::raise_descriptor_limit();
    let max_connections = connections::effective_cap(config.server.max_connections, descriptors);
    let bounds = connections::Bounds {
        header_timeout: config.server.header_timeout,
        body_timeout: config.server.body_timeout,
        write_timeout: config.server.write_timeout,
        max_connections,
        max_per_peer: connections::per_peer_cap(
            config.server.max_connections_per_peer,
            max_connections,
        ),
    };
    if bounds.max_connections < config.server.max_connections {
        tracing::warn!(
            descriptors,
            connections = bounds.max_connections,
            "FILE_AGENT_MAX_CONNECTIONS is lowered to stay below the descriptor limit (raise it with `ulimit -n` or LimitNOFILE=)"
        );
    }
    bounds
}

/// The last stage of every shutdown, whatever the transport: stop the calls still running
/// (their containers are killed and removed) and wait for them, then drain the warm pool and
/// wait for the removals under way; sign a last checkpoint of the audit trail. The stages before it are the signal (`cli::shutdown_token`,
/// a token: what mini-redis's `Shutdown` is, with "already fired" built in) and, over HTTP, the
/// grace period in [`serve_http`].
async fn drain(tools: &Tools) {
    tools.stop_calls(CALLS_STOP_WAIT).await;
    tools.sandbox().shutdown().await;
    checkpoints::last_round(tools).await;
}

/// Serves MCP on stdin/stdout until the client closes it or `shutdown` fires; a client that
/// declares no roots may name inputs under `FILE_AGENT_LOCAL_ROOTS`, and one that declares
/// the Tasks extension gets tasks (`FILE_AGENT_TASKS`).
pub async fn serve_stdio(
    tools: Tools,
    config: &Config,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let server = FileAgentServer::new(tools.clone())
        .with_local_roots(config.server.local_roots.clone())
        .with_calls(InFlight::default(), TaskStore::new(config.tasks.clone()));
    let running = server
        .serve_with_ct(rmcp::transport::stdio(), shutdown.child_token())
        .await
        .map_err(|error| std::io::Error::other(error.to_string()))?;
    let result = running.waiting().await;
    drain(&tools).await;
    result
        .map(|_| ())
        .map_err(|error| std::io::Error::other(error.to_string()))
}

/// The runtime label of `/metrics` when `SANDBOX_RUNTIME` is unset (`/health` asks the engine
/// which one that is).
const ENGINE_DEFAULT_RUNTIME: &str = "default";

/// `GET /metrics`: the Prometheus text format.
async fn metrics(State(tools): State<Tools>) -> axum::response::Response {
    match crate::metrics::metrics().render(&gauges(&tools)) {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                crate::metrics::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        Err(error) => {
            tracing::error!(%error, "/metrics could not be written");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// The values `/metrics` reads at scrape time: the queue, the slots, the containers, the
/// warm pool, the audit trail, the canary, the runtime and the traces' lost spans.
fn gauges(tools: &Tools) -> crate::metrics::Gauges {
    let admission = tools.admission();
    crate::metrics::Gauges {
        queue_depth: admission.queue_depth(),
        slots_in_use: admission.running(),
        slots: admission.config().max_concurrent,
        live_containers: tools.sandbox().live_containers(),
        pending_removals: tools.sandbox().pending_removals(),
        pool: tools.sandbox().pool_stats(),
        audit: tools.audit_log().map(|audit| {
            let (refused_calls, lines_lost) = audit.failure_counts();
            crate::metrics::AuditGauges {
                writable: audit.is_writable(),
                refused_calls,
                lines_lost,
            }
        }),
        canary: tools
            .sandbox()
            .network_canary()
            .map(|report| report.verdict.name()),
        backend: tools.sandbox().backend(),
        runtime: tools
            .sandbox()
            .config()
            .runtime
            .clone()
            .unwrap_or_else(|| ENGINE_DEFAULT_RUNTIME.into()),
        trace_spans_dropped: crate::traces::enabled().then(crate::traces::dropped_spans),
    }
}

/// How long `/health` answers from one probe of the engine: a flood of unauthenticated health
/// checks costs the engine one request per this, not one each.
const HEALTH_PROBE_TTL: Duration = Duration::from_secs(2);

/// A probe of the engine, and when it was made.
type Probed = (
    std::time::Instant,
    Result<crate::sandbox::Diagnosis, String>,
);

/// The last probe of the engine. One probe at a time: requests that come meanwhile wait for it
/// and share its answer.
#[derive(Debug, Clone, Default)]
struct HealthProbe(Arc<tokio::sync::Mutex<Option<Probed>>>);

impl HealthProbe {
    /// The engine as last probed, probing again when that is older than [`HEALTH_PROBE_TTL`].
    async fn diagnosis(&self, tools: &Tools) -> Result<crate::sandbox::Diagnosis, String> {
        let mut last = self.0.lock().await;
        if let Some((at, diagnosis)) = last.as_ref()
            && at.elapsed() < HEALTH_PROBE_TTL
        {
            return diagnosis.clone();
        }
        let diagnosis = tools
            .sandbox()
            .diagnose()
            .await
            .map_err(|error| error.to_string());
        *last = Some((std::time::Instant::now(), diagnosis.clone()));
        diagnosis
    }
}

/// `GET /livez`: 200 while the process serves HTTP, and nothing else is asked: not Docker, not
/// the Kubernetes API, not the model, and not whether it is draining. A liveness probe on it
/// restarts a hung server, never every replica at once because the cluster's API blinked
/// (readiness, on `/health`, may follow the cluster).
async fn livez() -> impl IntoResponse {
    Json(json!({"status": "alive"}))
}

/// `GET /health`: Docker, the image, the store and the model, nothing secret. 503 when
/// attempts cannot run, and from SIGTERM on (`"status": "draining"`: a load balancer's
/// readiness check sends no new calls). The engine's part is at most [`HEALTH_PROBE_TTL`] old.
async fn health(
    State(tools): State<Tools>,
    axum::Extension(probe): axum::Extension<HealthProbe>,
    draining: Option<axum::Extension<requests::Draining>>,
) -> impl IntoResponse {
    let draining = draining.is_some_and(|draining| draining.0.0.is_cancelled());
    let sandbox = tools.sandbox();
    let (engine, image_present, runtime) = engine_health(&probe, &tools).await;
    // A cluster pulls the image when a pod starts: nothing to check ahead.
    let kubernetes = sandbox.backend() == "kubernetes";
    let audit = audit_health(&tools);
    let audit_refusing = audit.as_ref().is_some_and(|(refusing, _)| *refusing);
    let canary = sandbox.network_canary();
    // Only a canary that reached nothing lets code run (sandbox::canary fails closed).
    let canary_refusing = canary
        .as_ref()
        .is_some_and(|report| !report.verdict.lets_code_run());
    let ready = engine["reachable"] == true
        && (image_present || kubernetes)
        && !draining
        && !audit_refusing
        && !canary_refusing;
    let mut body = json!({
        "status": if draining { "draining" } else if ready { "ok" } else { "degraded" },
        "version": env!("CARGO_PKG_VERSION"),
        "sandbox": {"backend": sandbox.backend(), "runtime": runtime},
        "image": {"tag": sandbox.config().image, "present": if kubernetes { serde_json::Value::Null } else { image_present.into() }, "extra_packages": extra_packages_json(sandbox.config())},
        "storage": tools.storage().kind(),
        "llm": {"configured": tools.llm().is_configured(), "model": tools.llm().model()},
        "containers_running": sandbox.live_containers(),
        "removals_pending": sandbox.pending_removals(),
        "audit": audit.map(|(_, state)| state),
        "warm_pool": sandbox.pool_stats().map(|pool| pool_json(&pool)),
    });
    body[if kubernetes { "kubernetes" } else { "docker" }] = engine;
    if let Some(report) = canary {
        body["network_canary"] = canary_json(&report);
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}

/// The operator's extra packages in `/health`: the list's path and its `name==version`s, or
/// null without one.
fn extra_packages_json(config: &crate::config::SandboxConfig) -> serde_json::Value {
    match &config.extra_packages {
        None => serde_json::Value::Null,
        Some(list) => json!({
            "list": list.path.display().to_string(),
            "packages": list.pins.iter().map(crate::config::packages::Pin::spec).collect::<Vec<_>>(),
        }),
    }
}

/// The warm pool in `/health`.
fn pool_json(pool: &crate::sandbox::PoolStats) -> serde_json::Value {
    json!({
        "target": pool.target,
        "ready": pool.ready,
        "starting": pool.starting,
        "takes": pool.takes,
        "misses": pool.misses,
    })
}

/// The engine (or cluster) as `/health` shows it, whether the image is there, and the runtime
/// attempts get (the configured one, else the engine's default).
async fn engine_health(
    probe: &HealthProbe,
    tools: &Tools,
) -> (serde_json::Value, bool, Option<String>) {
    let configured = tools.sandbox().config().runtime.clone();
    match probe.diagnosis(tools).await {
        Ok(diagnosis) => (
            json!({"reachable": true, "version": diagnosis.engine_version, "api": diagnosis.api_version}),
            diagnosis.image.is_some(),
            configured.or(diagnosis.default_runtime),
        ),
        Err(error) => (
            json!({"reachable": false, "error": error}),
            false,
            configured,
        ),
    }
}

/// The audit trail in `/health`, probed now (a trail that works again must make the server
/// ready again without waiting for a call that a not-ready server would not get), and whether
/// it makes the server unready: it refuses calls, or the alarm is raised (the trail is in
/// doubt and nothing is signed until an operator acts); `None` when the trail is off.
fn audit_health(tools: &Tools) -> Option<(bool, serde_json::Value)> {
    let (audit, probed) = tools.audit_log().zip(tools.audit_probe())?;
    let state = audit.availability();
    let refusing = probed.is_err() && audit.on_failure() == AuditOnFailure::Refuse;
    let mut value = json!({
        "writable": probed.is_ok(),
        "on_failure": audit.on_failure().as_str(),
        "since": state.since,
        "error": probed.err().map(|error| error.to_string()),
        "refused_calls": state.refused_calls,
        "origin": audit.origin(),
    });
    let mut alarmed = false;
    if let Some(signing) = audit.signing() {
        value["checkpoint"] = signing
            .last_signed()
            .map_or(serde_json::Value::Null, |last| checkpoint_json(&last));
        let alarm = signing.alarm();
        alarmed = alarm.is_some();
        value["alarm"] = json!(alarm);
        value["first_signing"] = json!(signing.first_signing());
        value["unsigned_at_start"] = json!(audit.unsigned_at_start());
    }
    Some((refusing || alarmed, value))
}

/// The last checkpoint signed, in `/health`: its size and root and the witnesses'
/// cosignatures with the times they signed, all from the signed note; the time it was kept
/// and what each witness answered are the record's, unsigned, and named so.
fn checkpoint_json(last: &crate::audit::checkpoints::KeptCheckpoint) -> serde_json::Value {
    use base64::Engine;
    let body = &last.signed.checkpoint;
    json!({
        "size": body.size,
        "root": base64::engine::general_purpose::STANDARD.encode(body.root),
        "cosigned": last.signed.cosigned.iter().map(|(witness, time)| json!({
            "witness": witness,
            "time": crate::audit::checkpoints::format_epoch(*time),
        })).collect::<Vec<_>>(),
        "kept_at_unsigned": last.record.time,
        "answers_unsigned": last.record.witnesses,
    })
}

/// The network canary in `/health`: its verdict, when, what it tries, what it reached (or why
/// it could not conclude), and when the next one starts (null while one runs).
fn canary_json(report: &crate::sandbox::CanaryReport) -> serde_json::Value {
    use crate::sandbox::Verdict;
    let mut value = json!({
        "verdict": report.verdict.name(),
        "checked_at": report.checked_at.map(crate::time::format_rfc3339),
        "targets": report.targets,
        "next_at": report.next_at.map(crate::time::format_rfc3339),
    });
    match &report.verdict {
        Verdict::Reached(reached) => value["reached"] = json!(reached),
        Verdict::Failed(error) => value["error"] = json!(error),
        Verdict::Pending | Verdict::Isolated => {}
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_under_kubernetes_is_its_namespace_and_pod_within_a_label_value() {
        assert_eq!(
            kube_instance(Some("team-a"), "file-agent-0"),
            "team-a.file-agent-0"
        );
        assert_ne!(
            kube_instance(Some("team-a"), "file-agent-0"),
            kube_instance(Some("team-b"), "file-agent-0")
        );
        assert_eq!(kube_instance(None, "file-agent-0"), "file-agent-0");
        let long = "x".repeat(60);
        let (a, b) = (
            kube_instance(Some("team-a"), &long),
            kube_instance(Some("team-b"), &long),
        );
        assert_ne!(a, b);
        for instance in [a, b] {
            assert!(instance.len() <= 63, "{instance}");
            assert!(
                instance
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
                "{instance}"
            );
        }
    }

    #[test]
    fn a_data_folder_gives_one_server_a_stable_instance_and_others_a_random_one() {
        let data = tempfile::tempdir().unwrap();
        let stable = stable_instance(data.path());
        assert_eq!(stable, stable_instance(data.path()), "stable");
        let other = tempfile::tempdir().unwrap();
        assert_ne!(stable, stable_instance(other.path()), "per folder");

        let (first, lock) = claim_instance(data.path());
        assert_eq!(first, stable);
        assert!(lock.is_some());
        let (second, none) = claim_instance(data.path());
        assert_ne!(second, stable, "a second server must not share the label");
        assert!(none.is_none());
        drop(lock);
        let (again, _lock) = claim_instance(data.path());
        assert_eq!(again, stable, "free again once the first server is gone");
    }
}
