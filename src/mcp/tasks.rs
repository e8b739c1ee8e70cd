//! Long calls as MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663, as rmcp
//! 3.9 models it): a `tools/call` from a client that declares the extension, of a tool
//! `FILE_AGENT_TASKS` names, is answered at once with a task (`resultType: "task"`) while the
//! call runs on by itself; `tasks/get` gives its status, its phase as the status message, and
//! once it ended its result; `tasks/cancel` stops it; `tasks/update` has nothing to answer
//! (file-agent never asks the client for input mid-task).
//!
//! The store is the server's memory (a restart forgets every task), shared by the handlers of
//! all requests. Each task is its caller's alone: it is kept under the owner key
//! ([`crate::owner`]) of the call that made it, and another caller asking for its id gets the
//! same "not found" as for an id that never was. A finished task is kept for
//! `FILE_AGENT_TASK_RESULT_TTL`, and one caller has at most `FILE_AGENT_TASKS_PER_CALLER` kept.
//!
//! Callers who name no one (`anonymous`, the unproven callers of one token) share an owner
//! key, so for them the key alone keeps nothing apart: a task's id, a random UUID (v4, 122
//! random bits) given only to the call that made it, is what reaches it (from any connection,
//! as a client's polls may come on several), and the bound counts the tasks made on each
//! connection ([`Scope`]), so one such caller cannot use up the others' room.
//!
//! What this module does not do: run the call. The handler gives [`TaskStore::start`] the
//! call as a future, with its own cancellation token in place of the HTTP request's (the call
//! outlives that request), still a child of the server's shutdown token through
//! `Tools::call_token`, so SIGTERM stops it and the drain waits for it, and it writes its
//! audit lines as any call does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ErrorData;
use rmcp::model::{
    CallToolResponse, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use tokio_util::sync::CancellationToken;

use super::cancel::Scope;
use crate::config::{TaskTools, TasksConfig};
use crate::owner::Owner;
use crate::tools::catalog::{SAVED_TOOL_PREFIX, Tool};

/// The polling interval suggested to clients.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The tasks of every caller.
#[derive(Debug, Clone, Default)]
pub struct TaskStore {
    /// Each task by its id.
    tasks: Arc<Mutex<HashMap<String, Entry>>>,
    /// `FILE_AGENT_TASKS` and its bounds; the default (no store configured) offers no task.
    config: Arc<Option<TasksConfig>>,
}

/// One task.
#[derive(Debug)]
struct Entry {
    /// Whose it is: the owner key of the call that made it.
    owner: String,
    /// Whose bound it counts against (the owner key, and for a caller who names no one the
    /// connection that made it).
    scope: Scope,
    /// What `tasks/get` shows of it.
    task: Task,
    /// When it was made.
    created: Instant,
    /// The most its call may take (the tool's deadline).
    deadline: Duration,
    /// Its end (completed, failed, cancelled) and when it came; `None` while it runs.
    end: Option<(TaskPayload, Instant)>,
    /// Stops its call.
    cancel: CancellationToken,
}

/// Where a task's phases go: its status message.
#[derive(Debug, Clone)]
pub struct StatusMessage {
    tasks: Arc<Mutex<HashMap<String, Entry>>>,
    id: String,
}

impl StatusMessage {
    /// Shows `message` as the task's status, while it runs.
    pub fn set(&self, message: String) {
        if let Some(entry) = lock(&self.tasks).get_mut(&self.id)
            && entry.end.is_none()
        {
            entry.task.status_message = Some(message);
            entry.task.last_updated_at = crate::time::rfc3339_now();
        }
    }
}

impl TaskStore {
    /// A store under `config`, which warns about each name in `FILE_AGENT_TASKS` that is no tool
    /// of file-agent's (nor a saved tool's `my_` name): it would never answer with a task.
    pub fn new(config: TasksConfig) -> Self {
        if let TaskTools::Named(names) = &config.tools {
            for name in names {
                if Tool::named(name).is_none() && !name.starts_with(SAVED_TOOL_PREFIX) {
                    tracing::warn!(tool = %name, "FILE_AGENT_TASKS names a tool file-agent does not have");
                }
            }
        }
        Self {
            tasks: Arc::default(),
            config: Arc::new(Some(config)),
        }
    }

    /// `FILE_AGENT_TASKS` and its bounds; `None` for the default store, which offers no task.
    fn settings(&self) -> Option<&TasksConfig> {
        self.config.as_ref().as_ref()
    }

    /// Whether any call may answer with a task (the server then offers the extension).
    pub fn offered(&self) -> bool {
        self.settings().is_some_and(|c| c.tools.any())
    }

    /// Whether a call of `tool` answers with a task, for a client that declares the extension.
    pub fn serves(&self, tool: &str) -> bool {
        self.settings().is_some_and(|c| c.tools.includes(tool))
    }

    /// Makes a task of `owner` for a call that may take `deadline`, and starts `call` on its
    /// own: `call` gets the task's token (cancelled by `tasks/cancel`) and where its phases go.
    /// The task is in the store before this returns (so `tasks/get` finds it at once); `Err`
    /// when `scope` has its bound of tasks running.
    pub fn start<F>(
        &self,
        owner: &Owner,
        scope: Scope,
        deadline: Duration,
        call: impl FnOnce(CancellationToken, StatusMessage) -> F,
    ) -> Result<CreateTaskResult, String>
    where
        F: Future<Output = Result<CallToolResponse, ErrorData>> + Send + 'static,
    {
        let id = uuid::Uuid::new_v4().to_string();
        let cancel = CancellationToken::new();
        let task = self.insert(owner, scope, &id, deadline, cancel.clone())?;
        let status = StatusMessage {
            tasks: self.tasks.clone(),
            id: id.clone(),
        };
        let call = call(cancel, status);
        let store = self.clone();
        tokio::spawn(async move {
            let response = call.await;
            store.end(&id, response);
        });
        Ok(CreateTaskResult::new(task))
    }

    /// `tasks/get`: the task `id` of `owner`, with its result once it ended.
    pub fn get(&self, owner: &Owner, id: &str) -> Result<GetTaskResult, ErrorData> {
        let mut tasks = lock(&self.tasks);
        self.sweep(&mut tasks);
        let entry = owned(&mut tasks, owner, id)?;
        let payload = match &entry.end {
            Some((payload, _)) => payload.clone(),
            None => TaskPayload::Working,
        };
        let mut task = entry.task.clone();
        task.ttl_ms = Some(self.ttl(entry).as_millis() as u64);
        Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
    }

    /// `tasks/cancel`: stops the call of task `id` of `owner` (its container is removed, its
    /// attempt audited `cancelled`); the task then ends `cancelled`, unless it ended first.
    pub fn cancel(&self, owner: &Owner, id: &str) -> Result<(), ErrorData> {
        let mut tasks = lock(&self.tasks);
        self.sweep(&mut tasks);
        let entry = owned(&mut tasks, owner, id)?;
        if entry.end.is_none() {
            entry.cancel.cancel();
            entry.task.status_message = Some("Cancelling".into());
            entry.task.last_updated_at = crate::time::rfc3339_now();
            tracing::info!(task = %id, "tasks/cancel");
        }
        Ok(())
    }

    /// `tasks/update`: a task of `owner` never waits for input, so there is nothing to deliver;
    /// an unknown id is "not found" as for `tasks/get`.
    pub fn update(&self, owner: &Owner, id: &str) -> Result<(), ErrorData> {
        let mut tasks = lock(&self.tasks);
        owned(&mut tasks, owner, id).map(|_| ())
    }

    /// Puts a new working task of `owner` in the store, first making room under `scope`'s
    /// bound: the oldest of its finished tasks goes; with none finished, the call is refused.
    fn insert(
        &self,
        owner: &Owner,
        scope: Scope,
        id: &str,
        deadline: Duration,
        cancel: CancellationToken,
    ) -> Result<Task, String> {
        let per_caller = self.settings().map_or(0, |config| config.per_caller);
        let mut tasks = lock(&self.tasks);
        self.sweep(&mut tasks);
        let mine: Vec<(&String, &Entry)> = tasks
            .iter()
            .filter(|(_, entry)| entry.scope == scope)
            .collect();
        if mine.len() >= per_caller {
            let oldest_finished = mine
                .iter()
                .filter_map(|(id, entry)| entry.end.as_ref().map(|(_, at)| (*at, (*id).clone())))
                .min();
            let Some((_, oldest)) = oldest_finished else {
                return Err(format!(
                    "{per_caller} of your tasks are still running (FILE_AGENT_TASKS_PER_CALLER); wait for one to finish or cancel one (tasks/cancel), then call again"
                ));
            };
            tasks.remove(&oldest);
        }
        let now = crate::time::rfc3339_now();
        let mut task = Task::new(id, TaskStatus::Working, now.clone(), now)
            .with_poll_interval_ms(POLL_INTERVAL.as_millis() as u64)
            .with_status_message("Starting");
        let entry = Entry {
            owner: owner.as_str().to_string(),
            scope,
            task: task.clone(),
            created: Instant::now(),
            deadline,
            end: None,
            cancel,
        };
        task.ttl_ms = Some(self.ttl(&entry).as_millis() as u64);
        tasks.insert(id.to_string(), entry);
        Ok(task)
    }

    /// Records how task `id`'s call ended: a result (`isError` too) completes it, unless it was
    /// cancelled and the result says so; a protocol error fails it.
    fn end(&self, id: &str, response: Result<CallToolResponse, ErrorData>) {
        let mut tasks = lock(&self.tasks);
        let Some(entry) = tasks.get_mut(id) else {
            return;
        };
        let (payload, message) = match response {
            Ok(CallToolResponse::Complete(result))
                if entry.cancel.is_cancelled() && result.is_error == Some(true) =>
            {
                (TaskPayload::Cancelled, "Cancelled".to_string())
            }
            Ok(response) => {
                let result = object(serde_json::to_value(rmcp::model::ServerResult::from(
                    response,
                )));
                (TaskPayload::Completed { result }, "Done".to_string())
            }
            Err(error) => {
                let message = error.message.to_string();
                let error = object(serde_json::to_value(&error));
                (TaskPayload::Failed { error }, message)
            }
        };
        entry.task.status = payload.status();
        entry.task.status_message = Some(message);
        entry.task.last_updated_at = crate::time::rfc3339_now();
        entry.end = Some((payload, Instant::now()));
    }

    /// How long a task is kept from its creation: while it runs, its deadline and then the
    /// result's time; once it ended, until its result's time is up.
    fn ttl(&self, entry: &Entry) -> Duration {
        let result_ttl = self
            .settings()
            .map_or(Duration::ZERO, |config| config.result_ttl);
        match &entry.end {
            Some((_, at)) => at.duration_since(entry.created) + result_ttl,
            None => entry.deadline + result_ttl,
        }
    }

    /// Forgets the tasks whose result's time is up.
    fn sweep(&self, tasks: &mut HashMap<String, Entry>) {
        tasks.retain(|_, entry| entry.created.elapsed() < self.ttl(entry));
    }
}

/// The task `id` when `owner`'s, else the error for an unknown task (the same for another
/// caller's: an id says nothing of whose it is).
fn owned<'a>(
    tasks: &'a mut HashMap<String, Entry>,
    owner: &Owner,
    id: &str,
) -> Result<&'a mut Entry, ErrorData> {
    match tasks.get_mut(id) {
        Some(entry) if entry.owner == owner.as_str() => Ok(entry),
        _ => Err(ErrorData::invalid_params(
            "Failed to retrieve task: Task not found",
            None,
        )),
    }
}

/// A JSON object of what serialized to one (an empty object otherwise).
fn object(value: Result<serde_json::Value, serde_json::Error>) -> JsonObject {
    match value {
        Ok(serde_json::Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

fn lock(
    tasks: &Mutex<HashMap<String, Entry>>,
) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
    // Each change under the lock is one field or one insert or remove: a panic leaves it whole.
    tasks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::CallToolResult;

    fn store(per_caller: usize, ttl_ms: u64) -> TaskStore {
        TaskStore::new(TasksConfig {
            tools: TaskTools::All,
            result_ttl: Duration::from_millis(ttl_ms),
            per_caller,
        })
    }

    /// Starts a task of `owner` whose call answers `text` once `go` is cancelled (or its own
    /// token is, with an error result).
    fn started(store: &TaskStore, owner: &Owner, go: &CancellationToken) -> Result<String, String> {
        started_on(store, owner, 1, go)
    }

    /// [`started`], by a request that came on connection `connection`.
    fn started_on(
        store: &TaskStore,
        owner: &Owner,
        connection: u64,
        go: &CancellationToken,
    ) -> Result<String, String> {
        let go = go.clone();
        let scope = Scope::of(owner, Some(super::super::ConnectionId(connection)));
        store
            .start(
                owner,
                scope,
                Duration::from_secs(60),
                move |cancel, status| async move {
                    status.set("Running it in a fresh sandbox".into());
                    tokio::select! {
                        () = go.cancelled() => Ok(CallToolResult::success(vec![]).into()),
                        () = cancel.cancelled() => Ok(CallToolResult::error(vec![]).into()),
                    }
                },
            )
            .map(|created| created.task.task_id)
    }

    async fn ended(store: &TaskStore, owner: &Owner, id: &str) -> GetTaskResult {
        for _ in 0..100 {
            let got = store.get(owner, id).unwrap();
            if got.task.status().is_terminal() {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the task never ended");
    }

    /// A task of `owner` that has completed: its id and what `tasks/get` says of it.
    async fn finished(store: &TaskStore, owner: &Owner) -> (String, GetTaskResult) {
        let go = CancellationToken::new();
        go.cancel();
        let id = started(store, owner, &go).unwrap();
        let done = ended(store, owner, &id).await;
        (id, done)
    }

    #[tokio::test]
    async fn a_task_is_its_callers_alone_and_ends_with_its_result() {
        let store = store(4, 60_000);
        let (alice, bob) = (Owner::token("aaaa"), Owner::token("bbbb"));
        let go = CancellationToken::new();
        let id = started(&store, &alice, &go).unwrap();
        tokio::task::yield_now().await;
        let working = store.get(&alice, &id).unwrap();
        assert_eq!(working.task.status(), TaskStatus::Working);
        for error in [
            store.get(&bob, &id).unwrap_err(),
            store.cancel(&bob, &id).unwrap_err(),
            store.get(&alice, "no-such-task").unwrap_err(),
        ] {
            assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert!(error.message.contains("not found"), "{error:?}");
        }
        go.cancel();
        let done = ended(&store, &alice, &id).await;
        assert_eq!(done.task.status(), TaskStatus::Completed);
        assert!(matches!(done.task.payload, TaskPayload::Completed { .. }));
    }

    #[tokio::test]
    async fn a_cancelled_task_ends_cancelled() {
        let store = store(4, 60_000);
        let owner = Owner::anonymous();
        let id = started(&store, &owner, &CancellationToken::new()).unwrap();
        store.cancel(&owner, &id).unwrap();
        let done = ended(&store, &owner, &id).await;
        assert_eq!(done.task.status(), TaskStatus::Cancelled);
    }

    #[tokio::test]
    async fn the_bound_drops_the_oldest_finished_and_refuses_when_all_run() {
        let store = store(2, 60_000);
        let owner = Owner::anonymous();
        let (first, _) = finished(&store, &owner).await;
        let waiting = CancellationToken::new();
        let second = started(&store, &owner, &waiting).unwrap();
        let third = started(&store, &owner, &waiting).unwrap();
        assert!(
            store.get(&owner, &first).is_err(),
            "the finished one made room"
        );
        assert!(store.get(&owner, &second).is_ok() && store.get(&owner, &third).is_ok());
        let refused = started(&store, &owner, &waiting).unwrap_err();
        assert!(refused.contains("FILE_AGENT_TASKS_PER_CALLER"), "{refused}");
        // Another caller has bounds of its own.
        assert!(started(&store, &Owner::local(), &waiting).is_ok());
        waiting.cancel();
    }

    #[tokio::test]
    async fn callers_who_name_no_one_have_a_bound_per_connection_and_reach_a_task_by_its_id() {
        let store = store(1, 60_000);
        let waiting = CancellationToken::new();
        for nobody in [Owner::anonymous(), Owner::unproven(Some("aaaa"))] {
            let first = started_on(&store, &nobody, 1, &waiting).unwrap();
            let refused = started_on(&store, &nobody, 1, &waiting).unwrap_err();
            assert!(refused.contains("FILE_AGENT_TASKS_PER_CALLER"), "{refused}");
            // Another connection's caller is not refused for the first one's tasks.
            let second = started_on(&store, &nobody, 2, &waiting).unwrap();
            // The id reaches the task, whichever connection asks.
            assert!(store.get(&nobody, &first).is_ok() && store.get(&nobody, &second).is_ok());
        }
        // A caller who is named has one bound, whatever connections it uses.
        let alice = Owner::token("aaaa");
        started_on(&store, &alice, 1, &waiting).unwrap();
        assert!(started_on(&store, &alice, 2, &waiting).is_err());
        waiting.cancel();
    }

    #[tokio::test]
    async fn a_finished_task_is_forgotten_once_its_time_is_up() {
        let store = store(4, 50);
        let owner = Owner::anonymous();
        let (id, done) = finished(&store, &owner).await;
        assert!(done.task.task.ttl_ms.unwrap() < 60_000);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(store.get(&owner, &id).is_err());
    }
}
