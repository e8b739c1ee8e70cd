//! The fast tier: the tool flows (the retry loop of `generate_file` and `modify_file`, the
//! change report, the analysis loop with its checker and redo, the table inspection's
//! heuristics) with [`LocalRunner`] instead of Docker. They run the image's own scripts with
//! the image's own libraries (a venv of `sandbox-image/wheels.txt`), in milliseconds to a few
//! seconds, and need no engine: `cargo nextest run --profile fast` runs them with the unit
//! tests. What only a container can show (limits, isolation, the hostile battery, the image
//! itself) stays in the Docker tier.

mod analysis;
mod canary;
mod files;
mod inspection;
mod pdf;
pub mod runner;
mod saved_tools;

use std::collections::HashMap;
use std::sync::Arc;

use file_agent::config::Config;
use file_agent::server::ToolParts;
use file_agent::storage::Caller;
use file_agent::tools::{ToolError, ToolOutput, Tools};
use tokio_util::sync::CancellationToken;

use crate::common::with_timeout;
use crate::fakes::openai::FakeOpenAi;
pub use runner::LocalRunner;

/// The tools over a [`LocalRunner`], with a local store in a fresh data folder.
pub struct LocalTools {
    pub tools: Tools<LocalRunner>,
    runner: Arc<LocalRunner>,
    _data: tempfile::TempDir,
}

impl LocalTools {
    /// The tools configured by `env` (on top of a fresh data folder), asking `llm`.
    pub fn start(llm: &FakeOpenAi, env: &[(&str, &str)]) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), llm, env)
    }

    /// [`Self::start`] over the data folder `data` (a restart, when it held an earlier one's).
    pub fn start_in(data: tempfile::TempDir, llm: &FakeOpenAi, env: &[(&str, &str)]) -> Self {
        let mut vars: HashMap<String, String> = HashMap::from([
            (
                "FILE_AGENT_DATA_DIR".into(),
                data.path().display().to_string(),
            ),
            ("FILE_AGENT_LLM_TIMEOUT".into(), "20".into()),
        ]);
        vars.extend(llm.env());
        vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = Config::from_lookup(|name| vars.get(name).cloned()).unwrap();
        let runner = Arc::new(LocalRunner::new(config.sandbox.clone()));
        let tools = ToolParts::load(&config)
            .unwrap()
            .with_runner(&config, runner.clone())
            .with_pdf_checker(env!("CARGO_BIN_EXE_file-agent").into());
        Self {
            tools,
            runner,
            _data: data,
        }
    }

    /// Stops these tools and gives back their data folder.
    pub fn stop(self) -> tempfile::TempDir {
        self._data
    }

    /// Jobs the runner has run.
    pub fn runs(&self) -> usize {
        self.runner.runs()
    }

    /// The lines of the audit trail so far.
    pub fn audit_lines(&self) -> Vec<serde_json::Value> {
        crate::common::audit_lines(self._data.path())
    }

    /// Stores `bytes` as `name`; returns its file id.
    pub async fn upload(&self, name: &str, bytes: Vec<u8>) -> String {
        let stored = self
            .tools
            .storage()
            .store(
                name,
                "application/octet-stream",
                bytes,
                &Caller::new(file_agent::owner::Owner::local()),
            )
            .await
            .unwrap();
        stored.id
    }

    /// The bytes of the file a tool's answer links to first.
    pub async fn linked_file(&self, answer: &str) -> Vec<u8> {
        let link = crate::mcp_server::first_link(answer);
        let mut segments = link.rsplit('/');
        let (_name, id) = (segments.next().unwrap(), segments.next().unwrap());
        let download = self
            .tools
            .storage()
            .fetch(id, &Caller::new(file_agent::owner::Owner::local()))
            .await
            .unwrap();
        download.bytes
    }

    /// `generate_file`.
    pub async fn generate(
        &self,
        instructions: &str,
        file_type: &str,
    ) -> Result<ToolOutput, ToolError> {
        with_timeout(self.tools.generate_file(
            instructions,
            file_type,
            None,
            &Caller::new(file_agent::owner::Owner::local()),
            &CancellationToken::new(),
        ))
        .await
    }

    /// `modify_file` of the stored file `id`.
    pub async fn modify(&self, id: &str, instructions: &str) -> Result<ToolOutput, ToolError> {
        with_timeout(self.tools.modify_file(
            id,
            instructions,
            None,
            &Caller::new(file_agent::owner::Owner::local()),
            &CancellationToken::new(),
        ))
        .await
    }

    /// `analyze_file` of `bytes` stored as `name`; the answer must not be an error.
    pub async fn analyze(&self, name: &str, bytes: Vec<u8>, question: &str) -> String {
        let id = self.upload(name, bytes).await;
        self.analyze_id(&id, question).await.unwrap().text
    }

    /// `analyze_file` of the stored file `id`.
    pub async fn analyze_id(&self, id: &str, question: &str) -> Result<ToolOutput, ToolError> {
        with_timeout(self.tools.analyze_file(
            id,
            question,
            &Caller::new(file_agent::owner::Owner::local()),
            &CancellationToken::new(),
        ))
        .await
    }
}
