//! `file-agent serve`: reads the whole configuration (a wrong value stops here with one line
//! naming the variable), binds the address, builds the parts, and serves until SIGINT or
//! SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;

use crate::config::{Config, StorageConfig};
use crate::server;

/// Serves HTTP on `listen` (or the configured address), or stdio.
pub async fn serve(listen: Option<SocketAddr>, stdio: bool) -> anyhow::Result<ExitCode> {
    let mut config = Config::from_env()?;
    if let Some(listen) = listen {
        config.serve_at(listen);
    }
    for unknown in crate::config::names::unknown_in_env() {
        tracing::warn!("{unknown}");
    }
    if let Some(unoptimised) = super::UNOPTIMISED {
        tracing::warn!("{unoptimised}");
    }
    // Everything the server creates from here on is its user's only.
    server::private::restrict_new_files();
    if !stdio {
        // Read the token file and check every token now, before anything is announced; and
        // refuse to listen beyond loopback without a credential.
        let tokens = server::auth::AccessTokens::load(&config.server)?;
        server::gate::require_credential_beyond_loopback(config.server.listen, &tokens, &config)
            .map_err(anyhow::Error::msg)?;
    }
    let shutdown = super::shutdown_token();
    if stdio {
        serve_stdio(config, shutdown).await
    } else {
        serve_http(config, shutdown).await
    }
}

/// Serves MCP on stdin and stdout, whose client is the user: no links to a server, no line
/// on stdout but the protocol.
async fn serve_stdio(
    mut config: Config,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<ExitCode> {
    // stdout carries the protocol.
    config.audit.stdout = false;
    // No server answers a link here: unless FILE_AGENT_PUBLIC_URL names one that serves
    // this data folder, an output's link is its path on this machine.
    if !config.server.pinned.public_url
        && let StorageConfig::Local(local) = &mut config.storage
    {
        local.public_url = String::new();
    }
    let tools = server::build_tools(&config).await?;
    server::retention::spawn(&tools, &config, shutdown.clone());
    server::checkpoints::spawn(&tools, &config, shutdown.clone());
    tracing::info!("serving MCP on stdio");
    server::serve_stdio(tools, &config, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// Binds the configured address and serves MCP, health, metrics and files over HTTP.
async fn serve_http(
    mut config: Config,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<ExitCode> {
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (set FILE_AGENT_LISTEN or --listen to a free address)",
                config.server.listen
            )
        })?;
    // Links, allowed hosts and origins follow the address really served (port 0 is only
    // resolved now), unless they were set.
    let address = listener.local_addr()?;
    config.serve_at(address);
    let tools = server::build_tools(&config).await?;
    let storage = match &config.storage {
        StorageConfig::OpenWebUi(owui) => format!("Open WebUI at {}", owui.internal_url),
        StorageConfig::Local(local) => format!(
            "local store in {} (links under {}/files)",
            local.data_dir.display(),
            local.public_url
        ),
    };
    tracing::info!(%address, storage, "serving MCP at http://{address}/mcp");
    if let Some(problem) = config.unreachable_links() {
        tracing::warn!("{problem}");
    }
    // A banner for a person; JSON logs keep one record per line.
    if super::LogFormat::from_env() != Ok(super::LogFormat::Json) {
        eprintln!(
            "file-agent: MCP at http://{address}/mcp, health at http://{address}/health; {storage}"
        );
    }
    server::retention::spawn(&tools, &config, shutdown.clone());
    server::checkpoints::spawn(&tools, &config, shutdown.clone());
    server::serve_http(tools, &config, listener, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}
