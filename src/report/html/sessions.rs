//! The page's sessions: a section that follows each `run_python` session from state to state,
//! and the session rows of an attempt's detail. Hashes are shown short (the style hides the
//! rest) and whole on hover; copying one copies it whole. An attempt that breaks its
//! session's chain is named in red in both places, and in "needs attention".

use std::fmt::Write;

use super::{ROWS_SHOWN, esc, link, row, tag, when};
use crate::report::sessions::{ChainMark, SessionHistory, SessionStep, SessionsSection};

/// A SHA-256 (or a session's id) shown by its first digits, whole on hover; the text is the
/// whole value, so copying it copies the whole value.
pub(super) fn hash(full: &str) -> String {
    format!("<code class=\"h\" title=\"{0}\">{0}</code>", esc(full))
}

/// A state's hash, or that there was none.
fn state(sha256: Option<&str>) -> String {
    sha256.map_or_else(|| "<span class=\"muted\">none</span>".into(), hash)
}

/// The sessions section.
pub(super) fn section(page: &mut String, sessions: &SessionsSection) {
    let _ = write!(
        page,
        "<section id=\"sessions\"><h2>Sessions ({})</h2><p class=\"muted\">Each <code>run_python</code> session's attempts in time order, each with the SHA-256 of the state it started from and of the state it left (the session is its id, a hash of its owner and name, never the name). Each attempt should start from the state the attempt before it left: one that does not <b>breaks</b> the session's chain (a state changed outside file-agent, or two replicas running the session at once).</p>",
        sessions.total
    );
    if sessions.rows.is_empty() {
        page.push_str("<p>None in this range.</p></section>\n");
        return;
    }
    if sessions.breaks > 0 {
        let _ = write!(
            page,
            "<p class=\"bad\">BROKEN session chains: {} attempt{} started from a state its session's attempt before did not leave (opened below, and in Needs attention).</p>",
            sessions.breaks,
            if sessions.breaks == 1 { "" } else { "s" }
        );
    }
    if sessions.total > sessions.rows.len() {
        let _ = write!(
            page,
            "<p class=\"muted\">The {} with a break or most recently active of {} are shown.</p>",
            sessions.rows.len(),
            sessions.total
        );
    }
    for (index, session) in sessions.rows.iter().enumerate() {
        if index == ROWS_SHOWN {
            let _ = write!(
                page,
                "<details><summary>{} more sessions</summary>",
                sessions.rows.len() - ROWS_SHOWN
            );
        }
        history(page, index, session);
    }
    if sessions.rows.len() > ROWS_SHOWN {
        page.push_str("</details>");
    }
    page.push_str("</section>\n");
}

/// One session, folded unless its chain breaks: its steps from state to state.
fn history(page: &mut String, index: usize, session: &SessionHistory) {
    let verdict = if session.breaks > 0 {
        format!("<span class=\"bad\">BROKEN ({})</span>", session.breaks)
    } else {
        "chained".into()
    };
    let _ = write!(
        page,
        "<details class=\"session\" id=\"session-{index}\"{}><summary>session {} · user {} · {} attempts · state now {} · {verdict} · last {}</summary>",
        if session.breaks > 0 {
            " open=\"open\""
        } else {
            ""
        },
        hash(&session.id),
        esc(&session.users.join(", ")),
        session.attempts,
        state(session.state.as_deref()),
        esc(&session.last),
    );
    if session.steps_omitted > 0 {
        let _ = write!(
            page,
            "<p class=\"muted\">{} older attempts that follow their state are left out.</p>",
            session.steps_omitted
        );
    }
    page.push_str("<table><tr><th>time</th><th>ending</th><th>state before</th><th>state after</th><th>reset</th><th>chain</th><th>detail</th></tr>");
    for (n, step) in session.steps.iter().enumerate() {
        step_row(page, step, n == 0);
    }
    page.push_str("</table></details>\n");
}

/// One attempt of a session; `first` when it is the first the report lists.
fn step_row(page: &mut String, step: &SessionStep, first: bool) {
    let chain = match &step.mark {
        Some(mark @ ChainMark::Break { .. }) => format!(
            "<span class=\"bad\">{}</span>",
            esc(&mark.words(step.state_before.as_deref()))
        ),
        Some(mark) => esc(&mark.words(step.state_before.as_deref())),
        None if step.reset => "started over".into(),
        None if first => "<span class=\"muted\">first listed</span>".into(),
        None => "follows".into(),
    };
    let _ = write!(
        page,
        "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{chain}</td><td>{}</td></tr>",
        if step.mark.as_ref().is_some_and(ChainMark::is_break) {
            " class=\"brk\""
        } else {
            ""
        },
        when(&step.time),
        tag(step.ending),
        state(step.state_before.as_deref()),
        state(step.state_after.as_deref()),
        if step.reset { "yes" } else { "" },
        link(&step.anchor, "detail"),
    );
}

/// The session rows of an attempt's detail: its id, the states it went from and to, a reset,
/// and how it follows the session's attempt before (`mark`, in words).
pub(super) fn detail_rows(
    page: &mut String,
    session: &crate::audit::SessionMark,
    mark: Option<&crate::report::sessions::MarkNote>,
) {
    row(page, "session", hash(&session.id));
    row(
        page,
        "session state",
        format!(
            "{} → {}{}",
            state(session.state_before.as_deref()),
            state(session.state_after.as_deref()),
            if session.reset {
                " (the caller started the session over)"
            } else {
                ""
            }
        ),
    );
    if let Some(mark) = mark {
        let class = if mark.broken { "bad" } else { "muted" };
        row(
            page,
            "session chain",
            format!("<span class=\"{class}\">{}</span>", esc(&mark.words)),
        );
    }
}
