//! What each tool does to the world it touches, as MCP tool annotations (`readOnlyHint`,
//! `destructiveHint`, `idempotentHint`, `openWorldHint`): hints a client may use to decide
//! whether to ask its user before a call. Every tool states all four, so that no client falls
//! back on the spec's defaults (which assume a destructive, open-world tool).
//!
//! The world a tool may change is the caller's: files in storage, saved tools. The audit
//! trail, the log, the metrics and the server's own caches are its bookkeeping, not changes to
//! that world. A tool is open-world when a call reaches what the caller names outside
//! file-agent (a document URL, the web); the configured model and the network-less sandbox are
//! its closed world. docs/TOOLS.md has the table; a unit test holds both to the same facts.

use rmcp::model::ToolAnnotations;

use crate::tools::catalog::Tool;

/// The four hints: `(read_only, destructive, idempotent, open_world)`.
type Hints = (bool, bool, bool, bool);

/// The hints of a built-in tool.
fn hints(tool: Tool) -> Hints {
    match tool {
        // Each call stores a new file (analyze_file: the charts asked for) and changes none;
        // the model writes new code each time, so a repeat makes another file.
        Tool::GenerateFile | Tool::ModifyFile | Tool::AnalyzeFile => (false, false, false, false),
        // Stores what the code wrote to /work/out as new files; replaces nothing.
        Tool::RunPython => (false, false, false, false),
        // Reads a document at a URL the caller names, and stores nothing.
        Tool::DataAnalysis => (true, false, true, true),
        // Searches the web, and stores nothing for the caller.
        Tool::DeepResearch => (true, false, true, true),
        // Saving a name again replaces that tool; the same arguments save the same version.
        Tool::CreateTool => (false, true, true, false),
        // The same, with code the model writes anew each time.
        Tool::GenerateTool => (false, true, false, false),
        Tool::ListTools => (true, false, true, false),
        // A deleted tool is gone; deleting it again changes nothing more.
        Tool::DeleteTool => (false, true, true, false),
    }
}

/// The hints of a saved tool (`my_<name>`): it runs its code in a fresh container and stores
/// what the code wrote to /work/out, like `run_python`.
const SAVED_TOOL: Hints = (false, false, false, false);

/// The annotations of `tool`.
pub fn of(tool: Tool) -> ToolAnnotations {
    annotations(hints(tool))
}

/// The annotations of every saved tool.
pub fn of_saved_tool() -> ToolAnnotations {
    annotations(SAVED_TOOL)
}

fn annotations((read_only, destructive, idempotent, open_world): Hints) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(idempotent)
        .open_world(open_world)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of docs/TOOLS.md says what [`hints`] says, tool by tool.
    #[test]
    fn the_docs_table_says_what_each_tool_is_annotated_with() {
        let docs = include_str!("../../docs/TOOLS.md");
        let yes_no = |value: bool| if value { "yes" } else { "no" };
        let row = |name: &str, (read_only, destructive, idempotent, open_world): Hints| {
            format!(
                "| `{name}` | {} | {} | {} | {} |",
                yes_no(read_only),
                yes_no(destructive),
                yes_no(idempotent),
                yes_no(open_world)
            )
        };
        for tool in Tool::ALL {
            let expected = row(tool.name(), hints(tool));
            assert!(docs.contains(&expected), "docs/TOOLS.md lacks {expected}");
        }
        let expected = row("my_<name>", SAVED_TOOL);
        assert!(docs.contains(&expected), "docs/TOOLS.md lacks {expected}");
    }

    #[test]
    fn a_read_only_tool_is_neither_destructive_nor_changed_by_a_repeat() {
        for tool in Tool::ALL {
            let (read_only, destructive, idempotent, _) = hints(tool);
            if read_only {
                assert!(!destructive && idempotent, "{}", tool.name());
            }
        }
    }
}
