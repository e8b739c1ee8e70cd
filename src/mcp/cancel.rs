//! `notifications/cancelled` over stateless HTTP. Over stdio rmcp cancels the request's token
//! itself; over HTTP each POST is served by a handler of its own and rmcp drops a notification
//! (there is no session to find the request in), and a client on the 2025-11-25 handshake
//! (the official Python SDK with `mode="legacy"`, say) cancels a call only that way, leaving
//! its POST open. (A 2026-07-28 client closes the call's POST instead: rmcp cancels the
//! request's token on that disconnect, as for any client gone.)
//!
//! So the calls under way are kept here by their caller's [`Scope`] and JSON-RPC id, and a
//! `notifications/cancelled` POST (handed over by `server::requests` before rmcp answers it
//! 202) cancels the calls of *its caller* with that id: the id is the client's to choose, so
//! another caller's call with the same id is never touched. Two clients of one caller that
//! use the same id at once cannot be told apart on the stateless wire: both are cancelled.
//!
//! A caller is its owner key, from whatever connection it sends the notification (an HTTP
//! client's pool sends it on another connection than the call's, whose POST is still open).
//! Callers who name no one ([`Owner::names_no_one`]: `anonymous`, the unproven callers of one
//! token) share a key, and their ids are small counters anyone can guess: for them the scope
//! is the key *and the connection* the request came on ([`ConnectionId`]). Over HTTP/1.1 a
//! call's POST holds its connection until it is answered, so in practice such a caller cannot
//! cancel by notification; it cancels by closing the call's request, which rmcp sees.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::owner::Owner;

/// The client connection an HTTP request came on: a number `server::connections` gives each
/// connection it serves, in the request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionId(pub u64);

/// Whose calls and tasks these are, where one caller must not reach another's: the owner key,
/// and for a caller who names no one the connection its request came on (`None` when the
/// request came on none the server numbered: never over HTTP, which is where such callers are).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    owner: String,
    connection: Option<ConnectionId>,
}

impl Scope {
    /// The scope of `owner`'s request that came on `connection`.
    pub fn of(owner: &Owner, connection: Option<ConnectionId>) -> Self {
        Self {
            owner: owner.as_str().to_string(),
            connection: connection.filter(|_| owner.names_no_one()),
        }
        .bound(owner)
    }

    /// `self`, or for a caller who names no one and came on no known connection, a scope no
    /// other request has (one caller must never reach another's through a missing number).
    fn bound(mut self, owner: &Owner) -> Self {
        if owner.names_no_one() && self.connection.is_none() {
            self.connection = Some(ConnectionId(UNBOUND.fetch_add(1, Ordering::Relaxed)));
        }
        self
    }
}

/// The next number for [`Scope::bound`]'s scopes of their own: from 2^63 up, where
/// `server::connections`, counting from 0, never comes.
static UNBOUND: AtomicU64 = AtomicU64::new(u64::MAX / 2);

/// A call's key: its caller's scope and its JSON-RPC id as JSON (`1` and `"1"` differ).
type Key = (Scope, String);
/// The calls of each key, by a number of their own (two calls may share a key).
type Calls = HashMap<Key, Vec<(u64, CancellationToken)>>;

/// The calls under way that a `notifications/cancelled` may name.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    /// Each key's calls.
    calls: Arc<Mutex<Calls>>,
    /// The next such number.
    next: Arc<AtomicU64>,
}

/// A call's place in [`InFlight`]: dropped when the call ends, which takes it out.
#[derive(Debug)]
pub struct Registration {
    in_flight: InFlight,
    key: Key,
    number: u64,
}

impl InFlight {
    /// Records call `request` (its JSON-RPC id) of `scope` until the returned guard is dropped;
    /// `token` is what a `notifications/cancelled` for it cancels.
    pub fn register(
        &self,
        scope: Scope,
        request: &serde_json::Value,
        token: CancellationToken,
    ) -> Registration {
        let key = (scope, request.to_string());
        let number = self.next.fetch_add(1, Ordering::Relaxed);
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

    /// Cancels the calls of `scope` whose JSON-RPC id is `request`; how many there were.
    pub fn cancel(&self, scope: Scope, request: &serde_json::Value) -> usize {
        let key = (scope, request.to_string());
        let calls = self.lock().get(&key).cloned().unwrap_or_default();
        for (_, token) in &calls {
            token.cancel();
        }
        calls.len()
    }

    /// When `message`, the body of an HTTP request with `extensions` (the gate's identity, the
    /// connection's number), is a `notifications/cancelled`, cancels what it names for its
    /// caller.
    pub fn notified_over_http(&self, extensions: &http::Extensions, message: &[u8]) {
        let owner = super::http_identity(extensions).owner();
        let connection = extensions.get::<ConnectionId>().copied();
        self.notified(message, &owner, connection);
    }

    /// When `message` (a JSON-RPC body) is a `notifications/cancelled`, cancels what it names
    /// for `owner` on `connection` and logs it; anything else is left alone.
    fn notified(&self, message: &[u8], owner: &Owner, connection: Option<ConnectionId>) {
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
        let cancelled = self.cancel(Scope::of(owner, connection), request);
        if cancelled == 0 && owner.names_no_one() {
            tracing::info!(
                %request,
                cancelled,
                "notifications/cancelled from a caller who names no one reaches only the calls of its own connection; the call goes on (closing its request cancels it)"
            );
        } else {
            tracing::info!(%request, cancelled, "notifications/cancelled");
        }
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
        // Alice's calls came on connection 1, Bob's on 2; Alice's cancel comes on 3.
        let _mine = in_flight.register(scope(&alice, 1), &json!(1), mine.clone());
        let _theirs = in_flight.register(scope(&bob, 2), &json!(1), theirs.clone());
        let _other = in_flight.register(scope(&alice, 1), &json!("1"), other_id.clone());
        in_flight.notified(CANCEL_1, &alice, Some(ConnectionId(3)));
        assert!(mine.is_cancelled());
        assert!(!theirs.is_cancelled() && !other_id.is_cancelled());
    }

    const CANCEL_1: &[u8] =
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#;

    fn scope(owner: &Owner, connection: u64) -> Scope {
        Scope::of(owner, Some(ConnectionId(connection)))
    }

    #[test]
    fn a_caller_who_names_no_one_cancels_only_on_its_own_connection() {
        for nobody in [Owner::anonymous(), Owner::unproven(Some("aaaa"))] {
            let in_flight = InFlight::default();
            let (mine, theirs) = (CancellationToken::new(), CancellationToken::new());
            let _mine = in_flight.register(scope(&nobody, 1), &json!(1), mine.clone());
            let _theirs = in_flight.register(scope(&nobody, 2), &json!(1), theirs.clone());
            in_flight.notified(CANCEL_1, &nobody, Some(ConnectionId(1)));
            assert!(mine.is_cancelled(), "{nobody}");
            assert!(
                !theirs.is_cancelled(),
                "{nobody}: another connection's call"
            );
            // No connection known: a scope of its own, which reaches nothing.
            let unbound = CancellationToken::new();
            let _unbound = in_flight.register(Scope::of(&nobody, None), &json!(2), unbound.clone());
            assert_eq!(in_flight.cancel(Scope::of(&nobody, None), &json!(2)), 0);
            assert!(!unbound.is_cancelled());
        }
    }

    #[test]
    fn a_finished_call_is_forgotten_and_other_messages_cancel_nothing() {
        let in_flight = InFlight::default();
        let owner = Owner::anonymous();
        let token = CancellationToken::new();
        let registered = in_flight.register(scope(&owner, 1), &json!(7), token.clone());
        in_flight.notified(
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"requestId":7}}"#,
            &owner,
            Some(ConnectionId(1)),
        );
        in_flight.notified(b"not json", &owner, Some(ConnectionId(1)));
        assert!(!token.is_cancelled());
        drop(registered);
        assert_eq!(in_flight.cancel(scope(&owner, 1), &json!(7)), 0);
        assert!(in_flight.lock().is_empty());
    }
}
