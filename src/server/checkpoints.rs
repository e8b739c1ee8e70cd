//! The audit trail's checkpoints over time (`FILE_AGENT_AUDIT_SIGNING_KEY_FILE`): a round
//! every `FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL` when lines came since the last one, and a
//! last round at shutdown, once the calls have ended, so the last lines are signed too. A
//! round signs, has the witnesses cosign and keeps the checkpoint
//! (`audit::witness::checkpoint_round`); it runs in this task, never in a call.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::audit::witness::{WITNESS_TIMEOUT, checkpoint_round};
use crate::config::Config;
use crate::tools::Tools;

/// How long the witnesses may take in the last round, at shutdown.
const LAST_ROUND_WITNESS_TIMEOUT: Duration = Duration::from_secs(3);

/// Starts the rounds when checkpoints are signed, until `shutdown`.
pub fn spawn(
    tools: &Tools,
    config: &Config,
    shutdown: CancellationToken,
) -> Option<JoinHandle<()>> {
    let audit = tools.audit_log()?.clone();
    audit.signing()?;
    let every = config.audit.checkpoint_interval;
    Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(every) => {}
            }
            checkpoint_round(&audit, WITNESS_TIMEOUT).await;
        }
    }))
}

/// The round at shutdown: the lines written since the last round are signed.
pub async fn last_round(tools: &Tools) {
    if let Some(audit) = tools.audit_log() {
        checkpoint_round(audit, LAST_ROUND_WITNESS_TIMEOUT).await;
    }
}
