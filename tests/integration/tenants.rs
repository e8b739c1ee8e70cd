//! Tenants apart (issue 44): seven principals who all call themselves the same user, on real
//! servers over one data folder (as one deployment's replicas, or one server's restarts with
//! another identity set-up, would share it), each make a file, upload one and save a tool; then
//! for every ordered pair the second sees nothing of the first's by any way in, and each sees
//! its own. Open WebUI's storage, where Open WebUI decides, is its own row.
//!
//! The principals, all named `sk-alice` (the fake Open WebUI's session user is its token):
//! 1. the stdio user;
//! 2. access token A with the plain header user;
//! 3. access token B with the plain header user;
//! 4. access token A with Open WebUI's signed token for the user;
//! 5. OAuth issuer 1's subject;
//! 6. OAuth issuer 2's subject;
//! 7. an Open WebUI session user (token A in `X-File-Agent-Key`, the session as the bearer).
//!
//! The ways in: `resources/list`, `resources/read` by URI, an input by id and by URI, an upload
//! used as an input, the saved tools' list and a call of one, and the review page's per-user
//! rows.

use std::collections::HashMap;

use base64::Engine;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ReadResourceRequestParams};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::common::with_timeout;
use crate::fakes::issuer::{FakeIssuer, Key};
use crate::fakes::openwebui::{ALICE, BOB, FakeOpenWebUi, ForwardedUser, mint_forward_user_jwt};
use crate::mcp_server::{TestServer, assert_no_containers_of, env, stdio_server, text_of};

const TOKEN_A: &str = "tenant-token-a-0123456789abcdef";
const TOKEN_B: &str = "tenant-token-b-0123456789abcdef";
const JWT_SECRET: &str = "tenants-forward-user-jwt-secret-0123456789";
/// The one user name every principal has.
const USER: &str = ALICE;

/// One caller, and how it reaches its server.
struct Principal {
    /// What it is, for failures.
    label: &'static str,
    /// Its MCP client.
    client: RunningService<RoleClient, ClientConfig>,
    /// The server's URL and the headers an upload to it carries, where it can upload.
    uploads: Option<(String, Vec<(&'static str, String)>)>,
    /// What the review page says named it ("named by").
    named_by: String,
}

/// What a principal made: a file (its id and resource URI), an upload's id, a saved tool, and
/// the secret in each.
struct Made {
    id: String,
    uri: String,
    upload: Option<String>,
    tool: String,
    secret: String,
}

fn headers(pairs: &[(&'static str, String)]) -> HashMap<http::HeaderName, http::HeaderValue> {
    pairs
        .iter()
        .map(|(name, value)| {
            (
                http::HeaderName::from_static(name),
                http::HeaderValue::from_str(value).unwrap(),
            )
        })
        .collect()
}

async fn call(principal: &Principal, tool: &str, arguments: Value) -> CallToolResult {
    let arguments = arguments.as_object().cloned().unwrap_or_default();
    with_timeout(
        principal
            .client
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments)),
    )
    .await
    .unwrap()
}

/// The resource URIs `principal` is listed.
async fn listed(principal: &Principal) -> Vec<String> {
    with_timeout(principal.client.list_all_resources())
        .await
        .unwrap()
        .into_iter()
        .map(|resource| resource.uri)
        .collect()
}

/// The saved tools `principal` is listed.
async fn tools(principal: &Principal) -> Vec<String> {
    with_timeout(principal.client.list_all_tools())
        .await
        .unwrap()
        .into_iter()
        .map(|tool| tool.name.to_string())
        .filter(|name| name.starts_with("my_"))
        .collect()
}

/// `resources/read` of `uri`: its bytes as text, or the error.
async fn read(principal: &Principal, uri: &str) -> Result<String, String> {
    let result = with_timeout(
        principal
            .client
            .read_resource(ReadResourceRequestParams::new(uri)),
    )
    .await
    .map_err(|error| error.to_string())?;
    let contents = serde_json::to_value(&result.contents).unwrap();
    let blob = contents[0]["blob"].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .unwrap();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `run_python` printing every input it was given: (is_error, text).
async fn run_with(principal: &Principal, file_ids: &[&str]) -> (bool, String) {
    let code = "for path in input_files:\n    print(open(path).read())\n";
    let result = call(
        principal,
        "run_python",
        json!({"code": code, "file_ids": file_ids}),
    )
    .await;
    (result.is_error == Some(true), text_of(&result))
}

/// Uploads `bytes` with the principal's headers; the id.
async fn upload(base: &str, pairs: &[(&'static str, String)], bytes: &str) -> String {
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(bytes.as_bytes().to_vec()).file_name("upload.txt"),
    );
    let mut request = reqwest::Client::new()
        .post(format!("{base}/files"))
        .multipart(form);
    for (name, value) in pairs {
        request = request.header(*name, value);
    }
    let response = with_timeout(request.send()).await.unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_string()
}

/// Principal `n` uploads (where it can), makes `notes-<n>.txt` with a script that also prints
/// its upload, and saves `tool_p<n>`; asserts each worked.
async fn make(n: usize, principal: &Principal) -> Made {
    let secret = format!("secret of principal {n}");
    let upload = match &principal.uploads {
        Some((base, pairs)) => Some(upload(base, pairs, &format!("uploaded {secret}")).await),
        None => None,
    };
    let code = format!(
        "for path in input_files:\n    print(open(path).read())\n\
         open(output_dir + '/notes-{n}.txt', 'w').write({secret:?})\n"
    );
    let result = call(
        principal,
        "run_python",
        json!({"code": code, "file_ids": upload.iter().collect::<Vec<_>>()}),
    )
    .await;
    let text = text_of(&result);
    assert_ne!(result.is_error, Some(true), "{}: {text}", principal.label);
    if upload.is_some() {
        assert!(
            text.contains(&format!("uploaded {secret}")),
            "{}: its own upload as its input: {text}",
            principal.label
        );
    }
    let uri = result
        .content
        .iter()
        .find_map(|item| item.as_resource_link().map(|link| link.uri.clone()))
        .unwrap_or_else(|| panic!("{}: no resource link: {text}", principal.label));
    let id = uri
        .strip_prefix("file-agent://files/")
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_string();
    let tool = format!("tool_p{n}");
    let code = format!("def run():\n    return {{'secret': {secret:?}}}\n");
    let created = call(
        principal,
        "create_tool",
        json!({"name": tool, "description": "Says whose it is.", "code": code,
               "input_schema": {"type": "object", "properties": {}}}),
    )
    .await;
    assert_ne!(
        created.is_error,
        Some(true),
        "{}: {}",
        principal.label,
        text_of(&created)
    );
    Made {
        id,
        uri,
        upload,
        tool: format!("my_{tool}"),
        secret,
    }
}

/// Every way in, for `second` and what `first` made: `own` says whether it is the same
/// principal (it sees all of it) or another (it sees none). Returns the cells checked.
async fn check(second: &Principal, made: &Made, own: bool, lists: bool) -> usize {
    let label = second.label;
    let mut cells = 0;
    let listed = listed(second).await;
    // Open WebUI lists its files itself: its principal is listed nothing here.
    if lists || !own {
        assert_eq!(listed.contains(&made.uri), own, "{label}: list: {listed:?}");
        cells += 1;
    }
    match read(second, &made.uri).await {
        Ok(text) => assert!(own && text == made.secret, "{label}: read: {text}"),
        Err(error) => assert!(!own, "{label}: read its own: {error}"),
    }
    cells += 1;
    let mut inputs = vec![("id", made.id.as_str()), ("URI", made.uri.as_str())];
    if let Some(upload) = &made.upload {
        inputs.push(("upload", upload.as_str()));
    }
    for (way, value) in inputs {
        if own && way == "upload" {
            continue; // its own upload was its input when it made the file
        }
        let (is_error, text) = run_with(second, &[value]).await;
        let leaked = text.contains(&made.secret);
        assert_eq!(
            (is_error, leaked),
            (!own, own),
            "{label}: input by {way}: {text}"
        );
        if !own {
            assert!(
                text.contains("not found") || text.contains("is not a file id"),
                "{label}: input by {way} says what is wrong: {text}"
            );
        }
        cells += 1;
    }
    let tools = tools(second).await;
    assert_eq!(tools.contains(&made.tool), own, "{label}: tools: {tools:?}");
    let called = call(second, &made.tool, json!({})).await;
    let text = text_of(&called);
    assert_eq!(
        (called.is_error == Some(true), text.contains(&made.secret)),
        (!own, own),
        "{label}: call {}: {text}",
        made.tool
    );
    cells + 2
}

#[tokio::test]
async fn seven_principals_of_one_name_see_only_their_own_by_every_way_in() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().display().to_string();
    let (issuer_1, issuer_2) = (FakeIssuer::start().await, FakeIssuer::start().await);
    let owui = FakeOpenWebUi::start().await;
    let shared = [
        ("FILE_AGENT_DATA_DIR", data_dir.as_str()),
        ("FILE_AGENT_ACCESS_TOKENS", &format!("{TOKEN_A},{TOKEN_B}")),
    ];
    let with = |more: &[(&str, &str)]| {
        let mut all = shared.to_vec();
        all.extend_from_slice(more);
        env(&all)
    };
    let issuers = format!("{},{}", issuer_1.url, issuer_2.url);
    let plain = TestServer::start(&with(&[("FILE_AGENT_OAUTH_ISSUER", &issuers)])).await;
    let signed = TestServer::start(&with(&[(
        "FILE_AGENT_OPENWEBUI_USER_JWT_SECRET",
        JWT_SECRET,
    )]))
    .await;
    let session = TestServer::start(&with(&[("INTERNAL_API_URL", &owui.url)])).await;
    let instance = crate::common::unique_instance("tenants", 12);
    let stdio = with_timeout(ClientConfig::default().serve(stdio_server(data.path(), &instance)))
        .await
        .unwrap();

    let key = |token: &str| ("x-file-agent-key", token.to_string());
    let header_user = ("x-openwebui-user-id", USER.to_string());
    let jwt_user = ForwardedUser {
        id: USER,
        name: "Alice",
        email: "alice@example.com",
        role: "user",
    };
    let signed_user = (
        "x-openwebui-user-jwt",
        mint_forward_user_jwt(&jwt_user, JWT_SECRET, 600),
    );
    let oauth = |issuer: &FakeIssuer| {
        let claims = issuer.claims(
            &format!("{}/mcp", plain.url),
            USER,
            "file-agent.run file-agent.saved-tools",
        );
        (
            "authorization",
            format!("Bearer {}", issuer.sign(Key::Ec, &claims)),
        )
    };
    let token_id = |token: &str| crate::common::sha256_hex(token.as_bytes())[..16].to_string();
    let mut principals = vec![Principal {
        label: "1 stdio",
        client: stdio,
        uploads: None,
        named_by: "-".into(),
    }];
    let http = [
        (
            "2 token A + header",
            &plain,
            vec![key(TOKEN_A), header_user.clone()],
            format!("header (token {})", token_id(TOKEN_A)),
        ),
        (
            "3 token B + header",
            &plain,
            vec![key(TOKEN_B), header_user.clone()],
            format!("header (token {})", token_id(TOKEN_B)),
        ),
        (
            "4 token A + signed token",
            &signed,
            vec![key(TOKEN_A), signed_user],
            format!("openwebui-jwt (token {})", token_id(TOKEN_A)),
        ),
        (
            "5 OAuth issuer 1",
            &plain,
            vec![oauth(&issuer_1)],
            format!("oauth ({})", issuer_1.url),
        ),
        (
            "6 OAuth issuer 2",
            &plain,
            vec![oauth(&issuer_2)],
            format!("oauth ({})", issuer_2.url),
        ),
        (
            "7 Open WebUI session",
            &session,
            vec![key(TOKEN_A), ("authorization", format!("Bearer {ALICE}"))],
            format!("openwebui-session (token {})", token_id(TOKEN_A)),
        ),
    ];
    for (label, server, pairs, named_by) in http {
        // Uploads go to the local store, which the session server does not have.
        let uploads = (server.url != session.url).then(|| (server.url.clone(), pairs.clone()));
        principals.push(Principal {
            label,
            client: server.client_with_headers(headers(&pairs)).await,
            uploads,
            named_by,
        });
    }

    let mut made = Vec::new();
    for (n, principal) in principals.iter().enumerate() {
        made.push(make(n + 1, principal).await);
    }
    let mut cells = 0;
    for (i, first) in made.iter().enumerate() {
        for (j, second) in principals.iter().enumerate() {
            // Open WebUI's files are listed by Open WebUI, not here.
            cells += check(second, first, i == j, j != 6).await;
        }
    }
    // 7 x 7 pairs; each: list (not for the session user's own), read, id, URI, upload (for
    // principals 2 to 6; not of one's own), tool list, tool call.
    assert_eq!(cells, 7 * 7 * 6 - 1 + 5 * 6, "cells checked");

    // The review page: one row per principal, each with its own attempts (a make, a check of
    // its tool, a call of it, and its own inputs by id and by URI).
    let report = crate::audit_report::report(data.path(), &[]).await.1;
    let rows = crate::audit_report::parse(&report).by_id("users").rows();
    for principal in &principals {
        let row = rows
            .iter()
            .find(|row| row[1] == principal.named_by)
            .unwrap_or_else(|| panic!("{}: no row in {rows:?}", principal.label));
        assert_eq!(row[2], "5", "{}: {row:?}", principal.label);
    }
    assert_eq!(rows.len(), 7, "{rows:?}");

    // Open WebUI's storage: another session user reads nothing of the first's, because Open
    // WebUI says so (a 404 to bob's own token).
    let bob = session
        .client_with_headers(headers(&[
            key(TOKEN_A),
            ("authorization", format!("Bearer {BOB}")),
        ]))
        .await;
    let bob = Principal {
        label: "Open WebUI session bob",
        client: bob,
        uploads: None,
        named_by: String::new(),
    };
    check(&bob, &made[6], false, false).await;
    assert!(owui.bearers().iter().any(|bearer| bearer == BOB));

    for principal in principals {
        let _ = principal.client.cancel().await;
    }
    let _ = bob.client.cancel().await;
    for server in [&plain, &signed, &session] {
        server.assert_nothing_left().await;
    }
    assert_no_containers_of(instance).await;
}

/// The server's own tokens (an access token, the metrics token) never leave it, whatever
/// header carries them: not to Open WebUI (as if a user's session), not to the model, not to a
/// fetched document's server, not into the log (at `trace`) or the audit trail. Against the
/// real `file-agent serve` process, with each way out exercised.
#[tokio::test]
async fn the_servers_own_tokens_never_leave_whatever_header_carries_them() {
    use std::sync::{Arc, Mutex};

    use crate::fakes::openai::{FakeOpenAi, Reply};
    use crate::front_door::{Served, free_port, post_mcp};

    const METRICS: &str = "tenant-metrics-token-0123456789abcdef";
    let owui = FakeOpenWebUi::start().await;
    let llm = FakeOpenAi::start(
        (0..3)
            .map(|_| Reply::Code(crate::mcp_server::llm_script("excel_sales.py")))
            .collect(),
    )
    .await;
    // A document server that records every header value it is sent, and serves more than the
    // input cap (the call ends in the fetch, before any model request).
    let fetched: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = fetched.clone();
    let documents = crate::fakes::spawn(axum::Router::new().route(
        "/sales.xlsx",
        axum::routing::get(move |headers: http::HeaderMap| async move {
            seen.lock().unwrap().extend(
                headers
                    .values()
                    .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()),
            );
            "x".repeat(2 << 20)
        }),
    ))
    .await;
    let listen = format!("127.0.0.1:{}", free_port());
    let mut vars = vec![
        ("FILE_AGENT_LISTEN", listen.as_str()),
        ("FILE_AGENT_LOG", "trace"),
        ("FILE_AGENT_ACCESS_TOKENS", TOKEN_A),
        ("FILE_AGENT_METRICS_TOKEN", METRICS),
        ("INTERNAL_API_URL", &owui.url),
        ("OPENWEBUI_API_KEY", ALICE),
        ("FILE_AGENT_URL_ALLOWED_NETWORKS", "127.0.0.0/8"),
        ("FILE_AGENT_INPUT_MAX_MIB", "1"),
    ];
    let llm_env = llm.env();
    vars.extend(llm_env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let served = Served::start(&vars, None).await;

    let user_agent = format!("some-client/1.0 ({TOKEN_A})");
    let bearer_a = format!("Bearer {TOKEN_A}");
    let bearer_metrics = format!("Bearer {METRICS}");
    let tries: [Vec<(&str, &str)>; 3] = [
        // The key sent again as the bearer (Open WebUI's "Bearer" auth beside the header).
        vec![("x-file-agent-key", TOKEN_A), ("authorization", &bearer_a)],
        // The metrics token as the bearer.
        vec![
            ("x-file-agent-key", TOKEN_A),
            ("authorization", &bearer_metrics),
        ],
        // A token in headers that name the user, the chat and the client (logged, written).
        vec![
            ("x-file-agent-key", TOKEN_A),
            ("x-openwebui-user-id", TOKEN_A),
            ("x-openwebui-chat-id", METRICS),
            ("user-agent", &user_agent),
        ],
    ];
    let calls = [
        json!({"name": "run_python", "arguments": {"code": "open(output_dir + '/x.txt', 'w').write('x')"}}),
        json!({"name": "generate_file", "arguments": {"instructions": "A sales workbook", "file_type": "excel"}}),
        json!({"name": "data_analysis_tool", "arguments": {"query": "rows?",
               "document": format!("{documents}/sales.xlsx"), "document_name": "sales.xlsx"}}),
    ];
    for headers in &tries {
        for (n, params) in calls.iter().enumerate() {
            let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params});
            let (status, answer) = post_mcp(&served.url, body, headers).await;
            assert_eq!(status, 200, "{answer}");
            if n < 2 {
                assert!(answer.contains("\"isError\":false"), "{params}: {answer}");
            }
        }
    }
    let (log, dir) = served.stop_keeping().await;
    let trail = crate::common::audit_text(&dir.path().join("data"));

    // Each way out was taken: Open WebUI got the stores (with the API key), the model its
    // requests, the document server its fetches; the log and the trail hold the calls.
    assert!(owui.bearers().iter().any(|bearer| bearer == ALICE));
    assert_eq!(llm.requests().len(), 3);
    assert!(fetched.lock().unwrap().len() >= 3);
    assert!(log.contains("run_python") && trail.contains("generate_file"));
    let model = format!("{:?}{:?}", llm.header_values(), llm.requests());
    let ways: [(&str, String); 5] = [
        ("Open WebUI", owui.bearers().join("\n")),
        ("the model", model),
        ("a fetched URL", fetched.lock().unwrap().join("\n")),
        ("the log", log),
        ("the audit trail", trail),
    ];
    for (way, text) in ways {
        for token in [TOKEN_A, METRICS] {
            assert!(!text.contains(token), "{token} reached {way}:\n{text}");
        }
    }
}

/// `POST /files` passes the same gate as `/mcp` and the upload is its caller's: a bare access
/// token's upload is that token's alone, and an upload whose user Open WebUI's signed mode
/// requires but nothing proved is refused. A file stored before owner keys (`user:<id>`) is
/// read by that user id, through any voucher, and listed for nobody (CHANGELOG's upgrade rule).
#[tokio::test]
async fn uploads_are_their_callers_and_files_from_before_owner_keys_are_read_by_their_user_only() {
    let plain = TestServer::start(&env(&[(
        "FILE_AGENT_ACCESS_TOKENS",
        &format!("{TOKEN_A},{TOKEN_B}"),
    )]))
    .await;
    let bearer = |token: &str| vec![("authorization", format!("Bearer {token}"))];
    let client = |pairs: Vec<(&'static str, String)>| plain.client_with_headers(headers(&pairs));
    let principal = |label, client| Principal {
        label,
        client,
        uploads: None,
        named_by: String::new(),
    };
    let bare_a = principal("bare token A", client(bearer(TOKEN_A)).await);
    let bare_b = principal("bare token B", client(bearer(TOKEN_B)).await);
    let mut with_user = bearer(TOKEN_A);
    with_user.push(("x-openwebui-user-id", USER.to_string()));
    let alice_a = principal("token A + header", client(with_user).await);

    let id = upload(&plain.url, &bearer(TOKEN_A), "the token's own upload").await;
    let (is_error, text) = run_with(&bare_a, &[&id]).await;
    assert!(
        !is_error && text.contains("the token's own upload"),
        "{text}"
    );
    for other in [&bare_b, &alice_a] {
        let (is_error, text) = run_with(other, &[&id]).await;
        assert!(
            is_error && text.contains("was not found"),
            "{}: {text}",
            other.label
        );
    }

    // A file as a build before owner keys stored it: owned by `user:<id>`.
    let old = "0123456789abcdef0123456789abcdef";
    let folder = plain.data_dir().join("files").join(old);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("old.txt"), "an old file").unwrap();
    std::fs::write(folder.join(".owner"), format!("user:{USER}")).unwrap();
    let uri = format!("file-agent://files/{old}/old.txt");
    assert_eq!(read(&alice_a, &uri).await.unwrap(), "an old file");
    assert!(!listed(&alice_a).await.contains(&uri), "never listed");
    let mut bob = bearer(TOKEN_A);
    bob.push(("x-openwebui-user-id", "bob".to_string()));
    let bob = principal("token A + header bob", client(bob).await);
    for other in [&bob, &bare_a] {
        assert!(read(other, &uri).await.is_err(), "{}", other.label);
        let (is_error, _) = run_with(other, &[old]).await;
        assert!(is_error, "{}", other.label);
    }

    // Signed mode with no signed token: no user is proven, so the upload could be no one's.
    let signed = TestServer::start(&env(&[
        ("FILE_AGENT_ACCESS_TOKENS", TOKEN_A),
        ("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET", JWT_SECRET),
    ]))
    .await;
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(b"x".to_vec()).file_name("x.txt"),
    );
    let response = with_timeout(
        reqwest::Client::new()
            .post(format!("{}/files", signed.url))
            .bearer_auth(TOKEN_A)
            .multipart(form)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 403);
    let body = response.text().await.unwrap();
    assert!(body.contains("X-OpenWebUI-User-Jwt"), "{body}");

    for principal in [bare_a, bare_b, alice_a, bob] {
        let _ = principal.client.cancel().await;
    }
    plain.assert_nothing_left().await;
}

/// With `OPENWEBUI_API_KEY` (no session forwarding), Open WebUI sees one user for every
/// caller; file-agent records the owner of what it stores there and keeps callers apart
/// itself: another token's user gets "not found" for the file, by id and by URI.
#[tokio::test]
async fn with_open_webuis_api_key_file_agent_keeps_the_owners_of_its_files_apart() {
    let owui = FakeOpenWebUi::start().await;
    let server = TestServer::start(&env(&[
        ("FILE_AGENT_ACCESS_TOKENS", &format!("{TOKEN_A},{TOKEN_B}")),
        ("INTERNAL_API_URL", &owui.url),
        ("OPENWEBUI_API_KEY", ALICE),
    ]))
    .await;
    let as_user =
        |token: &str| headers(&[key_header(token), ("x-openwebui-user-id", USER.to_string())]);
    let principal = |label, client| Principal {
        label,
        client,
        uploads: None,
        named_by: String::new(),
    };
    let alice_a = principal(
        "token A",
        server.client_with_headers(as_user(TOKEN_A)).await,
    );
    let alice_b = principal(
        "token B",
        server.client_with_headers(as_user(TOKEN_B)).await,
    );
    let made = make(1, &alice_a).await;
    assert!(
        owui.get(&made.id).is_some_and(|file| file.owner == ALICE),
        "stored in Open WebUI as the key's user"
    );
    let (is_error, text) = run_with(&alice_a, &[&made.id]).await;
    assert!(!is_error && text.contains(&made.secret), "{text}");
    for value in [&made.id, &made.uri] {
        let (is_error, text) = run_with(&alice_b, &[value]).await;
        assert!(
            is_error && text.contains("was not found"),
            "{value}: {text}"
        );
    }
    assert!(read(&alice_b, &made.uri).await.is_err());
    assert_eq!(read(&alice_a, &made.uri).await.unwrap(), made.secret);
    for principal in [alice_a, alice_b] {
        let _ = principal.client.cancel().await;
    }
    server.assert_nothing_left().await;
}

fn key_header(token: &str) -> (&'static str, String) {
    ("x-file-agent-key", token.to_string())
}
