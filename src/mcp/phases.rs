//! The views of a call's phases (`tools::progress`): one task per call receives them in order
//! and shows each in the log, as an MCP progress notification when the client sent a progress
//! token, as the status message of the MCP task the call runs as (if it does), and as a status
//! event under the assistant's message when the call names an Open WebUI chat and message
//! (`X-OpenWebUI-Chat-Id`, `X-OpenWebUI-Message-Id`) and file-agent stores its files in that
//! Open WebUI.
//!
//! Nothing here can slow or fail the call: the flows only push into a channel; Open WebUI gets
//! its events from a task of its own, each post bounded by a short timeout, at most
//! [`CHAT_EVENTS_PER_SECOND`] (a long backlog is skipped to its newest status), and an error
//! is logged at debug. A stored result is also attached to the message (Open WebUI's `files`
//! event), beside the link in the answer.

use std::time::{Duration, Instant};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use serde_json::json;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use crate::storage::{Caller, OpenWebUi};
use crate::tools::progress::{Phase, Phases};

/// Status events posted to a chat at most this many times a second.
pub const CHAT_EVENTS_PER_SECOND: u32 = 4;
/// Statuses waiting for the chat beyond which the older ones are skipped.
const CHAT_BACKLOG: usize = 8;
/// Time allowed for one MCP progress notification.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether Open WebUI saves chat `id`, so that its event route takes statuses for it: not a
/// temporary chat (`temporary:<id>`, or the legacy `local:<id>`) nor a channel's
/// (`channel:<id>`), which it does not save and for which the route answers 401 (Open WebUI
/// 0.12's `is_saved_chat_id`).
pub fn saved_chat(id: &str) -> bool {
    !["temporary:", "local:", "channel:"]
        .iter()
        .any(|prefix| id.starts_with(prefix))
}

/// An Open WebUI chat message to show a call's status under.
#[derive(Debug, Clone)]
pub struct ChatMessage {
    /// The Open WebUI the files go to.
    pub openwebui: OpenWebUi,
    /// `X-OpenWebUI-Chat-Id`.
    pub chat: String,
    /// `X-OpenWebUI-Message-Id`: the assistant's message.
    pub message: String,
    /// Whose credential posts the events.
    pub caller: Caller,
}

/// Where a call's phases are shown besides the log.
#[derive(Debug, Default)]
pub struct Views {
    /// The client's progress token, and the peer to notify.
    pub progress: Option<(Peer<RoleServer>, ProgressToken)>,
    /// The chat message to post status events to.
    pub chat: Option<ChatMessage>,
    /// The status message of the task the call runs as.
    pub task: Option<super::tasks::StatusMessage>,
}

/// Starts showing the phases of call `call` (tool `tool`) in `views`; the returned sender is
/// what the call announces to. The views end when every sender is dropped; the returned task
/// ends once the log and the MCP notifications have shown every phase (the chat's poster goes
/// on by itself).
pub fn start(views: Views, call: &str, tool: &str) -> (Phases, tokio::task::JoinHandle<()>) {
    let (sender, receiver) = unbounded_channel();
    let chat = views.chat.map(|chat| {
        let (chat_sender, chat_receiver) = unbounded_channel();
        tokio::spawn(post_to_chat(chat, chat_receiver));
        chat_sender
    });
    let shown = tokio::spawn(show(
        receiver,
        views.progress,
        views.task,
        chat,
        call.to_string(),
        tool.to_string(),
    ));
    (Phases::to(sender), shown)
}

/// Shows each phase in the log, as MCP progress and as the task's status, and hands it to the
/// chat's poster.
async fn show(
    mut phases: UnboundedReceiver<Phase>,
    progress: Option<(Peer<RoleServer>, ProgressToken)>,
    task: Option<super::tasks::StatusMessage>,
    chat: Option<tokio::sync::mpsc::UnboundedSender<Phase>>,
    call: String,
    tool: String,
) {
    let mut step = 0u32;
    while let Some(phase) = phases.recv().await {
        if let Some(message) = phase.message() {
            tracing::info!(call = %call, tool = %tool, phase = %message, "call phase");
            if let Some(task) = &task {
                task.set(message.clone());
            }
            if let Some((peer, token)) = &progress
                && !phase.is_last()
            {
                step += 1;
                let notification = match &phase {
                    Phase::Researching { elapsed, total, .. } => {
                        ProgressNotificationParam::new(token.clone(), *elapsed).with_total(*total)
                    }
                    _ => ProgressNotificationParam::new(token.clone(), f64::from(step)),
                }
                .with_message(message);
                let sent =
                    tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_progress(notification)).await;
                if !matches!(sent, Ok(Ok(()))) {
                    tracing::debug!(call = %call, "could not send a progress notification");
                }
            }
        }
        if let Some(chat) = &chat {
            let _ = chat.send(phase);
        }
    }
}

/// Posts the phases to the chat message, in order, at most [`CHAT_EVENTS_PER_SECOND`]; when
/// more than [`CHAT_BACKLOG`] wait (an Open WebUI slower than the call), the statuses among them
/// are skipped to the newest (files and the final status never). A client that left gets
/// no "the answer says why" under its message: no answer comes ([`Phase::Left`]).
async fn post_to_chat(chat: ChatMessage, mut phases: UnboundedReceiver<Phase>) {
    let interval = Duration::from_secs(1) / CHAT_EVENTS_PER_SECOND;
    let mut last_post: Option<Instant> = None;
    // The last status posted: the chat keeps every status, and one repeated (a result of
    // several files is saved once per file) tells the user nothing.
    let mut last_status: Option<String> = None;
    while let Some(mut phase) = phases.recv().await {
        if phases.len() > CHAT_BACKLOG {
            while let Ok(next) = phases.try_recv() {
                if matches!(phase, Phase::Stored(_)) || phase.is_last() {
                    post(&chat, &phase).await;
                }
                phase = next;
            }
        }
        if !matches!(phase, Phase::Stored(_)) {
            let status = phase.message();
            if status.is_some() && status == last_status {
                continue;
            }
            last_status = status;
        }
        if let Some(at) = last_post {
            let wait = interval.saturating_sub(at.elapsed());
            if !wait.is_zero() && !phase.is_last() {
                tokio::time::sleep(wait).await;
            }
        }
        post(&chat, &phase).await;
        last_post = Some(Instant::now());
    }
}

/// Posts one phase as Open WebUI's event: a `status`, or a `files` attachment.
async fn post(chat: &ChatMessage, phase: &Phase) {
    let event = match phase {
        Phase::Stored(file) => json!({"type": "files", "data": {"files": [{
            "type": "file",
            "id": file.id,
            "name": file.name,
            "url": file.url,
            "size": file.bytes,
            "content_type": file.content_type,
        }]}}),
        phase => match phase.message() {
            Some(description) => json!({"type": "status", "data": {
                "description": description,
                "done": phase.is_last(),
            }}),
            None => return,
        },
    };
    if let Err(error) = chat
        .openwebui
        .post_event(&chat.chat, &chat.message, &event, &chat.caller)
        .await
    {
        tracing::debug!(%error, "could not post a status event to the Open WebUI chat");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_chats_open_webui_saves_get_statuses() {
        assert!(saved_chat("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"));
        assert!(!saved_chat("temporary:0f1e2d3c"));
        assert!(!saved_chat("local:AbC123"));
        assert!(!saved_chat("channel:0f1e2d3c"));
    }
}
