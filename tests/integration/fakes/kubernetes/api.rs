//! The HTTP API: authentication, routing by path the way the API server lays it out
//! (`/api/v1/namespaces/{ns}/pods/{name}`, `/apis/{group}/{version}/...`), discovery, RBAC
//! denials, create/get/list/delete/deletecollection, `Table` answers for kubectl, and
//! `metav1.Status` errors. Watches go to [`super::watch`], attach to [`super::attach`], what
//! happens to a pod before it is stored to [`super::admission`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Value, json};

use super::resources::{self, Resource};
use super::{
    Cluster, Key, NODE_NAME, TOKEN, admission, attach, kubelet, now, random_suffix, watch,
};

/// An API error, answered as a `metav1.Status`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, resource: &Resource, name: &str) -> ApiError {
        let mut details = json!({"name": name, "kind": resource.plural});
        if !resource.group.is_empty() {
            details["group"] = json!(resource.group);
        }
        self.details = Some(details);
        self
    }

    /// 404 `pods "x" not found`.
    pub fn not_found(resource: &Resource, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", resource.qualified()),
        )
        .with_details(resource, name)
    }

    /// 409 `pods "x" already exists`.
    pub fn already_exists(resource: &Resource, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", resource.qualified()),
        )
        .with_details(resource, name)
    }

    /// 403 `pods "x" is forbidden: why`.
    pub fn forbidden(resource: &Resource, name: &str, why: &str) -> ApiError {
        let message = if name.is_empty() {
            format!("{} is forbidden: {why}", resource.qualified())
        } else {
            format!("{} \"{name}\" is forbidden: {why}", resource.qualified())
        };
        ApiError::new(403, "Forbidden", message).with_details(resource, name)
    }

    /// 422 `Pod "x" is invalid: field: why`.
    pub fn invalid(resource: &Resource, name: &str, field: &str, why: &str) -> ApiError {
        let mut error = ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {field}: {why}", resource.kind),
        )
        .with_details(resource, name);
        if let Some(details) = error.details.as_mut() {
            details["kind"] = json!(resource.kind);
            details["causes"] =
                json!([{"reason": "FieldValueInvalid", "message": why, "field": field}]);
        }
        error
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// The `metav1.Status` body.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.status())
    }
}

/// A JSON body with the content type the API server sends.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The whole API: attach has its own route (a WebSocket upgrade), everything else is routed by
/// [`dispatch`]; every request is authenticated and recorded first.
pub fn router(cluster: Arc<Cluster>) -> Router {
    Router::new()
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/attach",
            any(attach::attach),
        )
        .fallback(dispatch)
        .layer(axum::middleware::from_fn_with_state(
            cluster.clone(),
            authenticate,
        ))
        .with_state(cluster)
}

/// Records the request and refuses any bearer token but [`TOKEN`] (401, as the API server
/// answers an unknown token). A request without a token is let in: kubectl 1.32 sends no
/// bearer token over plain HTTP (measured), and the double has no TLS.
async fn authenticate(
    State(cluster): State<Arc<Cluster>>,
    request: Request,
    next: Next,
) -> Response {
    cluster.record_request(format!("{} {}", request.method(), request.uri()));
    if cluster.refuses() {
        return ApiError::new(
            503,
            "ServiceUnavailable",
            "the kube double is refusing requests (a test's API outage)",
        )
        .into_response();
    }
    let authorized = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v == format!("Bearer {TOKEN}"));
    if !authorized {
        return ApiError::new(401, "Unauthorized", "Unauthorized").into_response();
    }
    next.run(request).await
}

/// A parsed resource path.
struct Target {
    resource: &'static Resource,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

async fn dispatch(
    State(cluster): State<Arc<Cluster>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query: HashMap<String, String> = Query::try_from_uri(&uri)
        .map(|Query(q)| q)
        .unwrap_or_default();
    let segments: Vec<&str> = uri
        .path()
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let discovery = match segments.as_slice() {
        ["version"] => Some(resources::version()),
        ["api"] => Some(resources::api_versions(&cluster.address)),
        ["apis"] => Some(resources::api_group_list()),
        ["apis", group] => resources::api_group(group),
        ["api", "v1"] => resources::api_resource_list("", "v1"),
        ["apis", group, version] => resources::api_resource_list(group, version),
        _ => None,
    };
    if let Some(document) = discovery {
        return json_response(StatusCode::OK, &document);
    }
    let target = match segments.as_slice() {
        ["api", "v1", rest @ ..] => parse_target("", "v1", rest),
        ["apis", group, version, rest @ ..] => parse_target(group, version, rest),
        _ => None,
    };
    let Some(target) = target else {
        return ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .into_response();
    };
    match serve(&cluster, &method, &target, &query, &headers, &body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

fn parse_target(group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let (namespace, rest) = match rest {
        ["namespaces", namespace, plural, tail @ ..] if *plural != "status" => {
            (Some(namespace.to_string()), [&[*plural][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    let resource = resources::find(group, version, rest.first()?)?;
    if namespace.is_some() && !resource.namespaced || rest.len() > 3 {
        return None;
    }
    Some(Target {
        resource,
        namespace,
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
    })
}

fn truthy(query: &HashMap<String, String>, key: &str) -> bool {
    query.get(key).is_some_and(|v| v == "1" || v == "true")
}

async fn serve(
    cluster: &Arc<Cluster>,
    method: &Method,
    target: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let resource = target.resource;
    let namespace = target.namespace.as_deref();
    let verb = match (method, &target.name) {
        (&Method::GET, Some(_)) => "get",
        (&Method::GET, None) if truthy(query, "watch") => "watch",
        (&Method::GET, None) => "list",
        (&Method::POST, None) => "create",
        (&Method::DELETE, Some(_)) => "delete",
        (&Method::DELETE, None) => "deletecollection",
        _ => {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!(
                    "the double does not serve {method} on {}",
                    resource.qualified()
                ),
            ));
        }
    };
    let mut rbac_resource = resource.plural.to_string();
    if let Some(sub) = &target.subresource {
        rbac_resource = format!("{rbac_resource}/{sub}");
    }
    if cluster.denies(verb, &rbac_resource) {
        let scope = namespace
            .map(|n| format!(" in the namespace \"{n}\""))
            .unwrap_or_default();
        return Err(ApiError::forbidden(
            resource,
            target.name.as_deref().unwrap_or(""),
            &format!(
                "User \"kube-double\" cannot {verb} resource \"{rbac_resource}\" in API group \"{}\"{scope}",
                resource.group
            ),
        ));
    }
    if resource.namespaced
        && namespace.is_none()
        && (target.name.is_some() || verb == "create" || verb == "deletecollection")
    {
        return Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    }
    let wants_table = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("as=Table"));
    match verb {
        "get" => {
            let name = target.name.as_deref().unwrap_or_default();
            let key = Key::new(resource.plural, namespace.unwrap_or(""), name);
            let object = cluster
                .with_store(|store| store.get(&key).cloned())
                .ok_or_else(|| ApiError::not_found(resource, name))?;
            match target.subresource.as_deref() {
                None if wants_table => {
                    let revision = cluster.with_store(|store| store.revision());
                    Ok(json_response(
                        StatusCode::OK,
                        &table(resource, &[object], revision),
                    ))
                }
                None => Ok(json_response(StatusCode::OK, &object)),
                Some("log") if resource.plural == "pods" => {
                    let text = kubelet::logs(cluster, &object, query.get("container")).await?;
                    Ok(
                        (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], text)
                            .into_response(),
                    )
                }
                Some(_) => Err(ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )),
            }
        }
        "watch" => Ok(watch::serve(cluster, resource, namespace, query)),
        "list" => {
            let (items, revision) = cluster.with_store(|store| {
                let items: Vec<Value> = store
                    .list(resource.plural, namespace)
                    .into_iter()
                    .map(|(_, object)| object)
                    .filter(|object| {
                        watch::selected(
                            object,
                            query.get("labelSelector"),
                            query.get("fieldSelector"),
                        )
                    })
                    .collect();
                (items, store.revision())
            });
            if wants_table {
                return Ok(json_response(
                    StatusCode::OK,
                    &table(resource, &items, revision),
                ));
            }
            Ok(json_response(
                StatusCode::OK,
                &list_document(resource, items, revision),
            ))
        }
        "create" => {
            let object: Value = serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("the body is not a JSON object: {e}"))
            })?;
            let object = create(cluster, resource, namespace, object)?;
            Ok(json_response(StatusCode::CREATED, &object))
        }
        "delete" => {
            let name = target.name.as_deref().unwrap_or_default();
            let grace = grace_period(query, body);
            let object = match resource.plural {
                "pods" => delete_pod(cluster, namespace.unwrap_or(""), name, grace)?,
                "namespaces" => delete_namespace(cluster, name)?,
                _ => cluster
                    .with_store(|store| {
                        store.remove(
                            &Key::new(resource.plural, namespace.unwrap_or(""), name),
                            None,
                        )
                    })
                    .ok_or_else(|| ApiError::not_found(resource, name))?,
            };
            Ok(json_response(StatusCode::OK, &object))
        }
        _ => {
            // deletecollection
            let grace = grace_period(query, body);
            let keys: Vec<Key> = cluster.with_store(|store| {
                store
                    .list(resource.plural, namespace)
                    .into_iter()
                    .filter(|(_, object)| {
                        watch::selected(
                            object,
                            query.get("labelSelector"),
                            query.get("fieldSelector"),
                        )
                    })
                    .map(|(key, _)| key)
                    .collect()
            });
            let mut deleted = Vec::new();
            for key in keys {
                let object = if resource.plural == "pods" {
                    delete_pod(cluster, &key.namespace, &key.name, grace).ok()
                } else {
                    cluster.with_store(|store| store.remove(&key, None))
                };
                deleted.extend(object);
            }
            let revision = cluster.with_store(|store| store.revision());
            Ok(json_response(
                StatusCode::OK,
                &list_document(resource, deleted, revision),
            ))
        }
    }
}

/// `gracePeriodSeconds` from the query or from a `DeleteOptions` body.
fn grace_period(query: &HashMap<String, String>, body: &Bytes) -> Option<u64> {
    if let Some(grace) = query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()) {
        return Some(grace);
    }
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("gracePeriodSeconds")?
        .as_u64()
}

/// A `PodList` (or other list) as the API server sends it: items without kind and apiVersion.
fn list_document(resource: &Resource, items: Vec<Value>, revision: u64) -> Value {
    let items: Vec<Value> = items
        .into_iter()
        .map(|mut item| {
            if let Some(object) = item.as_object_mut() {
                object.remove("kind");
                object.remove("apiVersion");
            }
            item
        })
        .collect();
    json!({
        "kind": format!("{}List", resource.kind),
        "apiVersion": resource.api_version(),
        "metadata": {"resourceVersion": revision.to_string()},
        "items": items,
    })
}

/// Stores a new object of `resource` (from a request or a test), with the API server's
/// metadata, defaults and admission; starts a kubelet for a pod bound to this node.
pub fn create(
    cluster: &Arc<Cluster>,
    resource: &'static Resource,
    namespace: Option<&str>,
    mut object: Value,
) -> Result<Value, ApiError> {
    if !object.is_object() {
        return Err(ApiError::bad_request("the body is not a JSON object"));
    }
    let kind = object["kind"].as_str().unwrap_or(resource.kind);
    let api_version = object["apiVersion"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| resource.api_version());
    if kind != resource.kind || api_version != resource.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            resource.api_version()
        )));
    }
    object["kind"] = json!(resource.kind);
    object["apiVersion"] = json!(resource.api_version());
    if resource.plural == "selfsubjectaccessreviews" {
        return Ok(review(cluster, object));
    }
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let namespace = if resource.namespaced {
        let from_body = object["metadata"]["namespace"].as_str().map(str::to_string);
        let namespace = namespace
            .map(str::to_string)
            .or(from_body.clone())
            .unwrap_or_else(|| "default".to_string());
        if from_body.is_some_and(|b| b != namespace) {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        object["metadata"]["namespace"] = json!(namespace);
        let exists = cluster
            .with_store(|store| store.get(&Key::new("namespaces", "", &namespace)).is_some());
        if !exists {
            let namespaces = resources::find("", "v1", "namespaces").expect("namespaces served");
            return Err(ApiError::not_found(namespaces, &namespace));
        }
        namespace
    } else {
        String::new()
    };
    let name = match (
        object["metadata"]["name"].as_str(),
        object["metadata"]["generateName"].as_str(),
    ) {
        (Some(name), _) if !name.is_empty() => name.to_string(),
        (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
        _ => {
            return Err(ApiError::invalid(
                resource,
                "",
                "metadata.name",
                "Required value: name or generateName is required",
            ));
        }
    };
    object["metadata"]["name"] = json!(name);
    object["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
    object["metadata"]["creationTimestamp"] = json!(now());
    let mut runs_here = false;
    match resource.plural {
        "pods" => {
            admission::default_pod(&mut object);
            cluster.mutate(&mut object);
            admission::validate_pod(resource, &name, &object)?;
            admission::admit_runtime_class(cluster, resource, &name, &object)?;
            admission::admit_pod_security(cluster, resource, &namespace, &name, &object)?;
            let node = object["spec"]["nodeName"].as_str().unwrap_or(NODE_NAME);
            runs_here = node == NODE_NAME;
            if object["status"].is_null() || runs_here {
                object["status"] =
                    json!({"phase": "Pending", "qosClass": admission::qos_class(&object)});
            }
        }
        "namespaces" => {
            let labels = &mut object["metadata"]["labels"];
            if !labels.is_object() {
                *labels = json!({});
            }
            labels["kubernetes.io/metadata.name"] = json!(name);
            object["spec"] = json!({"finalizers": ["kubernetes"]});
            object["status"] = json!({"phase": "Active"});
        }
        "persistentvolumeclaims" => provision(cluster, &mut object),
        _ => {
            object["metadata"]["generation"] = json!(1);
        }
    }
    let key = Key::new(resource.plural, &namespace, &name);
    let (stored, deletion) = cluster.with_store(|store| {
        if store.get(&key).is_some() {
            return Err(ApiError::already_exists(resource, &name));
        }
        let stored = store.put(key.clone(), object);
        let deletion = runs_here.then(|| {
            let (sender, receiver) = tokio::sync::watch::channel(None);
            let uid = stored["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            store.kubelets.insert(uid, sender);
            receiver
        });
        Ok((stored, deletion))
    })?;
    if let Some(deletion) = deletion {
        kubelet::spawn(cluster.clone(), &stored, deletion);
    }
    if resource.plural == "persistentvolumeclaims" && stored["status"]["phase"] == "Pending" {
        provisioning_failed(cluster, &stored);
    }
    Ok(stored)
}

/// The default storage class's provisioner, at once: a claim whose access modes the class
/// offers ([`Cluster::storage_modes`]) is Bound to a volume of the size asked for; any other
/// stays Pending.
fn provision(cluster: &Arc<Cluster>, claim: &mut Value) {
    let offered = cluster.storage_modes();
    let modes = claim["spec"]["accessModes"].clone();
    let bound = modes
        .as_array()
        .is_some_and(|modes| modes.iter().all(|m| offered.iter().any(|o| o == m)));
    if claim["spec"]["storageClassName"].is_null() {
        claim["spec"]["storageClassName"] = json!("standard");
    }
    claim["spec"]["volumeMode"] = json!("Filesystem");
    claim["status"] = if bound {
        claim["spec"]["volumeName"] = json!(format!("pvc-{}", uuid::Uuid::new_v4()));
        json!({
            "phase": "Bound",
            "accessModes": modes,
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"].clone()},
        })
    } else {
        json!({"phase": "Pending"})
    };
}

/// The event a CSI provisioner writes about a claim its class cannot satisfy (the EBS CSI
/// driver's words for a multi-writer claim).
fn provisioning_failed(cluster: &Arc<Cluster>, claim: &Value) {
    let namespace = claim["metadata"]["namespace"].as_str().unwrap_or_default();
    let class = claim["spec"]["storageClassName"]
        .as_str()
        .unwrap_or("standard");
    let modes = cluster.storage_modes().join(", ");
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{}.", claim["metadata"]["name"].as_str().unwrap_or("claim")), "namespace": namespace},
        "involvedObject": {
            "kind": "PersistentVolumeClaim",
            "namespace": namespace,
            "name": claim["metadata"]["name"],
            "uid": claim["metadata"]["uid"],
            "apiVersion": "v1",
        },
        "reason": "ProvisioningFailed",
        "message": format!("failed to provision volume with StorageClass \"{class}\": rpc error: code = InvalidArgument desc = Volume capabilities MULTI_NODE_MULTI_WRITER not supported. Only AccessModes[{modes}] supported."),
        "type": "Warning",
        "count": 1,
        "firstTimestamp": now(),
        "lastTimestamp": now(),
        "source": {"component": "persistentvolume-controller"},
    });
    let events = resources::find("", "v1", "events").expect("events served");
    let _ = create(cluster, events, Some(namespace), event);
}

/// Stores an object given whole (kind, apiVersion, metadata.namespace), as a test would apply it.
pub fn store_object(cluster: &Arc<Cluster>, object: Value) -> Result<Value, ApiError> {
    let resource = resources::of_kind(
        object["apiVersion"].as_str().unwrap_or_default(),
        object["kind"].as_str().unwrap_or_default(),
    )
    .ok_or_else(|| ApiError::bad_request("the double does not serve this kind"))?;
    let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
    create(cluster, resource, namespace.as_deref(), object)
}

/// Creates a namespace with labels (for the double's start and for tests).
pub fn create_namespace(cluster: &Arc<Cluster>, name: &str, labels: &[(&str, &str)]) {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let namespace = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    });
    store_object(cluster, namespace).expect("the namespace is new");
}

/// Deletes a pod: at once with grace 0 (or when no kubelet runs it), else gracefully: the
/// pod gets its `deletionTimestamp` and the kubelet removes it once its containers stopped.
pub fn delete_pod(
    cluster: &Arc<Cluster>,
    namespace: &str,
    name: &str,
    grace: Option<u64>,
) -> Result<Value, ApiError> {
    let pods = resources::find("", "v1", "pods").expect("pods served");
    let key = Key::new("pods", namespace, name);
    cluster.with_store(|store| {
        let pod = store
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(pods, name))?;
        let uid = pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let grace = grace.unwrap_or_else(|| {
            pod["spec"]["terminationGracePeriodSeconds"]
                .as_u64()
                .unwrap_or(30)
        });
        cluster.record_deletion(name, grace);
        if grace == 0 || !store.kubelets.contains_key(&uid) {
            Cluster::signal_deletion(store, &uid, 0);
            return store
                .remove(&key, Some(&uid))
                .ok_or_else(|| ApiError::not_found(pods, name));
        }
        if !pod["metadata"]["deletionTimestamp"].is_null() {
            return Ok(pod);
        }
        let at = SystemTime::now() + std::time::Duration::from_secs(grace);
        let updated = store
            .update(&key, Some(&uid), |pod| {
                pod["metadata"]["deletionTimestamp"] = json!(super::timestamp(at));
                pod["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            })
            .ok_or_else(|| ApiError::not_found(pods, name))?;
        Cluster::signal_deletion(store, &uid, grace);
        Ok(updated)
    })
}

/// Deletes a namespace and, at once, everything in it.
fn delete_namespace(cluster: &Arc<Cluster>, name: &str) -> Result<Value, ApiError> {
    let namespaces = resources::find("", "v1", "namespaces").expect("namespaces served");
    let pods: Vec<Key> = cluster.with_store(|store| {
        store
            .list("pods", Some(name))
            .into_iter()
            .map(|(key, _)| key)
            .collect()
    });
    for pod in pods {
        let _ = delete_pod(cluster, &pod.namespace, &pod.name, Some(0));
    }
    cluster.with_store(|store| {
        let contents: Vec<Key> = store
            .all()
            .filter(|(key, _)| key.namespace == name)
            .map(|(key, _)| key.clone())
            .collect();
        for key in contents {
            store.remove(&key, None);
        }
        let mut removed = store
            .remove(&Key::new("namespaces", "", name), None)
            .ok_or_else(|| ApiError::not_found(namespaces, name))?;
        removed["status"]["phase"] = json!("Terminating");
        Ok(removed)
    })
}

/// Answers a SelfSubjectAccessReview: allowed unless [`Cluster::denies`] the verb.
fn review(cluster: &Cluster, mut object: Value) -> Value {
    let attributes = &object["spec"]["resourceAttributes"];
    let verb = attributes["verb"].as_str().unwrap_or_default().to_string();
    let mut resource = attributes["resource"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(sub) = attributes["subresource"].as_str().filter(|s| !s.is_empty()) {
        resource = format!("{resource}/{sub}");
    }
    let allowed = !cluster.denies(&verb, &resource);
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    object["metadata"]["creationTimestamp"] = Value::Null;
    object["status"] = if allowed {
        json!({"allowed": true, "reason": "the double allows it"})
    } else {
        json!({"allowed": false, "reason": format!("the double denies {verb} on {resource}")})
    };
    object
}

/// A `meta.k8s.io/v1` `Table`, as kubectl's `get` asks for: the pod columns kubectl prints, or
/// name and age for other resources.
fn table(resource: &Resource, items: &[Value], revision: u64) -> Value {
    let column = |name: &str, format: &str, priority: u32| json!({"name": name, "type": "string", "format": format, "description": name, "priority": priority});
    let columns = if resource.plural == "pods" {
        vec![
            column("Name", "name", 0),
            column("Ready", "", 0),
            column("Status", "", 0),
            column("Restarts", "", 0),
            column("Age", "", 0),
            column("IP", "", 1),
            column("Node", "", 1),
        ]
    } else {
        vec![column("Name", "name", 0), column("Age", "", 0)]
    };
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let name = item["metadata"]["name"].clone();
            let age = age(item["metadata"]["creationTimestamp"].as_str());
            let cells = if resource.plural == "pods" {
                let statuses = item["status"]["containerStatuses"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let ready = statuses.iter().filter(|s| s["ready"] == true).count();
                let total = item["spec"]["containers"]
                    .as_array()
                    .map(Vec::len)
                    .unwrap_or(0);
                json!([name, format!("{ready}/{total}"), pod_status(item), "0", age,
                    item["status"]["podIP"].as_str().unwrap_or("<none>"),
                    item["spec"]["nodeName"].as_str().unwrap_or("<none>")])
            } else {
                json!([name, age])
            };
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": item["metadata"]},
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": revision.to_string()},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// The STATUS column, as kubectl computes it (simplified).
fn pod_status(pod: &Value) -> String {
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return "Terminating".to_string();
    }
    let mut reason = pod["status"]["reason"]
        .as_str()
        .or(pod["status"]["phase"].as_str())
        .unwrap_or("Pending")
        .to_string();
    for status in pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let state = &status["state"];
        if let Some(waiting) = state["waiting"]["reason"].as_str() {
            reason = waiting.to_string();
        } else if let Some(terminated) = state["terminated"].as_object() {
            reason = terminated
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("ExitCode:{}", terminated["exitCode"]));
        }
    }
    reason
}

/// The AGE column: `42s`, `3m5s`, `12m`, `2h`.
fn age(created: Option<&str>) -> String {
    let Some(created) = created.and_then(file_agent::time::parse_rfc3339) else {
        return "<unknown>".to_string();
    };
    let seconds = SystemTime::now()
        .duration_since(created)
        .unwrap_or_default()
        .as_secs();
    match seconds {
        0..120 => format!("{seconds}s"),
        120..600 => format!("{}m{}s", seconds / 60, seconds % 60),
        600..7200 => format!("{}m", seconds / 60),
        _ => format!("{}h", seconds / 3600),
    }
}
