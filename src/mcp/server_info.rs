//! The server's name and version in every result's `_meta`, under
//! `io.modelcontextprotocol/serverInfo` (MCP 2026-07-28, basic, "Per-response protocol
//! fields": servers SHOULD identify themselves there, so that a client needs no earlier
//! exchange to know whom it talks to).
//!
//! [`implementation`] is the one place the name and version are built, and [`add`] the one
//! place they go into a `_meta`, beside what it already holds (a call's audit receipts): a
//! key is added, nothing is replaced, and a `serverInfo` already there is kept. The handler
//! calls it for each result it makes: `get_info` (so `initialize`'s result and, through rmcp,
//! `server/discover`'s), the lists, `resources/read`, `tools/call` (the result, the task it
//! answers with, and the result a task keeps for `tasks/get`) and `tasks/get`.
//!
//! Not named, because rmcp 3.9's handler makes these answers itself with no way to add a
//! `_meta`: the acknowledgements of `tasks/update` and `tasks/cancel`, and `ping`'s empty
//! result (`ping` is gone from 2026-07-28). Errors are not results and carry no `_meta`.
//!
//! No setting turns this off: the same name and version are in `initialize`'s `serverInfo`
//! (required by the revisions that have `initialize`) and in `server/discover`'s answer
//! whatever is set, so leaving them out of the other results would hide nothing.

use rmcp::model::{CallToolResponse, Implementation, MetaObject};

/// The `_meta` key of a result that names the server.
pub const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";

/// Who this server is: `file-agent` and its version.
pub fn implementation() -> Implementation {
    Implementation::new("file-agent", env!("CARGO_PKG_VERSION"))
}

/// Adds [`implementation`] to a result's `meta` under [`SERVER_INFO_META`], keeping every key
/// already there (a `serverInfo` too).
pub fn add(meta: &mut Option<MetaObject>) {
    let named = serde_json::to_value(implementation()).unwrap_or_default();
    meta.get_or_insert_with(MetaObject::default)
        .entry(SERVER_INFO_META)
        .or_insert(named);
}

/// The `_meta` of a result that carries nothing else: the server's name.
pub fn meta() -> Option<MetaObject> {
    let mut meta = None;
    add(&mut meta);
    meta
}

/// [`add`] for a `tools/call` answer: the result, or the task (or input request) it answers
/// with.
pub fn add_to_call(response: &mut CallToolResponse) {
    match response {
        CallToolResponse::Complete(result) => add(&mut result.meta),
        CallToolResponse::Task(task) => add(&mut task.meta),
        CallToolResponse::InputRequired(input) => add(&mut input.meta),
        // A kind of answer rmcp adds later: named once this module knows its `_meta`.
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolResult, ContentBlock};
    use serde_json::json;

    use super::*;

    #[test]
    fn a_result_is_named_beside_what_its_meta_held() {
        let mut call = CallToolResult::success(vec![ContentBlock::text("4")]);
        let mut held = MetaObject::default();
        held.insert("io.file-agent/receipts".into(), json!([{"leaf_index": 3}]));
        call.meta = Some(held);
        let mut response = CallToolResponse::Complete(call);
        add_to_call(&mut response);
        let CallToolResponse::Complete(call) = response else {
            unreachable!()
        };
        let json = serde_json::to_value(&call).unwrap();
        assert_eq!(
            json["_meta"]["io.file-agent/receipts"],
            json!([{"leaf_index": 3}])
        );
        assert_eq!(json["_meta"][SERVER_INFO_META]["name"], "file-agent");
        assert_eq!(
            json["_meta"][SERVER_INFO_META]["version"],
            env!("CARGO_PKG_VERSION")
        );
    }

    #[test]
    fn a_server_info_already_there_is_kept() {
        let mut held = MetaObject::default();
        held.insert(
            SERVER_INFO_META.into(),
            json!({"name": "x", "version": "1"}),
        );
        let mut meta = Some(held);
        add(&mut meta);
        assert_eq!(meta.unwrap()[SERVER_INFO_META]["name"], "x");
        assert_eq!(
            super::meta().unwrap()[SERVER_INFO_META]["name"],
            "file-agent"
        );
    }
}
