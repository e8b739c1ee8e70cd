//! `pods/{name}/attach` over WebSocket, bridged to `docker attach` of the container.
//!
//! The upgrade offers `v5.channel.k8s.io` first, then `v4.channel.k8s.io` (what kube-rs asks
//! for; kubectl 1.32 asks for v5 alone). Every binary frame starts with its channel: 0 stdin,
//! 1 stdout, 2 stderr, 3 error (one `metav1.Status` JSON when the attach ends), 4 resize
//! (`{"Width":..,"Height":..}`); v5 adds 255 close, whose payload `[0]` half-closes stdin,
//! which the double passes on by shutting the write half of the Docker attach (with
//! `stdinOnce`, Docker then closes the container's stdin). Under v4 the client can end stdin
//! only by closing the socket, after which nothing more can reach it. As a kubelet does, the
//! server first writes an empty frame on each channel it will write, and ends with a
//! `Success` Status on channel 3 (attach has no exit code: that is in the pod's status) and a
//! normal close. SPDY (a POST with `Upgrade: SPDY/3.1`) is not served.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use bollard::container::{AttachContainerResults, LogOutput};
use bollard::query_parameters::{AttachContainerOptionsBuilder, ResizeContainerTTYOptionsBuilder};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::api::ApiError;
use super::{Cluster, Key, kubelet, resources};

/// The subprotocols served, preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;
/// How long the server waits for the client's close reply after its own close.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The streams the client asked for.
#[derive(Clone, Copy, Debug)]
struct Streams {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

pub async fn attach(
    State(cluster): State<Arc<Cluster>>,
    Path((namespace, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    match upgrade(cluster, &namespace, &name, &query, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn upgrade(
    cluster: Arc<Cluster>,
    namespace: &str,
    name: &str,
    query: &HashMap<String, String>,
    request: Request,
) -> Result<Response, ApiError> {
    let pods = resources::find("", "v1", "pods").expect("pods served");
    let (mut parts, _) = request.into_parts();
    // WebSocket clients GET; SPDY clients POST (and need `create`).
    let verb = if parts.method == Method::GET {
        "get"
    } else {
        "create"
    };
    if cluster.denies(verb, "pods/attach") {
        return Err(ApiError::forbidden(
            pods,
            name,
            &format!(
                "User \"kube-double\" cannot {verb} resource \"pods/attach\" in API group \"\" in the namespace \"{namespace}\""
            ),
        ));
    }
    let pod = cluster
        .with_store(|store| store.get(&Key::new("pods", namespace, name)).cloned())
        .ok_or_else(|| ApiError::not_found(pods, name))?;
    let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
    if phase == "Succeeded" || phase == "Failed" {
        return Err(ApiError::bad_request(format!(
            "cannot attach a container in a completed pod; current phase is {phase}"
        )));
    }
    let container = kubelet::container_name(&pod, query.get("container").map(String::as_str));
    let declared = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["name"] == container.as_str());
    if !declared {
        return Err(ApiError::bad_request(format!(
            "container {container} is not valid for pod {name}"
        )));
    }
    let running = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["name"] == container.as_str() && s["state"]["running"].is_object());
    let id = kubelet::container_id(&pod, Some(&container)).filter(|_| running);
    let Some(id) = id else {
        return Err(ApiError::bad_request(format!(
            "unable to upgrade connection: container not found (\"{container}\")"
        )));
    };
    let Ok(upgrade) = WebSocketUpgrade::from_request_parts(&mut parts, &cluster).await else {
        return Err(ApiError::bad_request(format!(
            "the kube double serves pods/attach over WebSocket only ({}), not SPDY",
            PROTOCOLS.join(", ")
        )));
    };
    let upgrade = upgrade.protocols(PROTOCOLS);
    let Some(protocol) = upgrade
        .selected_protocol()
        .and_then(|p| p.to_str().ok())
        .map(str::to_string)
    else {
        return Err(ApiError::bad_request(format!(
            "the kube double speaks only the subprotocols {}",
            PROTOCOLS.join(", ")
        )));
    };
    cluster.record_attach(protocol.clone());
    let flag = |key: &str| query.get(key).is_some_and(|v| v == "1" || v == "true");
    let streams = Streams {
        stdin: flag("stdin"),
        stdout: flag("stdout"),
        stderr: flag("stderr"),
        tty: flag("tty"),
    };
    let v5 = protocol == PROTOCOLS[0];
    Ok(upgrade.on_upgrade(move |socket| bridge(cluster, socket, id, streams, v5)))
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(bytes.into())
}

/// Carries stdin from the socket to Docker and stdout/stderr back, until the container's
/// output ends (then Status and close) or the client goes.
async fn bridge(cluster: Arc<Cluster>, socket: WebSocket, id: String, streams: Streams, v5: bool) {
    let (mut sink, mut source) = socket.split();
    let options = AttachContainerOptionsBuilder::default()
        .stdin(streams.stdin)
        .stdout(streams.stdout)
        .stderr(streams.stderr)
        .stream(true)
        .logs(false)
        .build();
    let attached = cluster.docker().attach_container(&id, Some(options)).await;
    let AttachContainerResults {
        mut output,
        mut input,
    } = match attached {
        Ok(attached) => attached,
        Err(error) => {
            let status = ApiError::new(500, "InternalError", format!("attach failed: {error}"));
            let _ = sink
                .send(frame(ERROR, status.status().to_string().as_bytes()))
                .await;
            let _ = sink.close().await;
            return;
        }
    };
    let mut opening = vec![ERROR];
    if streams.stderr && !streams.tty {
        opening.insert(0, STDERR);
    }
    if streams.stdout {
        opening.insert(0, STDOUT);
    }
    for channel in opening {
        if sink.send(frame(channel, &[])).await.is_err() {
            return;
        }
    }
    let docker = cluster.docker().clone();
    let from_client = async {
        while let Some(Ok(message)) = source.next().await {
            let Message::Binary(data) = message else {
                if matches!(message, Message::Close(_)) {
                    break;
                }
                continue;
            };
            match data.first() {
                Some(&STDIN) => {
                    let written = match input.write_all(&data[1..]).await {
                        Ok(()) => input.flush().await,
                        Err(error) => Err(error),
                    };
                    if written.is_err() {
                        break;
                    }
                }
                Some(&RESIZE) => {
                    let size: Value = serde_json::from_slice(&data[1..]).unwrap_or_default();
                    let options = ResizeContainerTTYOptionsBuilder::default()
                        .w(size["Width"].as_i64().unwrap_or(80) as i32)
                        .h(size["Height"].as_i64().unwrap_or(24) as i32)
                        .build();
                    let _ = docker.resize_container_tty(&id, options).await;
                }
                Some(&CLOSE) if v5 && data.get(1) == Some(&STDIN) => {
                    let _ = input.shutdown().await;
                }
                _ => {}
            }
        }
    };
    let to_client = async {
        while let Some(Ok(chunk)) = output.next().await {
            let message = match chunk {
                LogOutput::StdErr { message } => frame(STDERR, &message),
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    frame(STDOUT, &message)
                }
                LogOutput::StdIn { .. } => continue,
            };
            if sink.send(message).await.is_err() {
                return false;
            }
        }
        true
    };
    // When the client goes first, nothing more can reach it.
    let output_ended = tokio::select! {
        () = from_client => false,
        ended = to_client => ended,
    };
    if output_ended {
        let status = json!({"metadata": {}, "status": "Success"});
        let _ = sink.send(frame(ERROR, status.to_string().as_bytes())).await;
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            })))
            .await;
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            while let Some(Ok(message)) = source.next().await {
                if matches!(message, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }
}
