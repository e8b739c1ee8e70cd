//! Watch streams (`GET ...?watch=1`): one chunked response of newline-delimited JSON events
//! (`{"type":"ADDED","object":{...}}`), starting either from the objects as they are now
//! (synthetic `ADDED` events, when no `resourceVersion` or `0` is given) or from the events
//! after the given `resourceVersion` (an `ERROR` event with a 410 `Expired` Status when the
//! history no longer reaches back so far), then live, until `timeoutSeconds` or shutdown, or
//! until a test cuts it ([`super::Cut`]: a reset connection, an `ERROR` 500 event, a clean end).
//! Also the label and field selectors that lists and watches share.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::resources::Resource;
use super::{Cluster, Cut, Event};

/// How long a watch lasts when the client gives no `timeoutSeconds`.
const DEFAULT_WATCH: Duration = Duration::from_secs(1800);

/// What a watch passes on.
#[derive(Clone)]
struct Filter {
    resource: &'static str,
    namespace: Option<String>,
    labels: Option<String>,
    fields: Option<String>,
}

impl Filter {
    fn passes(&self, event: &Event) -> bool {
        event.key.resource == self.resource
            && self
                .namespace
                .as_ref()
                .is_none_or(|n| &event.key.namespace == n)
            && selected(&event.object, self.labels.as_ref(), self.fields.as_ref())
    }
}

fn encode(kind: &str, object: &Value) -> Result<Bytes, std::io::Error> {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Ok(Bytes::from(line))
}

/// Serves one watch of `resource` in `namespace` (all namespaces when `None`).
pub fn serve(
    cluster: &Arc<Cluster>,
    resource: &'static Resource,
    namespace: Option<&str>,
    query: &HashMap<String, String>,
) -> Response {
    let filter = Filter {
        resource: resource.plural,
        namespace: namespace.map(str::to_string),
        labels: query.get("labelSelector").cloned(),
        fields: query.get("fieldSelector").cloned(),
    };
    let from = query
        .get("resourceVersion")
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|v| *v > 0);
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_WATCH);
    let initial_events_end =
        query.get("sendInitialEvents").is_some_and(|v| v == "true") && from.is_none();
    // One lock: the initial events and the subscription meet at one revision exactly.
    let (initial, receiver, revision) = cluster.with_store(|store| {
        let initial: Result<Vec<(&'static str, Value)>, u64> = match from {
            Some(from) => match store.since(from) {
                Some(events) => Ok(events
                    .into_iter()
                    .filter(|e| filter.passes(e))
                    .map(|e| (e.kind, e.object))
                    .collect()),
                None => Err(from),
            },
            None => Ok(store
                .list(filter.resource, filter.namespace.as_deref())
                .into_iter()
                .map(|(_, object)| object)
                .filter(|o| selected(o, filter.labels.as_ref(), filter.fields.as_ref()))
                .map(|object| ("ADDED", object))
                .collect()),
        };
        (initial, store.subscribe(), store.revision())
    });
    let mut first: Vec<Result<Bytes, std::io::Error>> = match initial {
        Ok(events) => events
            .iter()
            .map(|(kind, object)| encode(kind, object))
            .collect(),
        Err(from) => {
            let status = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {from} ({revision})"),
                "reason": "Expired", "code": 410,
            });
            let body = Body::from(encode("ERROR", &status).unwrap_or_default());
            return (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response();
        }
    };
    if initial_events_end {
        let bookmark = json!({
            "kind": resource.kind, "apiVersion": resource.api_version(),
            "metadata": {"resourceVersion": revision.to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"}},
        });
        first.push(encode("BOOKMARK", &bookmark));
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let stop = cluster.stop.clone();
    let cuts = cluster.cuts();
    let live = futures_util::stream::unfold(
        (receiver, filter, stop, cuts, false),
        move |(mut receiver, filter, stop, mut cuts, done)| async move {
            if done {
                return None;
            }
            loop {
                let event = tokio::select! {
                    event = receiver.recv() => event,
                    () = tokio::time::sleep_until(deadline) => return None,
                    () = stop.cancelled() => return None,
                    cut = cuts.recv() => {
                        let item = match cut {
                            Ok(Cut::Reset) => Err(std::io::Error::new(
                                std::io::ErrorKind::ConnectionReset,
                                "the kube double cut this watch",
                            )),
                            Ok(Cut::Error500) => encode("ERROR", &json!({
                                "kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "reason": "InternalError", "code": 500,
                                "message": "an error on the server (\"etcdserver: leader changed\") has prevented the request from succeeding",
                            })),
                            Ok(Cut::Clean) | Err(_) => return None,
                        };
                        return Some((item, (receiver, filter, stop, cuts, true)));
                    }
                };
                match event {
                    Ok(event) if filter.passes(&event) => {
                        let line = encode(event.kind, &event.object);
                        return Some((line, (receiver, filter, stop, cuts, false)));
                    }
                    Ok(_) => continue,
                    // A watcher that fell behind is ended; its client lists and watches again.
                    Err(RecvError::Lagged(_) | RecvError::Closed) => return None,
                }
            }
        },
    );
    let stream = futures_util::stream::iter(first).chain(live);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// Whether `object` matches a label selector and a field selector (each absent = everything).
pub fn selected(object: &Value, labels: Option<&String>, fields: Option<&String>) -> bool {
    labels.is_none_or(|s| labels_match(&object["metadata"]["labels"], s))
        && fields.is_none_or(|s| fields_match(object, s))
}

/// Splits a selector at the commas outside parentheses.
fn requirements(selector: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(selector[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(selector[start..].trim());
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Equality (`a=b`, `a==b`, `a!=b`) and set (`a in (x,y)`, `a notin (x)`, `a`, `!a`) labels.
fn labels_match(labels: &Value, selector: &str) -> bool {
    let label = |key: &str| labels.get(key.trim()).and_then(Value::as_str);
    requirements(selector).into_iter().all(|requirement| {
        if let Some((key, value)) = requirement.split_once("!=") {
            return label(key) != Some(value.trim());
        }
        if let Some((key, value)) = requirement
            .split_once("==")
            .or_else(|| requirement.split_once('='))
        {
            return label(key) == Some(value.trim());
        }
        for (operator, wanted) in [(" notin ", false), (" in ", true)] {
            if let Some((key, set)) = requirement.split_once(operator) {
                let set: Vec<&str> = set
                    .trim()
                    .trim_start_matches('(')
                    .trim_end_matches(')')
                    .split(',')
                    .map(str::trim)
                    .collect();
                let inside = label(key).is_some_and(|v| set.contains(&v));
                return inside == wanted;
            }
        }
        match requirement.strip_prefix('!') {
            Some(key) => label(key).is_none(),
            None => label(requirement).is_some(),
        }
    })
}

/// Field selectors (`metadata.name=x`, `status.phase!=Running`): any dotted path of the
/// object, compared as a string (absent = empty).
fn fields_match(object: &Value, selector: &str) -> bool {
    let field = |path: &str| {
        let value = path
            .trim()
            .split('.')
            .fold(object, |value, part| &value[part]);
        match value {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        }
    };
    requirements(selector).into_iter().all(|requirement| {
        if let Some((path, value)) = requirement.split_once("!=") {
            return field(path) != value.trim();
        }
        match requirement
            .split_once("==")
            .or_else(|| requirement.split_once('='))
        {
            Some((path, value)) => field(path) == value.trim(),
            None => false,
        }
    })
}
