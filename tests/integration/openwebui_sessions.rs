//! `run_python`'s sessions behind a real Open WebUI chat (issue 62): Open WebUI 0.12.4's own MCP
//! client (`tests/sdk/openwebui_client.py`, in the venv of `scripts/test-openwebui.sh`) sends
//! each message's tool call with the headers Open WebUI's own `build_tool_server_headers`
//! makes for a chat (`ENABLE_FORWARD_USER_INFO_HEADERS`: the user as a signed token, the chat's
//! and the message's ids; auth **Session** and the connection's `X-File-Agent-Key`, as
//! CLIENTS.md sets it up), through the real server, sandbox and image. The chat is the session:
//! a variable the first message's code set is there in the second message's, and neither in
//! another chat nor for another user whose call names the same chat id.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fakes::openwebui::{ALICE, BOB, FakeOpenWebUi};
use crate::long_calls::{openwebui_client, text};
use crate::mcp_server::{TestServer, env};

const TOKEN: &str = "test-access-token-0123456789";
const SECRET: &str = "forward-user-jwt-secret-0123456789abcdef";
/// A bound on one message's tool call (a cold container on a busy machine included).
const CALL_LIMIT: Duration = Duration::from_secs(180);

/// An Open WebUI user: its session token and the user Open WebUI forwards (the tests' fake
/// Open WebUI names a token's user by the token itself).
struct ChatUser {
    token: &'static str,
    user: Value,
}

fn alice() -> ChatUser {
    ChatUser {
        token: ALICE,
        user: json!({"id": ALICE, "name": "Alice", "email": "alice@example.com", "role": "user"}),
    }
}

fn bob() -> ChatUser {
    ChatUser {
        token: BOB,
        user: json!({"id": BOB, "name": "Bob", "email": "bob@example.com", "role": "user"}),
    }
}

/// Open WebUI's settings for the chat's tool calls: user info and chat ids forwarded, the
/// user signed with the secret file-agent shares.
const OPEN_WEBUI_SETTINGS: [(&str, &str); 2] = [
    ("ENABLE_FORWARD_USER_INFO_HEADERS", "true"),
    ("FORWARD_USER_INFO_HEADER_JWT_SECRET", SECRET),
];

/// One message of `chat` from `who` whose model calls `run_python` with `code` (and no
/// `session`): the call's end as Open WebUI's client saw it.
async fn message(server: &TestServer, who: &ChatUser, chat: &str, code: &str) -> Value {
    let connection = json!({
        "type": "mcp",
        "url": format!("{}/mcp", server.url),
        "auth_type": "session",
        "headers": {"X-File-Agent-Key": TOKEN},
    });
    let options: Vec<String> = [
        "--tool",
        "run_python",
        "--args",
        &json!({"code": code}).to_string(),
        "--connection",
        &connection.to_string(),
        "--user",
        &who.user.to_string(),
        "--session-token",
        who.token,
        "--chat-id",
        chat,
        "--message-id",
        &format!("msg-{}", uuid::Uuid::new_v4()),
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    openwebui_client(server, &options, &OPEN_WEBUI_SETTINGS, CALL_LIMIT).await
}

/// What the model reads of a call: the result's text, or the error Open WebUI shows.
fn answer(end: &Value) -> String {
    match end["event"].as_str() {
        Some("result") => text(end),
        _ => end.to_string(),
    }
}

#[tokio::test]
async fn an_open_webui_chat_keeps_a_variable_from_one_message_to_the_next_and_no_other_chat_or_user_sees_it()
 {
    let owui = FakeOpenWebUi::start().await;
    let server = TestServer::start(&env(&[
        ("FILE_AGENT_ACCESS_TOKENS", TOKEN),
        ("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET", SECRET),
        ("INTERNAL_API_URL", &owui.url),
    ]))
    .await;
    let chat_a = uuid::Uuid::new_v4().to_string();
    let chat_b = uuid::Uuid::new_v4().to_string();

    let first = message(&server, &alice(), &chat_a, "revenue = 1234\nprint('set')").await;
    let said = answer(&first);
    assert!(
        said.contains("set") && said.contains("its state was kept"),
        "{said}"
    );
    let second = message(&server, &alice(), &chat_a, "print('twice:', revenue * 2)").await;
    let said = answer(&second);
    assert!(said.contains("twice: 2468"), "{said}");

    let reads = "print(revenue)";
    for (who, chat, whose) in [
        (alice(), &chat_b, "another chat"),
        (bob(), &chat_a, "another user"),
    ] {
        let said = answer(&message(&server, &who, chat, reads).await);
        assert!(
            said.contains("NameError") && said.contains("revenue") && !said.contains("1234"),
            "{whose}: {said}"
        );
    }

    // Each call was Alice's or Bob's by Open WebUI's signed token, and the chat's session.
    let lines = server.audit_lines();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    let sessions: Vec<&Value> = lines.iter().map(|line| &line["session"]["id"]).collect();
    assert_eq!(sessions[0], sessions[1], "one chat, one session");
    assert!(
        sessions[2] != sessions[0] && sessions[3] != sessions[0],
        "{sessions:?}"
    );
    for line in &lines {
        assert_eq!(line["identity"], "openwebui-jwt", "{line}");
    }
    assert_eq!(lines[3]["user"], BOB);
    assert_eq!(lines[3]["chat"], chat_a.as_str());
    server.assert_nothing_left().await;
}
