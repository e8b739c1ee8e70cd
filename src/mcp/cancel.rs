//! `notifications/cancelled` over stateless HTTP. Over stdio rmcp cancels the request's token
//! itself; over HTTP each POST is served by a handler of its own and rmcp drops a notification
//! (there is no session to find the request in), and a client on the 2025-11-25 handshake
//! (the official Python SDK with `mode="legacy"`, say) cancels a call only that way, leaving
//! its POST open. (A 2026-07-28 client closes the call's POST instead: rmcp cancels the
//! request's token on that disconnect, as for any client gone.)
//!
//! So the calls under way are kept here by their caller's owner key and JSON-RPC id, and a
//! `notifications/cancelled` POST (handed over by `server::requests` before rmcp answers it
//! 202) cancels the calls of *its caller* with that id: the id is the client's to choose, so
//! another caller's call with the same id is never touched. Two clients of one caller that
//! use the same id at once cannot be told apart on the stateless wire: both are cancelled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::owner::Owner;

/// A call's key: its caller's owner key and its JSON-RPC id as JSON (`1` and `"1"` differ).
type Key = (String, String);
/// The calls of each key, by a number of their own (two calls may share a key).
type Calls = HashMap<Key, Vec<(u64, CancellationToken)>>;

/// The calls under way that a `notifications/cancelled` may name.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    /// Each key's calls.
    calls: Arc<Mutex<Calls>>,
    /// The next such number.
    next: Arc<std::sync::atomic::AtomicU64>,
}

/// A call's place in [`InFlight`]: dropped when the call ends, which takes it out.
#[derive(Debug)]
pub struct Registration {
    in_flight: InFlight,
    key: Key,
    number: u64,
}

impl InFlight {
    /// Records call `request` (its JSON-RPC id) of `owner` until the returned guard is dropped;
    /// `token` is what a `notifications/cancelled` for it cancels.
    pub fn register(
        &self,
        owner: &Owner,
        request: &serde_json::Value,
        token: CancellationToken,
    ) -> Registration {
        let key = (owner.as_str().to_string(), request.to_string());
        let number = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock()
            .entry(key.clone())
            .or_default()
            .push((number, token));
        Registration {
            in_flight: self.clone(),
            key,
            number,
        }
    }

    /// Cancels the calls of `owner` whose JSON-RPC id is `request`; how many there were.
    pub fn cancel(&self, owner: &Owner, request: &serde_json::Value) -> usize {
        let key = (owner.as_str().to_string(), request.to_string());
        let calls = self.lock().get(&key).cloned().unwrap_or_default();
        for (_, token) in &calls {
            token.cancel();
        }
        calls.len()
    }

    /// When `message`, the body of an HTTP request with `extensions` (the gate's identity),
    /// is a `notifications/cancelled`, cancels what it names for its caller.
    pub fn notified_over_http(&self, extensions: &http::Extensions, message: &[u8]) {
        self.notified(message, &super::http_identity(extensions).owner());
    }

    /// When `message` (a JSON-RPC body) is a `notifications/cancelled`, cancels what it names
    /// for `owner` and logs it; anything else is left alone.
    fn notified(&self, message: &[u8], owner: &Owner) {
        let Ok(message) = serde_json::from_slice::<serde_json::Value>(message) else {
            return;
        };
        if message["method"] != "notifications/cancelled" {
            return;
        }
        let request = &message["params"]["requestId"];
        if !(request.is_string() || request.is_number()) {
            return;
        }
        let cancelled = self.cancel(owner, request);
        tracing::info!(%request, cancelled, "notifications/cancelled");
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        // A panic while the map was held left it whole: each change is one insert or remove.
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut calls = self.in_flight.lock();
        if let Some(list) = calls.get_mut(&self.key) {
            list.retain(|(number, _)| *number != self.number);
            if list.is_empty() {
                calls.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cancel_reaches_only_its_callers_call_with_that_id() {
        let in_flight = InFlight::default();
        let (alice, bob) = (Owner::token("aaaa"), Owner::token("bbbb"));
        let (mine, theirs, other_id) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        let _mine = in_flight.register(&alice, &json!(1), mine.clone());
        let _theirs = in_flight.register(&bob, &json!(1), theirs.clone());
        let _other = in_flight.register(&alice, &json!("1"), other_id.clone());
        in_flight.notified(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
            &alice,
        );
        assert!(mine.is_cancelled());
        assert!(!theirs.is_cancelled() && !other_id.is_cancelled());
    }

    #[test]
    fn a_finished_call_is_forgotten_and_other_messages_cancel_nothing() {
        let in_flight = InFlight::default();
        let owner = Owner::anonymous();
        let token = CancellationToken::new();
        let registered = in_flight.register(&owner, &json!(7), token.clone());
        in_flight.notified(
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"requestId":7}}"#,
            &owner,
        );
        in_flight.notified(b"not json", &owner);
        assert!(!token.is_cancelled());
        drop(registered);
        assert_eq!(in_flight.cancel(&owner, &json!(7)), 0);
        assert!(in_flight.lock().is_empty());
    }
}
