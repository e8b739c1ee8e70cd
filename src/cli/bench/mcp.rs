//! The bench's end-to-end case: a `run_python` call over MCP (rmcp's Streamable HTTP client)
//! to a real server in this process, its files stored in a temporary local store, with the warm
//! pool off or on. What a client sees, minus the network.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio_util::sync::CancellationToken;

use super::owned::Owned;
use crate::config::Config;
use crate::tools::Tools;

/// A server on 127.0.0.1 and one client session to it.
pub(super) struct McpServer {
    tools: Tools,
    client: RunningService<rmcp::RoleClient, ClientConfig>,
    shutdown: CancellationToken,
    served: tokio::task::JoinHandle<()>,
    _data: tempfile::TempDir,
}

impl McpServer {
    /// Starts a server with the environment's settings, but its own data folder, instance and
    /// local store, no access tokens, and `warm` warm containers; `owned` stops it if the
    /// bench ends first.
    pub(super) async fn start(owned: &Owned, instance: &str, warm: usize) -> anyhow::Result<Self> {
        Self::start_with(owned, instance, warm, &[]).await
    }

    /// [`Self::start`], with `more` settings over the environment's; the checkpoints of the
    /// audit trail are signed as `serve` signs them when `more` names a key.
    pub(super) async fn start_with(
        owned: &Owned,
        instance: &str,
        warm: usize,
        more: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        Self::start_as(owned, instance, warm, more, None).await
    }

    /// [`Self::start_with`], with a client that names `user` (Open WebUI's user header, which
    /// a loopback server without access tokens takes as the caller): the owner a session needs.
    pub(super) async fn start_as(
        owned: &Owned,
        instance: &str,
        warm: usize,
        more: &[(&str, String)],
        user: Option<&str>,
    ) -> anyhow::Result<Self> {
        let data = tempfile::tempdir()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let mut vars: HashMap<String, String> = std::env::vars().collect();
        for private in [
            "INTERNAL_API_URL",
            "FILE_AGENT_ACCESS_TOKENS",
            "FILE_AGENT_ACCESS_TOKENS_FILE",
            "FILE_AGENT_AUDIT_FILE",
            // Derived from the address bound below, by `serve_at`.
            "FILE_AGENT_PUBLIC_URL",
        ] {
            vars.remove(private);
        }
        vars.extend([
            ("SANDBOX_INSTANCE".into(), instance.to_string()),
            ("SANDBOX_WARM".into(), warm.to_string()),
            (
                "FILE_AGENT_DATA_DIR".into(),
                data.path().display().to_string(),
            ),
        ]);
        vars.extend(
            more.iter()
                .map(|(name, value)| (name.to_string(), value.clone())),
        );
        let mut config = Config::from_lookup(|name| vars.get(name).cloned())?;
        config.serve_at(address);
        let tools = crate::server::build_tools(&config).await?;
        let shutdown = CancellationToken::new();
        crate::server::checkpoints::spawn(&tools, &config, shutdown.clone());
        let served = {
            let (tools, stop) = (tools.clone(), shutdown.clone());
            owned.server(instance, shutdown.clone(), async move {
                if let Err(error) = crate::server::serve_http(tools, &config, listener, stop).await
                {
                    tracing::error!(%error, "the bench's server stopped");
                }
            })
        };
        let mut headers = HashMap::new();
        if let Some(user) = user {
            headers.insert(
                http::HeaderName::from_static(crate::server::gate::USER_ID_HEADER),
                http::HeaderValue::from_str(user)?,
            );
        }
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{address}/mcp"))
                .custom_headers(headers),
        );
        let client = ClientConfig::default()
            .serve(transport)
            .await
            .context("connecting the MCP client")?;
        Ok(Self {
            tools,
            client,
            shutdown,
            served,
            _data: data,
        })
    }

    /// Waits until the pool (if any) is full, so that a call finds it as a quiet server would.
    pub(super) async fn settle(&self) {
        super::settle(self.tools.sandbox()).await;
    }

    /// One `run_python` call of `script`: its round trip.
    pub(super) async fn run_python(&self, script: &str) -> anyhow::Result<Duration> {
        Ok(self.call_python(script).await?.0)
    }

    /// One `run_python` call of `script`: its round trip and its result.
    pub(super) async fn call_python(
        &self,
        script: &str,
    ) -> anyhow::Result<(Duration, CallToolResult)> {
        self.call_python_with(serde_json::json!({ "code": script }))
            .await
    }

    /// One `run_python` call with `arguments` (the code, and a session or inputs): its round
    /// trip and its result.
    pub(super) async fn call_python_with(
        &self,
        arguments: serde_json::Value,
    ) -> anyhow::Result<(Duration, CallToolResult)> {
        let arguments = arguments.as_object().cloned().unwrap_or_default();
        let started = Instant::now();
        let result = self
            .client
            .call_tool(CallToolRequestParams::new("run_python").with_arguments(arguments))
            .await?;
        let took = started.elapsed();
        if result.is_error == Some(true) {
            bail!("run_python failed in the bench: {:?}", result.content);
        }
        Ok((took, result))
    }

    /// Closes the client and stops the server (its pool is drained).
    pub(super) async fn stop(self) {
        let _ = self.client.cancel().await;
        self.shutdown.cancel();
        let _ = self.served.await;
    }
}
