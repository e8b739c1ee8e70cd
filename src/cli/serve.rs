//! `file-agent serve`: reads the whole configuration (a wrong value stops here with one line
//! naming the variable), builds the parts, and serves until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;

use crate::config::{Config, StorageConfig};
use crate::server;

/// Serves HTTP on `listen` (or the configured address), or stdio.
pub async fn serve(listen: Option<SocketAddr>, stdio: bool) -> anyhow::Result<ExitCode> {
    let mut config = Config::from_env()?;
    if let Some(listen) = listen {
        config.server.listen = listen;
    }
    if stdio {
        // stdout carries the protocol.
        config.audit.stdout = false;
    }
    let shutdown = super::shutdown_token();
    let tools = server::build_tools(&config).await?;
    if stdio {
        tracing::info!("serving MCP on stdio");
        server::serve_stdio(tools, shutdown).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (set FILE_AGENT_LISTEN or --listen to a free address)",
                config.server.listen
            )
        })?;
    let address = listener.local_addr()?;
    let storage = match &config.storage {
        StorageConfig::OpenWebUi(owui) => format!("Open WebUI at {}", owui.internal_url),
        StorageConfig::Local(local) => format!(
            "local store in {} (links under {}/files)",
            local.data_dir.display(),
            local.public_url
        ),
    };
    tracing::info!(%address, storage, "serving MCP at http://{address}/mcp");
    eprintln!(
        "file-agent: MCP at http://{address}/mcp, health at http://{address}/health; {storage}"
    );
    server::serve_http(tools, &config, listener, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}
