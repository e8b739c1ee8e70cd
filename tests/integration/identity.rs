//! Who called, proven: Open WebUI's signed user token (minted exactly as Open WebUI 0.12 mints
//! it, in Rust and by the official SDK's PyJWT), OAuth 2.1 access tokens against a real issuer
//! (Debian's glewlwyd, run by `tests/issuer/glewlwyd.sh`) and the tests' own issuer for the
//! hostile cases. Each refusal is a 401/403 or a tool error saying what to fix, and nothing ran.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use jsonwebtoken::Algorithm;
use serde_json::{Value, json};

use crate::common::with_timeout;
use crate::fakes::issuer::{FakeIssuer, Jwks, Key};
use crate::fakes::openwebui::{
    ALICE, FakeOpenWebUi, ForwardedUser, forwarded_headers, mint_forward_user_jwt,
};
use crate::mcp_server::{TestServer, call, env, python_sdk};

const TOKEN: &str = "test-access-token-0123456789";
const SECRET: &str = "forward-user-jwt-secret-0123456789abcdef";

const ALICE_USER: ForwardedUser = ForwardedUser {
    id: "u-alice",
    name: "Alice",
    email: "alice@example.com",
    role: "user",
};
const BOB_USER: ForwardedUser = ForwardedUser {
    id: "u-bob",
    name: "Bob",
    email: "bob@example.com",
    role: "user",
};

fn header_map(pairs: &[(&str, String)]) -> HashMap<http::HeaderName, http::HeaderValue> {
    pairs
        .iter()
        .map(|(name, value)| {
            (
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_str(value).unwrap(),
            )
        })
        .collect()
}

/// Calls `tool` with `arguments` over a client that sends `headers`; (is_error, text).
async fn call_with(
    server: &TestServer,
    headers: &[(&str, String)],
    tool: &str,
    arguments: Value,
) -> (bool, String) {
    let client = server.client_with_headers(header_map(headers)).await;
    let result = call(&client, tool, arguments).await;
    let _ = client.cancel().await;
    result
}

/// The tools a client sending `headers` is shown.
async fn listed(server: &TestServer, headers: &[(&str, String)]) -> Vec<String> {
    let client = server.client_with_headers(header_map(headers)).await;
    let tools = with_timeout(client.list_all_tools()).await.unwrap();
    let _ = client.cancel().await;
    tools
        .into_iter()
        .map(|tool| tool.name.to_string())
        .collect()
}

/// A raw `tools/call` POST; the status, the `WWW-Authenticate` header and the body.
async fn raw_call(
    server: &TestServer,
    headers: &[(&str, String)],
    tool: &str,
    arguments: Value,
) -> (u16, String, String) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/mcp", server.url))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}}));
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = with_timeout(request.send()).await.unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    // The refusal's message, unescaped, when the body is `{"error": ...}`.
    let body = with_timeout(response.text()).await.unwrap();
    let body = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|value| value["error"].as_str().map(str::to_string))
        .unwrap_or(body);
    (status, challenge, body)
}

async fn metrics(server: &TestServer) -> String {
    with_timeout(reqwest::get(format!("{}/metrics", server.url)))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

const ADD: &str = "def run(a, b):\n    return {'sum': a + b}\n";

fn add_tool() -> Value {
    json!({"name": "add", "description": "Adds two integers.", "code": ADD,
           "input_schema": {"type": "object",
                            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                            "required": ["a", "b"], "examples": [{"a": 1, "b": 2}]}})
}

#[tokio::test]
async fn open_webuis_signed_token_names_the_user_and_plain_headers_are_never_trusted() {
    let server = TestServer::start(&env(&[
        ("FILE_AGENT_ACCESS_TOKENS", TOKEN),
        ("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET", SECRET),
    ]))
    .await;
    let key = ("x-file-agent-key", TOKEN.to_string());
    let as_user = |user: &ForwardedUser| {
        let mut headers = forwarded_headers(user, Some(SECRET), "chat-1", "message-1");
        headers.push(key.clone());
        headers
    };

    // Alice, signed: her calls run as hers, and her saved tool is hers only.
    let (is_error, text) = call_with(
        &server,
        &as_user(&ALICE_USER),
        "run_python",
        json!({"code": "print(6 * 7)"}),
    )
    .await;
    assert!(!is_error && text.contains("42"), "{text}");
    let (is_error, text) =
        call_with(&server, &as_user(&ALICE_USER), "create_tool", add_tool()).await;
    assert!(!is_error, "{text}");
    assert!(
        listed(&server, &as_user(&ALICE_USER))
            .await
            .contains(&"my_add".to_string())
    );
    assert!(
        !listed(&server, &as_user(&BOB_USER))
            .await
            .contains(&"my_add".to_string())
    );

    // A plain header naming Bob beside Alice's signed token: refused, nothing ran.
    let mut forged = as_user(&ALICE_USER);
    forged.push(("x-openwebui-user-id", "u-bob".into()));
    let (is_error, text) =
        call_with(&server, &forged, "run_python", json!({"code": "print(1)"})).await;
    assert!(is_error && text.contains("X-OpenWebUI-User-Id"), "{text}");

    // Plain headers only, as Open WebUI sends them without a secret: the code runs, but nobody
    // is its user, and saved tools say which setting is missing.
    let mut plain = forwarded_headers(&BOB_USER, None, "chat-2", "message-2");
    plain.push(key.clone());
    let (is_error, text) =
        call_with(&server, &plain, "run_python", json!({"code": "print(2)"})).await;
    assert!(!is_error, "{text}");
    let (is_error, text) = call_with(&server, &plain, "list_tools", json!({})).await;
    assert!(
        is_error
            && text.contains("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET")
            && text.contains("no X-OpenWebUI-User-Jwt header"),
        "{text}"
    );
    // An expired token, and one signed with another secret: the same, with the reason.
    let mut expired = vec![key.clone()];
    expired.push((
        "x-openwebui-user-jwt",
        mint_forward_user_jwt(&ALICE_USER, SECRET, -120),
    ));
    let (is_error, text) = call_with(&server, &expired, "list_tools", json!({})).await;
    assert!(
        is_error
            && text.contains("expired")
            && text.contains("FORWARD_USER_INFO_HEADER_JWT_EXPIRES_SECONDS"),
        "{text}"
    );
    // A call that still runs (it needs no user) says in its line why it names none.
    let (is_error, text) =
        call_with(&server, &expired, "run_python", json!({"code": "print(3)"})).await;
    assert!(!is_error, "{text}");
    let mut wrong = vec![key.clone()];
    wrong.push((
        "x-openwebui-user-jwt",
        mint_forward_user_jwt(&ALICE_USER, "another-secret-0123456789abcdef-xyz", 300),
    ));
    let (is_error, text) = call_with(&server, &wrong, "my_add", json!({"a": 1, "b": 2})).await;
    assert!(
        is_error && text.contains("signature does not match"),
        "{text}"
    );

    // The trail: Alice's lines are hers and say what proved it; the forged call is a refusal
    // with no container; Bob's plain header named nobody.
    let lines = server.audit_lines();
    let alice: Vec<&Value> = lines.iter().filter(|l| l["user"] == "u-alice").collect();
    assert!(alice.len() >= 2, "{lines:?}");
    for line in &alice {
        assert_eq!(line["identity"], "openwebui-jwt", "{line}");
        assert!(
            line["token_id"].as_str().is_some_and(|t| t.len() == 16),
            "{line}"
        );
    }
    let refused: Vec<&Value> = lines
        .iter()
        .filter(|l| l["status"] == "refused_identity")
        .collect();
    assert_eq!(refused.len(), 1, "{lines:?}");
    assert_eq!(refused[0]["user"], "u-alice");
    assert_eq!(refused[0]["container"], Value::Null);
    assert!(refused[0]["error"].as_str().unwrap().contains("u-bob"));
    assert!(lines.iter().all(|l| l["user"] != "u-bob"), "{lines:?}");
    let plain_line = lines.iter().find(|l| l["code"] == "print(2)").unwrap();
    assert_eq!(plain_line["user"], Value::Null);
    assert_eq!(plain_line["identity"], "access-token");
    assert_eq!(plain_line.get("identity_refused"), None, "{plain_line}");
    let expired_line = lines.iter().find(|l| l["code"] == "print(3)").unwrap();
    assert_eq!(expired_line["user"], Value::Null);
    assert_eq!(expired_line["identity_refused"], "openwebui-jwt: expired");

    let metrics = metrics(&server).await;
    for (source, reason) in [
        ("header", "conflict"),
        ("openwebui-jwt", "missing"),
        ("openwebui-jwt", "expired"),
        ("openwebui-jwt", "bad_signature"),
    ] {
        assert!(
            metrics.contains(&format!(
                "file_agent_identity_refused_total{{source=\"{source}\",reason=\"{reason}\"}}"
            )),
            "{source}/{reason} not counted:\n{metrics}"
        );
    }
    server.assert_nothing_left().await;
}

/// The official SDK with PyJWT, as Open WebUI mints the token: the per-user saved tool works
/// only because the signed user was proven (a plain header is ignored in this mode).
#[tokio::test]
async fn the_official_sdk_with_a_token_minted_by_pyjwt_is_its_user() {
    let server = TestServer::start(&env(&[("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET", SECRET)])).await;
    let output = python_sdk(
        &server.url,
        &[
            "--user-id",
            "u-carol",
            "--openwebui-jwt-secret",
            SECRET,
            "--saved-tool",
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("saved tool result:"), "{stdout}");
    let lines = server.audit_lines();
    assert!(!lines.is_empty());
    for line in &lines {
        assert_eq!(line["user"], "u-carol", "{line}");
        assert_eq!(line["identity"], "openwebui-jwt", "{line}");
    }
    server.assert_nothing_left().await;
}

/// Open WebUI's session auth: the forwarded token is the user's, and Open WebUI's answer on
/// it names them; a plain header naming someone else is a conflict.
#[tokio::test]
async fn open_webuis_word_on_a_session_token_names_its_user() {
    let owui = FakeOpenWebUi::start().await;
    let server = TestServer::start(&env(&[
        ("FILE_AGENT_ACCESS_TOKENS", TOKEN),
        ("INTERNAL_API_URL", &owui.url),
    ]))
    .await;
    let session = [
        ("x-file-agent-key", TOKEN.to_string()),
        ("authorization", format!("Bearer {ALICE}")),
    ];
    let (is_error, text) =
        call_with(&server, &session, "run_python", json!({"code": "print(1)"})).await;
    assert!(!is_error, "{text}");
    let mut forged = session.to_vec();
    forged.push(("x-openwebui-user-id", "token-bob".into()));
    let (is_error, text) =
        call_with(&server, &forged, "run_python", json!({"code": "print(2)"})).await;
    assert!(is_error && text.contains("openwebui-session"), "{text}");
    let lines = server.audit_lines();
    assert_eq!(lines[0]["user"], ALICE, "{}", lines[0]);
    assert_eq!(lines[0]["identity"], "openwebui-session");
    assert_eq!(lines[1]["status"], "refused_identity");
    server.assert_nothing_left().await;
}

/// OAuth against the tests' own issuer: metadata, a good token of each algorithm, and every
/// hostile token refused before anything runs, with the 401 pointing at the metadata.
#[tokio::test]
async fn oauth_tokens_are_verified_and_every_hostile_one_is_refused() {
    let issuer = FakeIssuer::start().await;
    let owui = FakeOpenWebUi::start().await;
    let csv = owui.add(ALICE, "data.csv", "text/csv", b"x\n1\n".to_vec());
    let server = TestServer::start(&env(&[
        ("FILE_AGENT_OAUTH_ISSUER", &issuer.url),
        ("INTERNAL_API_URL", &owui.url),
        ("OPENWEBUI_API_KEY", ALICE),
    ]))
    .await;
    let audience = format!("{}/mcp", server.url);
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", server.url);

    // The protected-resource metadata, at both paths.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let document: Value = with_timeout(reqwest::get(format!("{}{path}", server.url)))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(document["resource"], audience, "{document}");
        assert_eq!(document["authorization_servers"], json!([issuer.url]));
        assert_eq!(document["bearer_methods_supported"], json!(["header"]));
        assert_eq!(
            document["scopes_supported"],
            json!(["file-agent.run", "file-agent.saved-tools"])
        );
    }

    // No token: 401, naming the scopes to sign in with and pointing at the metadata.
    let (status, challenge, _) =
        raw_call(&server, &[], "run_python", json!({"code": "print(1)"})).await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge,
        format!(
            "Bearer realm=\"file-agent\", scope=\"file-agent.run file-agent.saved-tools\", resource_metadata=\"{metadata_url}\""
        )
    );

    // A good token of each algorithm.
    let claims = issuer.claims(&audience, "alice", "file-agent.run file-agent.saved-tools");
    for (key, algorithm) in [
        (Key::Rsa1, Algorithm::RS256),
        (Key::Rsa1, Algorithm::PS256),
        (Key::Ec, Algorithm::ES256),
        (Key::Ed, Algorithm::EdDSA),
    ] {
        let token = issuer.sign_as(key, algorithm, &claims);
        let response = crate::access::initialize(
            &server.url,
            &[("authorization", &format!("Bearer {token}"))],
        )
        .await;
        assert_eq!(response.status(), 200, "{algorithm:?}");
    }
    // A call as Alice: hers in the trail, and her token goes nowhere: not to Open WebUI (the
    // server's key fetched the file), not into the sandbox, not into the trail.
    let token = issuer.sign(Key::Rsa1, &claims);
    let bearer = [("authorization", format!("Bearer {token}"))];
    let (is_error, text) = call_with(
        &server,
        &bearer,
        "run_python",
        json!({"code": "import os\nprint(sorted(os.environ.items()), open('/work/in/data.csv').read())",
               "file_ids": [csv]}),
    )
    .await;
    assert!(!is_error && text.contains("x\n1"), "{text}");
    assert!(
        !text.contains(&token[..40]),
        "the token reached the sandbox"
    );
    assert!(
        owui.bearers().iter().all(|seen| seen == ALICE),
        "{:?}",
        owui.bearers()
    );
    let lines = server.audit_lines();
    let line = lines.last().unwrap();
    assert_eq!(line["user"], "alice", "{line}");
    assert_eq!(line["identity"], "oauth");
    assert_eq!(line["issuer"], issuer.url);
    let trail = std::fs::read_dir(server.data_dir().join("audit"))
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default())
        .collect::<String>();
    assert!(!trail.contains(&token[..40]));
    let attempts = lines.len();

    // The hostile tokens: each a 401 with invalid_token and a reason, none ran anything.
    let claim = |change: &dyn Fn(&mut Value)| {
        let mut claims = claims.clone();
        change(&mut claims);
        claims
    };
    let now = crate::fakes::issuer::now();
    let public_pem = std::fs::read(format!(
        "{}/tests/fixtures/oauth/rsa-1.pub.pem",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let hmac_with_public_key = {
        let mut header = jsonwebtoken::Header::new(Algorithm::HS256);
        header.kid = Some("rsa-1".into());
        jsonwebtoken::encode(
            &header,
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(&public_pem),
        )
        .unwrap()
    };
    let unsigned = {
        let signed = issuer.sign(Key::Rsa1, &claims);
        let payload = signed.split('.').nth(1).unwrap().to_string();
        // {"alg":"none","typ":"at+jwt","kid":"rsa-1"}
        format!("eyJhbGciOiJub25lIiwidHlwIjoiYXQrand0Iiwia2lkIjoicnNhLTEifQ.{payload}.")
    };
    let foreign = FakeIssuer::start().await;
    let hostile: Vec<(&str, String, &str)> = vec![
        (
            "wrong audience",
            issuer.sign(
                Key::Rsa1,
                &claim(&|c| c["aud"] = json!("https://other.example/mcp")),
            ),
            "not issued for this server",
        ),
        (
            "wrong issuer",
            foreign.sign(
                Key::Rsa1,
                &foreign.claims(&audience, "alice", "file-agent.run"),
            ),
            "is not one this server accepts",
        ),
        (
            "expired",
            issuer.sign(Key::Rsa1, &claim(&|c| c["exp"] = json!(now - 120))),
            "has expired",
        ),
        (
            "not yet valid",
            issuer.sign(Key::Rsa1, &claim(&|c| c["nbf"] = json!(now + 600))),
            "not valid yet",
        ),
        ("alg none", unsigned, "\"none\""),
        (
            "HS256 with the public key",
            hmac_with_public_key,
            "\"HS256\"",
        ),
        (
            "a kid absent from the JWKS",
            issuer.sign(Key::Rsa2, &claims),
            "is not among its issuer's keys",
        ),
        (
            "a forged signature",
            {
                let token = issuer.sign(Key::Rsa1, &claims);
                let (rest, _) = token.rsplit_once('.').unwrap();
                let other = issuer.sign(Key::Rsa1, &claim(&|c| c["sub"] = json!("mallory")));
                format!("{rest}.{}", other.rsplit_once('.').unwrap().1)
            },
            "signature does not verify",
        ),
        (
            "no user claim",
            issuer.sign(
                Key::Rsa1,
                &claim(&|c| {
                    c.as_object_mut().unwrap().remove("sub");
                }),
            ),
            "lacks the claim \"sub\"",
        ),
        (
            "100 KB",
            format!("{}.{}.x", "a".repeat(100), "b".repeat(100_000)),
            "larger than",
        ),
        ("not a JWT", "opaque-token-0123456789".into(), "not a JWT"),
    ];
    for (case, token, reason) in &hostile {
        let (status, challenge, body) = raw_call(
            &server,
            &[("authorization", format!("Bearer {token}"))],
            "run_python",
            json!({"code": "print('ran')"}),
        )
        .await;
        assert_eq!(status, 401, "{case}: {body}");
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{case}: {challenge}"
        );
        assert!(
            challenge.contains(&format!("resource_metadata=\"{metadata_url}\""))
                && challenge.contains("scope=\"file-agent.run file-agent.saved-tools\""),
            "{case}: {challenge}"
        );
        assert!(body.contains(reason), "{case}: {body}");
    }
    // 1 MB: refused at the door (hyper's header limit), never admitted.
    let (status, _, _) = raw_call(
        &server,
        &[(
            "authorization",
            format!("Bearer {}", "a".repeat(1024 * 1024)),
        )],
        "run_python",
        json!({"code": "print('ran')"}),
    )
    .await;
    assert!(matches!(status, 401 | 431), "{status}");

    // Scopes: without file-agent.run, 403 insufficient_scope; without saved-tools, those
    // tools are not listed and a call of one is refused naming the scope.
    let (status, challenge, body) = raw_call(
        &server,
        &[(
            "authorization",
            format!(
                "Bearer {}",
                issuer.sign(Key::Rsa1, &claim(&|c| c["scope"] = json!("openid")))
            ),
        )],
        "run_python",
        json!({"code": "print('ran')"}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        challenge.contains("error=\"insufficient_scope\", scope=\"file-agent.run\""),
        "{challenge}"
    );
    let runner = [(
        "authorization",
        format!(
            "Bearer {}",
            issuer.sign(Key::Rsa1, &claim(&|c| c["scope"] = json!("file-agent.run")))
        ),
    )];
    let names = listed(&server, &runner).await;
    assert!(names.contains(&"run_python".to_string()) && names.contains(&"list_tools".to_string()));
    assert!(!names.contains(&"create_tool".to_string()), "{names:?}");
    let (is_error, text) = call_with(&server, &runner, "create_tool", add_tool()).await;
    assert!(
        is_error && text.contains("file-agent.saved-tools"),
        "{text}"
    );

    assert_eq!(
        server.audit_lines().len(),
        attempts,
        "a refused token ran nothing"
    );
    let metrics = metrics(&server).await;
    for reason in [
        "wrong_audience",
        "wrong_issuer",
        "expired",
        "not_yet_valid",
        "algorithm",
        "unknown_key",
        "bad_signature",
        "missing_claim",
        "too_large",
        "malformed",
        "insufficient_scope",
    ] {
        assert!(
            metrics.contains(&format!(
                "file_agent_identity_refused_total{{source=\"oauth\",reason=\"{reason}\"}}"
            )),
            "{reason} not counted:\n{metrics}"
        );
    }
    server.assert_nothing_left().await;
}

/// A key rotation needs no restart: a token signed by a new key is refused while the JWKS
/// lacks it, and accepted once the issuer publishes it, with refetches rate-limited.
#[tokio::test]
async fn a_rotated_key_is_fetched_again_without_a_restart_and_at_a_bounded_rate() {
    let issuer = FakeIssuer::start().await;
    let server = TestServer::start(&env(&[("FILE_AGENT_OAUTH_ISSUER", &issuer.url)])).await;
    let claims = issuer.claims(&format!("{}/mcp", server.url), "alice", "file-agent.run");
    let init = |token: String| {
        let url = server.url.clone();
        async move {
            crate::access::initialize(&url, &[("authorization", &format!("Bearer {token}"))])
                .await
                .status()
                .as_u16()
        }
    };
    assert_eq!(init(issuer.sign(Key::Rsa1, &claims)).await, 200);
    let fetched = issuer.jwks_fetches();
    // Twenty tokens naming an unknown key, at once: at most one more fetch.
    let mut refused = Vec::new();
    for _ in 0..20 {
        refused.push(init(issuer.sign(Key::Rsa2, &claims)));
    }
    for status in futures_util::future::join_all(refused).await {
        assert_eq!(status, 401);
    }
    assert!(
        issuer.jwks_fetches() <= fetched + 1,
        "{}",
        issuer.jwks_fetches()
    );
    issuer.rotate();
    let started = Instant::now();
    loop {
        if init(issuer.sign(Key::Rsa2, &claims)).await == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the new key was never fetched"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        issuer.jwks_fetches() <= fetched + 3,
        "{}",
        issuer.jwks_fetches()
    );
    // The old key still works.
    assert_eq!(init(issuer.sign(Key::Rsa1, &claims)).await, 200);
}

/// An issuer whose JWKS hangs, or runs to 10 MB: the token is refused within the fetch
/// timeout, with the reason, and the server stays responsive.
#[tokio::test]
async fn a_jwks_that_hangs_or_is_huge_is_a_refusal_within_the_bounds() {
    for (mode, reason) in [(Jwks::Hang, "timed out"), (Jwks::Huge, "larger than")] {
        let issuer = FakeIssuer::start().await;
        issuer.serve_jwks(mode);
        let server = TestServer::start(&env(&[
            ("FILE_AGENT_OAUTH_ISSUER", &issuer.url),
            ("FILE_AGENT_OAUTH_FETCH_TIMEOUT", "2"),
        ]))
        .await;
        let token = issuer.sign(
            Key::Rsa1,
            &issuer.claims(&format!("{}/mcp", server.url), "alice", "file-agent.run"),
        );
        let started = Instant::now();
        let (status, challenge, body) = raw_call(
            &server,
            &[("authorization", format!("Bearer {token}"))],
            "run_python",
            json!({"code": "print('ran')"}),
        )
        .await;
        assert_eq!(status, 401, "{mode:?}: {body}");
        assert!(
            body.contains("could not be fetched") && body.contains(reason),
            "{mode:?}: {body}"
        );
        assert!(challenge.contains("invalid_token"), "{challenge}");
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{mode:?}: {:?}",
            started.elapsed()
        );
        let health = with_timeout(reqwest::get(format!("{}/health", server.url)))
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        assert!(server.audit_lines().is_empty());
    }
}

/// A real issuer: the official SDK signs in at glewlwyd by itself (401, protected-resource
/// metadata, discovery, client credentials for the resource) and becomes its user.
#[tokio::test]
async fn an_mcp_client_signs_in_at_a_real_issuer_and_becomes_its_user() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let resource = format!("http://{}/mcp", listener.local_addr().unwrap());
    let glewlwyd = Glewlwyd::start(&resource).await;
    let server = TestServer::start_on(
        listener,
        tempfile::tempdir().unwrap(),
        &env(&[("FILE_AGENT_OAUTH_ISSUER", &glewlwyd.issuer)]),
    )
    .await;
    let output = crate::mcp_server::sdk_script(
        "oauth_client.py",
        &[
            resource.as_str(),
            &glewlwyd.issuer,
            "test-client",
            "test-secret",
            "file-agent.run",
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("result: 42"), "{stdout}");
    // The SDK asks for the scopes the 401 names, both, so its token may change saved tools
    // too, and those tools are listed.
    assert!(
        stdout.contains("run_python") && stdout.contains("create_tool"),
        "{stdout}"
    );
    let lines = server.audit_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        lines[0]["user"], "test-client",
        "client credentials: sub is the client"
    );
    assert_eq!(lines[0]["identity"], "oauth");
    assert_eq!(lines[0]["issuer"], glewlwyd.issuer);

    // A token glewlwyd issued for no resource (its aud is then the scope list): refused.
    let token = glewlwyd.token(&[("scope", "file-agent.run")]).await;
    let (status, _, body) = raw_call(
        &server,
        &[("authorization", format!("Bearer {token}"))],
        "run_python",
        json!({"code": "print('ran')"}),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("not issued for this server"), "{body}");
    // A user's token by the password grant carries her `sub`; with the resource, accepted.
    let token = glewlwyd
        .token(&[
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "alice-password"),
            ("scope", "file-agent.run file-agent.saved-tools"),
        ])
        .await;
    let claims = file_agent_claims(&token);
    assert_eq!(claims["sub"], "alice");
    // glewlwyd's password grant ignores `resource`: its aud is the scope list, so the same
    // refusal names what to ask the issuer for.
    let (status, _, body) = raw_call(
        &server,
        &[("authorization", format!("Bearer {token}"))],
        "run_python",
        json!({"code": "print('ran')"}),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains(&format!("resource={resource}")), "{body}");
    assert_eq!(server.audit_lines().len(), 1);
    server.assert_nothing_left().await;
}

/// The payload of a JWT, unverified (for a test's look at what an issuer issued).
fn file_agent_claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap()
}

/// Debian's glewlwyd, run by `tests/issuer/glewlwyd.sh` in the foreground (stopped with the
/// test: the child is killed on drop and the script forwards the signal).
struct Glewlwyd {
    issuer: String,
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl Glewlwyd {
    /// An issuer that issues tokens for `resource`.
    async fn start(resource: &str) -> Self {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let dir = tempfile::tempdir().unwrap();
        let script = format!("{}/tests/issuer/glewlwyd.sh", env!("CARGO_MANIFEST_DIR"));
        let mut child = tokio::process::Command::new("bash")
            .arg(script)
            .arg(dir.path())
            .arg(port.to_string())
            .env("ISSUER_FOREGROUND", "1")
            .env("ISSUER_RESOURCES", resource)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("bash runs tests/issuer/glewlwyd.sh");
        let mut stdout = child.stdout.take().unwrap();
        let mut issuer = String::new();
        with_timeout(async {
            use tokio::io::AsyncReadExt;
            let mut byte = [0u8; 1];
            while stdout.read(&mut byte).await.unwrap() == 1 && byte[0] != b'\n' {
                issuer.push(byte[0] as char);
            }
        })
        .await;
        assert!(
            issuer.starts_with("http://127.0.0.1:"),
            "glewlwyd did not start (scripts/test-setup.sh installs it): {issuer:?}"
        );
        Self {
            issuer,
            child,
            _dir: dir,
        }
    }

    /// A token from its token endpoint for the test client, with `form` beside
    /// `grant_type=client_credentials` (unless `form` names another grant).
    async fn token(&self, form: &[(&str, &str)]) -> String {
        let mut fields: Vec<(&str, &str)> = form.to_vec();
        if !form.iter().any(|(name, _)| *name == "grant_type") {
            fields.push(("grant_type", "client_credentials"));
        }
        let response: Value = with_timeout(
            reqwest::Client::new()
                .post(format!("{}/token", self.issuer))
                .basic_auth("test-client", Some("test-secret"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form_encoded(&fields))
                .send(),
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        response["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token: {response}"))
            .to_string()
    }
}

/// `fields` as `application/x-www-form-urlencoded`.
fn form_encoded(fields: &[(&str, &str)]) -> String {
    let encode = |text: &str| {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    fields
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

impl Drop for Glewlwyd {
    fn drop(&mut self) {
        // SIGTERM, which the script forwards to glewlwyd; kill_on_drop is the fallback. Wait
        // for the script to end first: a SIGKILL right behind the SIGTERM kills it before it
        // forwards the signal, and leaves glewlwyd running.
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            for _ in 0..50 {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}
