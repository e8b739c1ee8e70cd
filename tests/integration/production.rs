//! `docs/PRODUCTION.md` works as written. Each half's `sh` blocks run in the page's order in
//! one shell, in a scratch copy of what the page's commands read (`compose.yaml`, `deploy/`),
//! except the blocks the page marks `<!-- production test: skipped, <why> -->` (installing on
//! the host, a registry, certificate files, a real cluster, the operations after the set-up);
//! the tests check that exactly those are skipped.
//!
//! - Kubernetes: the real kubectl 1.32 against the API double (`fakes::kubernetes`, which
//!   stores what `apply` sends and runs no Deployment); step 1's variables get stand-in values,
//!   `target/release/file-agent` is the tests' binary, and `kubectl apply` gets
//!   `--validate=false` (the double serves no OpenAPI documents). What the cluster then holds
//!   is read back, and the Deployment's environment, its Secret's values filled in, is parsed
//!   as the server parses it.
//! - Compose: stand-ins for `docker` (its `compose run ... audit keygen` runs the tests'
//!   binary; every call is recorded), `sudo`, `curl` and the SDK client; then the real
//!   `docker compose config` (or `docker-compose`) of the project the page made, whose
//!   environment for the server is parsed as the server parses it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use serde_json::Value;

use crate::common::with_timeout;
use crate::deploy::{compose, copy_tree};
use crate::fakes::kubernetes::{KubeDouble, TOKEN};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BINARY: &str = env!("CARGO_BIN_EXE_file-agent");
const SKIP_MARK: &str = "<!-- production test: skipped";
/// The names the page's examples use.
const HOST: &str = "files.example.com";

/// One fenced `sh` block of the page, its list indentation removed.
#[derive(Debug)]
struct Block {
    code: String,
    skipped: bool,
}

/// The `sh` blocks of the page's section `## {heading}`, in order.
fn blocks(heading: &str) -> Vec<Block> {
    let page = std::fs::read_to_string(Path::new(ROOT).join("docs/PRODUCTION.md")).unwrap();
    let start = page
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("PRODUCTION.md has no section {heading:?}"));
    let section = &page[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut blocks = Vec::new();
    let mut marked = false;
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with(SKIP_MARK) {
            marked = true;
        } else if trimmed == "```sh" {
            let indent = line.len() - trimmed.len();
            let mut code = String::new();
            for line in lines.by_ref() {
                if line.trim_start() == "```" {
                    break;
                }
                code.push_str(line.get(indent..).unwrap_or(line.trim_start()));
                code.push('\n');
            }
            blocks.push(Block {
                code,
                skipped: marked,
            });
            marked = false;
        } else if !trimmed.is_empty() {
            marked = false;
        }
    }
    blocks
}

/// The blocks to run, joined, after checking that the skipped ones are the `expected_skipped`
/// (each named by a command it holds) and that `expected_run` blocks are left.
fn script(heading: &str, expected_skipped: &[&str], expected_run: usize) -> String {
    let blocks = blocks(heading);
    let skipped: Vec<&Block> = blocks.iter().filter(|b| b.skipped).collect();
    assert_eq!(
        skipped.len(),
        expected_skipped.len(),
        "{heading}: skipped blocks {skipped:#?}"
    );
    for (block, command) in skipped.iter().zip(expected_skipped) {
        assert!(
            block.code.contains(command),
            "{heading}: a skipped block without {command:?}: {block:#?}"
        );
    }
    let run: Vec<&str> = blocks
        .iter()
        .filter(|b| !b.skipped)
        .map(|b| b.code.as_str())
        .collect();
    assert_eq!(run.len(), expected_run, "{heading}: blocks to run {run:#?}");
    run.join("\n")
}

/// `bash` running `prelude` then `script` in `dir`, failing on any error or unset variable;
/// its stdout.
fn run_shell(dir: &Path, prelude: &str, script: &str, env: &[(&str, &str)]) -> String {
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(format!(
            "set -euo pipefail\n{prelude}\n{script}\necho PAGE-DONE\n"
        ))
        .current_dir(dir)
        .env_remove("OPENAI_API_KEY");
    for (name, _) in std::env::vars() {
        if name.starts_with("FILE_AGENT_") || name.starts_with("SANDBOX_") {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().copied());
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && stdout.ends_with("PAGE-DONE\n"),
        "the page's steps failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The server's configuration from these variables, as `serve` reads it.
fn server_config(vars: &HashMap<String, String>) -> file_agent::config::Config {
    file_agent::config::Config::from_lookup(|name| vars.get(name).cloned())
        .unwrap_or_else(|e| panic!("the page's settings do not parse: {e}"))
}

/// What the page promises of the server's settings, whichever half made them.
fn assert_production_settings(config: &file_agent::config::Config, access_token: &str) {
    let tokens: Vec<&str> = config
        .server
        .access_tokens
        .iter()
        .map(|t| t.expose())
        .collect();
    assert_eq!(tokens, [access_token]);
    assert_eq!(access_token.len(), 64, "openssl rand -hex 32");
    assert!(
        config.server.metrics_token.is_some(),
        "/metrics behind a token"
    );
    assert!(
        config.identity.openwebui_jwt.is_some(),
        "Open WebUI's signed user token"
    );
    assert!(!config.server.listen.ip().is_loopback());
    assert_eq!(
        config.unreachable_links(),
        None,
        "links users' browsers open"
    );
    let hosts = config.server.allowed_hosts.clone().unwrap_or_default();
    assert!(hosts.iter().any(|h| h == HOST), "{hosts:?}");
    assert!(config.audit.signing_key_file.is_some());
}

/// The signing key at `key` (a copy of what the server's container sees at `seen_at`) is
/// one the server takes: outside a data folder, closed to other users, a key.
fn assert_key_is_taken(config: &file_agent::config::Config, key: &Path) {
    let mut audit = config.audit.clone();
    audit.signing_key_file = Some(key.to_path_buf());
    let data = tempfile::tempdir().unwrap();
    let taken = file_agent::audit::checkpoints::settings(&audit, data.path(), None)
        .unwrap_or_else(|e| panic!("the server refuses the page's key: {e}"));
    assert!(taken.is_some());
}

/// The variables the server image sets (`ENV` of the Dockerfile's runtime stage).
fn image_env() -> HashMap<String, String> {
    let dockerfile = std::fs::read_to_string(Path::new(ROOT).join("Dockerfile")).unwrap();
    let line = dockerfile
        .lines()
        .rfind(|line| line.starts_with("ENV "))
        .expect("the Dockerfile sets ENV");
    line["ENV ".len()..]
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn dotenv(path: &Path) -> HashMap<String, String> {
    dotenvy::from_path_iter(path)
        .unwrap()
        .map(|item| item.unwrap())
        .collect()
}

/// The page's Kubernetes half against the API double, with the real kubectl.
#[tokio::test]
async fn the_kubernetes_half_applies_in_order_against_the_double() {
    let script = script(
        "Kubernetes",
        &["docker push", "create secret tls", "file-agent doctor"],
        5,
    );
    let double = with_timeout(KubeDouble::start()).await;
    let work = tempfile::tempdir().unwrap();
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let kubeconfig = home.join("kubeconfig");
    double.write_kubeconfig(&kubeconfig, "default");
    let checkout = work.path().join("checkout");
    copy_tree(&Path::new(ROOT).join("deploy"), &checkout.join("deploy"));
    std::fs::create_dir_all(checkout.join("target/release")).unwrap();
    std::os::unix::fs::symlink(BINARY, checkout.join("target/release/file-agent")).unwrap();
    // What step 1 sets on the build host, a registry's names standing in.
    let digest = "sha256:".to_string() + &"5".repeat(64);
    let sandbox_image = format!("registry.example.com/file-agent-sandbox@{digest}");
    let prelude = format!(
        "registry=registry.example.com\nversion=0.1.0\nsandbox_image={sandbox_image}\n\
         kubectl() {{ case \"$1\" in apply|create) sub=$1; shift; command kubectl \"$sub\" --validate=false --cache-dir=\"$HOME/cache\" \"$@\";; \
         *) command kubectl --cache-dir=\"$HOME/cache\" \"$@\";; esac; }}"
    );
    let kubeconfig_text = kubeconfig.display().to_string();
    let home_text = home.display().to_string();
    let output = tokio::task::spawn_blocking({
        let checkout = checkout.clone();
        move || {
            run_shell(
                &checkout,
                &prelude,
                &script,
                &[
                    ("KUBECONFIG", &kubeconfig_text),
                    ("HOME", &home_text),
                    ("OPENAI_API_KEY", "sk-from-the-operator"),
                ],
            )
        }
    });
    let output = with_timeout(output).await.unwrap();
    assert!(
        output.contains("deployment.apps/file-agent created"),
        "{output}"
    );

    // kustomize's `envs` file: `key=value` lines (keys with `-`, which dotenv does not take).
    let secrets: HashMap<String, String> =
        std::fs::read_to_string(checkout.join("production/secrets.env"))
            .unwrap()
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
    let access_token = secrets["access-tokens"].clone();
    assert_eq!(secrets["openai-api-key"], "sk-from-the-operator");
    let client = reqwest::Client::new();
    let get = |path: String| {
        let request = client
            .get(format!("{}{path}", double.url()))
            .bearer_auth(TOKEN);
        async move {
            let response = with_timeout(request.send()).await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                with_timeout(response.json::<Value>()).await.unwrap(),
            )
        }
    };
    for namespace in ["file-agent", "file-agent-sandbox"] {
        let (status, _) = get(format!("/api/v1/namespaces/{namespace}")).await;
        assert_eq!(status, 200, "namespace {namespace}");
    }
    let (_, secrets_list) = get("/api/v1/namespaces/file-agent/secrets".into()).await;
    // kustomize's generators name each Secret `<name>-<hash of its content>`.
    let secret = |is: &dyn Fn(&str) -> bool| -> Value {
        secrets_list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| is(s["metadata"]["name"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("no such Secret: {secrets_list}"))
            .clone()
    };
    // kustomize wraps a Secret's base64 at 70 characters, and the API server (Go's decoder)
    // skips the line breaks: so does this.
    let decode = |value: &Value| -> Vec<u8> {
        let text: String = value.as_str().unwrap().split_whitespace().collect();
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap()
    };
    let settings_secret = secret(&|name| {
        name.starts_with("file-agent-") && !name.starts_with("file-agent-audit-key-")
    });
    let key_secret = secret(&|name| name.starts_with("file-agent-audit-key-"));
    let settings_name = settings_secret["metadata"]["name"].as_str().unwrap();
    let key_name = key_secret["metadata"]["name"].as_str().unwrap();
    assert_ne!(settings_name, key_name);
    assert_eq!(
        decode(&settings_secret["data"]["access-tokens"]),
        access_token.as_bytes()
    );

    let (status, deployment) =
        get("/apis/apps/v1/namespaces/file-agent/deployments/file-agent".into()).await;
    assert_eq!(status, 200);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "registry.example.com/file-agent:0.1.0");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "audit-key")
        .expect("the key's volume");
    assert_eq!(volume["secret"]["secretName"], key_name);
    assert_eq!(volume["secret"]["defaultMode"], 0o400);
    // The server image's own environment (the Dockerfile's `ENV`), then the Deployment's.
    let mut env = image_env();
    for variable in container["env"].as_array().unwrap() {
        let name = variable["name"].as_str().unwrap().to_string();
        if let Some(value) = variable["value"].as_str() {
            env.insert(name, value.to_string());
        } else if let Some(reference) = variable["valueFrom"]["secretKeyRef"].as_object() {
            assert_eq!(reference["name"], settings_name, "{name}");
            let data = &settings_secret["data"][reference["key"].as_str().unwrap()];
            if !data.is_null() {
                env.insert(name, String::from_utf8(decode(data)).unwrap());
            }
        }
    }
    let config = server_config(&env);
    assert_production_settings(&config, &access_token);
    assert_eq!(config.sandbox.runtime.as_deref(), Some("gvisor"));
    assert_eq!(config.sandbox.image, sandbox_image);
    assert_eq!(config.server.public_url, format!("https://{HOST}"));
    assert!(config.llm.api_key.is_some());
    // The key as the pod's volume holds it: the Secret's bytes, mode 0400.
    let mount = work.path().join("mounted");
    std::fs::create_dir(&mount).unwrap();
    let key = mount.join("audit.key");
    std::fs::write(&key, decode(&key_secret["data"]["audit.key"])).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o400)).unwrap();
    assert_eq!(
        config.audit.signing_key_file.as_deref(),
        Some(Path::new("/var/run/file-agent/audit.key"))
    );
    assert_key_is_taken(&config, &key);

    let (status, ingress) =
        get("/apis/networking.k8s.io/v1/namespaces/file-agent/ingresses/file-agent".into()).await;
    assert_eq!(status, 200);
    assert_eq!(ingress["spec"]["rules"][0]["host"], HOST);
    assert_eq!(ingress["spec"]["tls"][0]["hosts"][0], HOST);
    let verifier =
        std::fs::read_to_string(checkout.join("production/audit-verifier-key.txt")).unwrap();
    assert!(
        verifier.starts_with(&format!("{HOST}/audit+")),
        "{verifier}"
    );
    with_timeout(double.shutdown()).await;
}

/// The stand-ins of the compose half: every call is recorded in `$FILE_AGENT_TEST_LOG`.
const COMPOSE_STAND_INS: &str = r#"
record() { printf '%s\n' "$*" >> "$FILE_AGENT_TEST_LOG"; }
docker() {
  record "docker $*"
  case " $* " in
    *" audit keygen "*)
      name='' out=''
      while [ $# -gt 0 ]; do
        case "$1" in --name) name=$2; shift;; --out) out=$2; shift;; esac
        shift
      done
      "$FILE_AGENT_TEST_BINARY" audit keygen --name "$name" --out "secrets/${out#/secrets/}";;
  esac
}
sudo() { record "sudo $*"; "$@"; }
curl() { record "curl $*"; }
"#;

/// The page's compose half: the files it makes, the server's settings they give, and compose's
/// own reading of the project.
#[test]
fn the_compose_half_makes_a_project_compose_and_the_server_accept() {
    let script = script(
        "Docker Compose",
        &["runsc install", "--entrypoint tar", "git checkout"],
        6,
    );
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join("file-agent");
    copy_tree(&Path::new(ROOT).join("deploy"), &project.join("deploy"));
    std::fs::copy(
        Path::new(ROOT).join("compose.yaml"),
        project.join("compose.yaml"),
    )
    .unwrap();
    // The build contexts must exist for compose to accept the file.
    std::fs::write(project.join("Dockerfile"), "FROM scratch\n").unwrap();
    std::fs::create_dir(project.join("sandbox-image")).unwrap();
    // The SDK client and its venv, recorded.
    let log = work.path().join("calls.log");
    std::fs::create_dir_all(project.join("scripts")).unwrap();
    std::fs::create_dir_all(project.join("target/test-python/bin")).unwrap();
    for stub in ["scripts/test-python.sh", "target/test-python/bin/python3"] {
        let path = project.join(stub);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho \"{stub} $*\" >> \"$FILE_AGENT_TEST_LOG\"\n"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let log_text = log.display().to_string();
    run_shell(
        &project,
        COMPOSE_STAND_INS,
        &script,
        &[
            ("FILE_AGENT_TEST_LOG", &log_text),
            ("FILE_AGENT_TEST_BINARY", BINARY),
        ],
    );

    // The commands the stand-ins saw, in the page's order.
    let calls = std::fs::read_to_string(&log).unwrap();
    let mut position = 0;
    for expected in [
        "docker compose build",
        "sudo install -d -m 700 -o 10002 -g 10002 secrets",
        "audit keygen --name files.example.com/audit --out /secrets/audit.key",
        "docker compose up -d",
        "docker compose exec file-agent file-agent doctor",
        "tests/sdk/python_client.py http://files.example.com:8000/mcp --token",
        "curl -s -H Authorization: Bearer",
    ] {
        let found = calls[position..]
            .find(expected)
            .unwrap_or_else(|| panic!("{expected:?} not after what came before in:\n{calls}"));
        position += found + expected.len();
    }
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(project.join(".env"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, ".env is the operator's only");
    let verifier = std::fs::read_to_string(project.join("audit-verifier-key.txt")).unwrap();
    assert!(
        verifier.starts_with(&format!("{HOST}/audit+")),
        "{verifier}"
    );

    // compose's reading of the project, the override included.
    let mut command = compose();
    command.arg("config").current_dir(&project);
    for (name, _) in std::env::vars() {
        if name.starts_with("FILE_AGENT_") || name.starts_with("SANDBOX_") {
            command.env_remove(name);
        }
    }
    let output = command.output().expect("docker compose or docker-compose");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "compose config: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let config: Value =
        serde_saphyr::from_str(&stdout).unwrap_or_else(|e| panic!("{e}:\n{stdout}"));
    let server = &config["services"]["file-agent"];
    let ports = server["ports"].to_string();
    assert!(
        ports.contains("0.0.0.0") && ports.contains("8000"),
        "published on every address: {ports}"
    );
    let mounted = server["secrets"].to_string();
    assert!(mounted.contains("audit-key"), "{mounted}");
    let key_file = config["secrets"]["audit-key"]["file"].as_str().unwrap();
    let key = PathBuf::from(key_file);
    assert_eq!(key, project.join("secrets/audit.key"));
    let env: HashMap<String, String> = server["environment"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, value)| {
            let value = match value {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (name.clone(), value)
        })
        .collect();
    let access_token = dotenv(&project.join(".env"))["FILE_AGENT_ACCESS_TOKENS"].clone();
    let server_config = server_config(&env);
    assert_production_settings(&server_config, &access_token);
    assert_eq!(server_config.sandbox.runtime.as_deref(), Some("runsc"));
    assert_eq!(
        server_config.server.public_url,
        format!("http://{HOST}:8000")
    );
    assert_eq!(
        server_config.audit.signing_key_file.as_deref(),
        Some(Path::new("/run/secrets/audit-key"))
    );
    assert_key_is_taken(&server_config, &key);
}
