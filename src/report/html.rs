//! The report as one self-contained HTML page: inline styles, charts as inline SVG, no
//! script, no font, no request of any kind (a Content-Security-Policy says so to the
//! browser too). Every string from the trail or the version store goes through [`esc`]:
//! user ids, file names, code and errors are hostile input.
//!
//! The page is also well-formed XML (void elements closed, attributes quoted, only the five
//! XML entities), so a test can parse it strictly and prove that no markup came from the
//! trail.
//!
//! Integrity comes first, and a broken trail changes the page's title and opens it with a
//! red banner that names the break, so that it cannot be taken for a clean one.

mod sessions;

use std::collections::HashMap;
use std::fmt::Write;

use super::diff::Line;
use super::{
    AttentionRow, ChainIntegrity, Counts, Detail, Ending, Integrity, Report, SavedToolHistory,
    Tallies, Tally, ToolEvent, ToolVersion,
};

/// Each ending's colour in the chart and the tables.
fn colour(ending: Ending) -> &'static str {
    match ending {
        Ending::Ok => "#2e7d32",
        Ending::Failed => "#ef6c00",
        Ending::Timeout => "#f9a825",
        Ending::OutOfMemory => "#8e24aa",
        Ending::ProcessLimit => "#6d4c41",
        Ending::OutputLimit => "#00838f",
        Ending::Busy => "#90a4ae",
        Ending::Refused => "#283593",
    }
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1180px;padding:0 16px 40px;color:#1b1b1b}\
h1{margin:18px 0 4px}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:32px}\
table{border-collapse:collapse;margin:8px 0;font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}\
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.alarm{background:#b71c1c;color:#fff;padding:14px 18px;font-size:18px;font-weight:700;border-radius:4px;margin:12px 0}\
.alarm p{margin:6px 0;font-size:15px;font-weight:400}.intact{background:#e8f5e9;border:1px solid #2e7d32;color:#1b5e20;padding:10px 14px;border-radius:4px;margin:12px 0;font-weight:600}\
.bad{color:#b71c1c;font-weight:700}.muted{color:#666}.stats{display:flex;gap:12px;flex-wrap:wrap}\
.stat{border:1px solid #ddd;border-radius:4px;padding:8px 14px;min-width:110px}.stat b{display:block;font-size:22px}\
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:8px;overflow:auto;max-height:420px;white-space:pre-wrap;word-break:break-all;font-size:12px}\
details{margin:4px 0}summary{cursor:pointer}details[open]>summary{font-weight:600}\
.tag{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:12px}\
.t{white-space:nowrap}.add{background:#e6ffec;display:block}.del{background:#ffebe9;display:block}code{font-size:12px}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:6px 0}dt{color:#555}dd{margin:0}\
code.h{display:inline-block;max-width:13ch;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:bottom}tr.brk td{background:#ffebee}";

/// Escapes `text` for HTML text and attribute values, and shows control characters (but
/// line breaks and tabs) and bidirectional formatting characters as `\u{..}`, so that what
/// a reviewer reads is what the trail holds, in its order.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\t' => out.push(c),
            c if crate::text::is_hidden_control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

fn opt(text: Option<&str>) -> String {
    text.map_or_else(|| "<span class=\"muted\">—</span>".into(), esc)
}

/// A trail time for a table cell: `2026-03-01 12:00:07`, the full value on hover.
fn when(time: &str) -> String {
    let shown = time.get(..19).unwrap_or(time).replacen('T', " ", 1);
    format!(
        "<span class=\"t\" title=\"{}\">{}</span>",
        esc(time),
        esc(&shown)
    )
}

/// Rows past this many are folded into a `<details>` below a table's first rows.
const ROWS_SHOWN: usize = 25;

fn short(hash: &str) -> String {
    esc(hash.get(..12).unwrap_or(hash))
}

fn tag(ending: Ending) -> String {
    format!(
        "<span class=\"tag\" style=\"background:{}\">{}</span>",
        colour(ending),
        ending.label()
    )
}

/// The page.
pub fn render(report: &Report) -> String {
    let mut page = String::with_capacity(256 * 1024);
    let broken = !report.integrity.intact;
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\" />\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\" />\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\" />\
<title>{}file-agent audit report</title><style>{STYLE}</style></head><body>\n",
        if broken { "BROKEN TRAIL · " } else { "" }
    );
    let _ = writeln!(
        page,
        "<h1>Audit report</h1><p class=\"muted\">{} · made {} · lines from {} to {}{}</p>",
        esc(&report.source),
        esc(&report.generated),
        opt(report.summary.first.as_deref()),
        opt(report.summary.last.as_deref()),
        filter_text(report)
    );
    integrity(&mut page, report);
    summary(&mut page, report);
    attention(&mut page, report);
    page.push_str("<section id=\"users\"><h2>Per user</h2>");
    tally(&mut page, &report.users, "user");
    page.push_str("</section>\n<section id=\"tools\"><h2>Per tool</h2>");
    tally(&mut page, &report.tools, "tool");
    page.push_str("</section>\n");
    saved_tools(&mut page, report);
    sessions::section(&mut page, &report.sessions);
    details(&mut page, report, &version_anchors(report));
    page.push_str("</body></html>\n");
    page
}

/// Where each saved tool's version is shown, for the details to link to.
fn version_anchors(report: &Report) -> VersionAnchors<'_> {
    report
        .saved_tools
        .iter()
        .enumerate()
        .flat_map(|(t, tool)| {
            tool.versions.iter().enumerate().map(move |(v, version)| {
                (
                    (tool.name.as_str(), version.version.as_str()),
                    format!("tool-{t}-v{v}"),
                )
            })
        })
        .collect()
}

fn filter_text(report: &Report) -> String {
    let f = &report.filter;
    let parts: Vec<String> = [
        f.since.as_deref().map(|v| format!("since {}", esc(v))),
        f.until.as_deref().map(|v| format!("until {}", esc(v))),
        f.user.as_deref().map(|v| format!("user {}", esc(v))),
        f.tool.as_deref().map(|v| format!("tool {}", esc(v))),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" · only {}", parts.join(", "))
    }
}

fn integrity(page: &mut String, report: &Report) {
    let integrity = &report.integrity;
    page.push_str("<section id=\"integrity\"><h2>Integrity</h2>");
    if integrity.intact {
        let lines: u64 = integrity.chains.iter().map(|c| c.lines).sum();
        let _ = write!(
            page,
            "<div class=\"intact\">Every chain verified: {} chain{}, {lines} lines, no line changed, removed or inserted.</div>",
            integrity.chains.len(),
            if integrity.chains.len() == 1 { "" } else { "s" }
        );
    } else {
        broken_alarm(page, integrity);
    }
    page.push_str("<table><tr><th>chain</th><th>files</th><th>lines</th><th>head (hash of the last line)</th><th>verdict</th></tr>");
    for chain in &integrity.chains {
        let _ = write!(
            page,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td><code>{}</code></td><td>{}</td></tr>",
            esc(&chain.name),
            chain.files.len(),
            chain.lines,
            opt(chain.head.as_deref()),
            chain_verdict(chain),
        );
    }
    page.push_str("</table></section>\n");
}

/// The alarm at the top of a broken trail's integrity section: what cannot be read, where each
/// chain breaks.
fn broken_alarm(page: &mut String, integrity: &Integrity) {
    page.push_str("<div class=\"alarm\" role=\"alert\">THE AUDIT TRAIL IS BROKEN. Lines were changed, removed or inserted, or cannot be read: do not trust what follows without checking it.");
    if let Some(error) = &integrity.unreadable {
        let _ = write!(page, "<p>{}</p>", esc(error));
    }
    for chain in integrity.chains.iter().filter(|c| c.broken.is_some()) {
        let _ = write!(
            page,
            "<p>Chain {}: {}</p>",
            esc(&chain.name),
            opt(chain.broken.as_deref())
        );
    }
    for chain in &integrity.chains {
        if let Some(problem) = chain
            .checkpoint
            .as_ref()
            .and_then(|c| c.contradicted.as_ref())
        {
            let _ = write!(page, "<p>Chain {}: {}</p>", esc(&chain.name), esc(problem));
        }
    }
    page.push_str("</div>");
}

/// A chain's verdict in the integrity table: broken, or intact from where, and its crashes.
fn chain_verdict(chain: &ChainIntegrity) -> String {
    let verdict = match (&chain.broken, &chain.continues_from) {
        (Some(broken), _) => format!("<span class=\"bad\">BROKEN: {}</span>", esc(broken)),
        (None, Some(prev)) if chain.deleted_by_retention.is_some() => format!(
            "intact; continues {} (prev {})",
            esc(chain.deleted_by_retention.as_deref().unwrap_or_default()),
            short(prev)
        ),
        (None, Some(prev)) => format!(
            "intact; continues an earlier file no longer here (prev {}) whose deletion no retention line records",
            short(prev)
        ),
        (None, None) => "intact from its first line".into(),
    };
    let verdict = match &chain.checkpoint {
        None => verdict,
        Some(seen) => format!("{verdict}<br/>{}", checkpoint_words(seen)),
    };
    chain.crash_traces.iter().fold(verdict, |verdict, trace| {
        format!("{verdict}<br/>crash (not tampering): {}", esc(trace))
    })
}

/// What a chain's kept checkpoints say of it: the one its lines match and who witnessed it,
/// or the one they contradict.
fn checkpoint_words(seen: &crate::report::CheckpointMatch) -> String {
    let matched = match &seen.matches {
        Some((size, time)) => format!(
            "matches the signed checkpoint of {size} lines of <code>{}</code> (kept at {}, an unsigned time){}",
            esc(&seen.origin),
            esc(time),
            if seen.witnessed_by.is_empty() {
                ", witnessed by none".to_string()
            } else {
                format!(
                    ", witnessed by {} (cosignature lines, checked by audit verify --witness-key)",
                    esc(&seen.witnessed_by.join(", "))
                )
            }
        ),
        None => format!("matches none of its {} signed checkpoints", seen.kept),
    };
    match &seen.contradicted {
        Some(problem) => format!("{matched}<br/><span class=\"bad\">{}</span>", esc(problem)),
        None => format!("{matched} (signatures: audit verify --key)"),
    }
}

fn summary(page: &mut String, report: &Report) {
    let s = &report.summary;
    let _ = write!(
        page,
        "<section id=\"summary\"><h2>Summary</h2><div class=\"stats\">\
<div class=\"stat\"><b>{}</b>attempts</div><div class=\"stat\"><b>{}</b>calls</div>\
<div class=\"stat\"><b>{}</b>users</div><div class=\"stat\"><b>{}</b>tools</div>\
<div class=\"stat\"><b>{}</b>saved-tool changes</div>\
<div class=\"stat\"><b>{}</b>retention deletions</div></div>",
        s.attempts, s.calls, s.users, s.tools, s.tool_changes, s.retention_lines
    );
    chart_svg(page, &s.chart, &s.bucket);
    page.push_str("<table><tr><th>ending</th><th>attempts</th></tr>");
    for ending in Ending::ALL {
        let _ = write!(
            page,
            "<tr><td>{}</td><td class=\"n\">{}</td></tr>",
            tag(ending),
            s.endings[ending.index()]
        );
    }
    page.push_str("</table><details><summary>Statuses as written</summary><table><tr><th>status</th><th>counted as</th><th>attempts</th></tr>");
    for (status, count) in &s.statuses {
        let _ = write!(
            page,
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"n\">{count}</td></tr>",
            esc(status),
            tag(Ending::of(status, ""))
        );
    }
    page.push_str("</table></details></section>\n");
}

/// Stacked bars of attempts per bucket by ending, with a legend.
fn chart_svg(page: &mut String, chart: &[(String, Counts)], unit: &str) {
    if chart.is_empty() {
        page.push_str("<p class=\"muted\">No attempts in this range.</p>");
        return;
    }
    let plot = Plot::for_chart(chart);
    let (width, height) = (plot.width, plot.height);
    let _ = write!(
        page,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{}\" viewBox=\"0 0 {width} {}\" role=\"img\" aria-label=\"attempts per {unit} by ending\" style=\"max-width:100%;height:auto\">",
        height + 22.0,
        height + 22.0
    );
    plot.axes(page);
    let label_every = (chart.len() / 12).max(1);
    for (i, (bucket, counts)) in chart.iter().enumerate() {
        plot.bars(page, i, bucket, counts, unit);
        if i % label_every == 0 {
            plot.bucket_label(page, i, bucket, unit);
        }
    }
    plot.legend(page);
    let _ = write!(
        page,
        "</svg><p class=\"muted\">Attempts per {unit} (UTC), stacked by ending.</p>"
    );
}

/// The chart's geometry, in SVG units.
struct Plot {
    width: f64,
    height: f64,
    /// Room for the y axis's labels.
    left: f64,
    /// Room for the x axis's labels.
    bottom: f64,
    /// The bars' greatest height.
    plot_h: f64,
    /// The tallest bar's count.
    max: f64,
    /// From one bar to the next.
    step: f64,
    /// A bar's width.
    bar: f64,
}

impl Plot {
    /// The geometry for `chart`, its scale set by the busiest bucket.
    fn for_chart(chart: &[(String, Counts)]) -> Self {
        let (width, height, left, bottom) = (1100.0_f64, 240.0_f64, 44.0_f64, 36.0_f64);
        let max = chart
            .iter()
            .map(|(_, c)| c.iter().sum::<u64>())
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let step = (width - left - 8.0) / chart.len() as f64;
        Self {
            width,
            height,
            left,
            bottom,
            plot_h: height - bottom - 12.0,
            max,
            step,
            bar: (step * 0.8).clamp(1.0, 48.0),
        }
    }

    /// The x axis, and the y axis's two labels (the maximum and 0).
    fn axes(&self, page: &mut String) {
        let Self {
            width,
            left,
            plot_h,
            max,
            ..
        } = *self;
        let _ = write!(
            page,
            "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/><text x=\"{}\" y=\"16\" font-size=\"11\" text-anchor=\"end\">{max}</text><text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">0</text>",
            12.0 + plot_h,
            width - 8.0,
            12.0 + plot_h,
            left - 4.0,
            left - 4.0,
            12.0 + plot_h
        );
    }

    /// Bucket number `i`'s stacked bar, one rectangle per ending, each with its count as a
    /// tooltip.
    fn bars(&self, page: &mut String, i: usize, bucket: &str, counts: &Counts, unit: &str) {
        let x = self.left + i as f64 * self.step;
        let bar = self.bar;
        let mut y = 12.0 + self.plot_h;
        for ending in Ending::ALL {
            let n = counts[ending.index()];
            if n == 0 {
                continue;
            }
            let h = n as f64 / self.max * self.plot_h;
            y -= h;
            let _ = write!(
                page,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bar:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{} {}: {n} {}</title></rect>",
                colour(ending),
                esc(bucket),
                if unit == "hour" { ":00" } else { "" },
                ending.label()
            );
        }
    }

    /// Bucket number `i`'s label under the x axis.
    fn bucket_label(&self, page: &mut String, i: usize, bucket: &str, unit: &str) {
        let x = self.left + i as f64 * self.step;
        let label = if unit == "hour" {
            bucket.get(5..).unwrap_or(bucket).replace('T', " ") + "h"
        } else {
            bucket.get(5..).unwrap_or(bucket).to_string()
        };
        let _ = write!(
            page,
            "<text x=\"{:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            x + self.bar / 2.0,
            self.height - self.bottom + 28.0,
            esc(&label)
        );
    }

    /// Each ending's colour, in a row under the chart.
    fn legend(&self, page: &mut String) {
        let height = self.height;
        for (i, ending) in Ending::ALL.iter().enumerate() {
            let x = self.left + i as f64 * 120.0;
            let _ = write!(
                page,
                "<rect x=\"{x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>",
                height + 6.0,
                colour(*ending),
                x + 14.0,
                height + 15.0,
                ending.label()
            );
        }
    }
}

fn link(anchor: &str, text: &str) -> String {
    if anchor.is_empty() {
        format!(
            "<span class=\"muted\" title=\"not among the attempts shown in full; use file-agent audit show\">{text}</span>"
        )
    } else {
        format!("<a href=\"#{}\">{text}</a>", esc(anchor))
    }
}

fn attention(page: &mut String, report: &Report) {
    let a = &report.attention;
    let _ = write!(
        page,
        "<section id=\"attention\"><h2>Needs attention ({})</h2><p class=\"muted\">Attempts that hit a limit (time, memory, processes, output size) or were refused, saved tools refused at their check, calls refused for their arguments, retry loops that gave up, and sandbox errors (a result stream that did not parse). A call whose Open WebUI credential is missing or refused is a <code>refused_credential</code> line (nothing ran); a request refused for a missing or wrong access token never reaches a tool and is only in the server's log.</p>",
        a.total
    );
    if a.rows.is_empty() {
        page.push_str("<p>Nothing.</p></section>\n");
        return;
    }
    if a.total as usize > a.rows.len() {
        let _ = write!(
            page,
            "<p class=\"muted\">The newest {} of {} are listed.</p>",
            a.rows.len(),
            a.total
        );
    }
    let header = "<table><tr><th>time</th><th>what</th><th>user</th><th>chat</th><th>tool</th><th>call</th><th>detail</th></tr>";
    page.push_str(header);
    for (n, row) in a.rows.iter().enumerate() {
        fold_after_shown(page, n, a.rows.len(), header);
        attention_row(page, row);
    }
    page.push_str("</table>");
    if a.rows.len() > ROWS_SHOWN {
        page.push_str("</details>");
    }
    page.push_str("</section>\n");
}

/// One row of "needs attention", linked to its detail when shown.
fn attention_row(page: &mut String, row: &AttentionRow) {
    let _ = write!(
        page,
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
        when(&row.time),
        esc(&row.what),
        opt(row.user.as_deref()),
        opt(row.chat.as_deref()),
        esc(&row.tool),
        short(&row.call),
        link(&row.anchor, "detail")
    );
}

/// Before row `n` of `total`: past the first [`ROWS_SHOWN`], closes the table and opens a
/// `<details>` holding the rest under the same `header`.
fn fold_after_shown(page: &mut String, n: usize, total: usize, header: &str) {
    if n == ROWS_SHOWN {
        let _ = write!(
            page,
            "</table><details><summary>{} more rows</summary>{header}",
            total - ROWS_SHOWN
        );
    }
}

/// A per-user or per-tool table, the rows past [`ROWS_SHOWN`] folded, and how many were left
/// out.
fn tally(page: &mut String, tallies: &Tallies, what: &str) {
    let proofs = tallies.rows.iter().any(|row| row.proof.is_some());
    let header = tally_header(what, proofs);
    page.push_str(&header);
    for (n, row) in tallies.rows.iter().enumerate() {
        fold_after_shown(page, n, tallies.rows.len(), &header);
        tally_row(page, row, proofs);
    }
    page.push_str("</table>");
    if tallies.rows.len() > ROWS_SHOWN {
        page.push_str("</details>");
    }
    if tallies.omitted > 0 {
        let _ = write!(
            page,
            "<p class=\"muted\">{} more with fewer attempts are left out.</p>",
            tallies.omitted
        );
    }
}

/// The table's opening and header row; `proofs` adds the "named by" column.
fn tally_header(what: &str, proofs: bool) -> String {
    let mut header = format!("<table><tr><th>{what}</th>");
    if proofs {
        header.push_str("<th>named by</th>");
    }
    header.push_str("<th>attempts</th><th>calls</th><th>CPU s</th>");
    for ending in Ending::ALL {
        let _ = write!(header, "<th>{}</th>", tag(ending));
    }
    header.push_str("<th>first</th><th>last</th></tr>");
    header
}

/// One user's or tool's row.
fn tally_row(page: &mut String, row: &Tally, proofs: bool) {
    let _ = write!(page, "<tr><td>{}</td>", esc(&row.name));
    if proofs {
        let _ = write!(
            page,
            "<td>{}</td>",
            esc(row.proof.as_deref().unwrap_or_default())
        );
    }
    let _ = write!(
        page,
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1}</td>",
        row.attempts, row.calls, row.cpu_s
    );
    for ending in Ending::ALL {
        let n = row.endings[ending.index()];
        if n == 0 {
            page.push_str("<td class=\"n muted\">·</td>");
        } else {
            let _ = write!(page, "<td class=\"n\">{n}</td>");
        }
    }
    let _ = write!(
        page,
        "<td>{}</td><td>{}</td></tr>",
        when(&row.first),
        when(&row.last)
    );
}

fn saved_tools(page: &mut String, report: &Report) {
    page.push_str("<section id=\"saved-tools\"><h2>Saved tools</h2>");
    if report.saved_tools.is_empty() {
        page.push_str("<p>None in this range.</p>");
    }
    for (index, tool) in report.saved_tools.iter().enumerate() {
        saved_tool(page, index, tool);
    }
    if report.saved_tools_omitted > 0 {
        let _ = write!(
            page,
            "<p class=\"muted\">{} more tools are left out (the least recently used).</p>",
            report.saved_tools_omitted
        );
    }
    page.push_str("</section>\n");
}

/// One saved tool, folded: its timeline, then each version's code and diff.
fn saved_tool(page: &mut String, index: usize, tool: &SavedToolHistory) {
    let last = tool.timeline.last();
    let _ = write!(
        page,
        "<details class=\"tool\" id=\"tool-{index}\"><summary>my_{} · saved by {} · {} version{} · {} attempts · last: {} {}</summary>",
        esc(&tool.name),
        if tool.owners.is_empty() {
            opt(None)
        } else {
            esc(&tool.owners.join(", "))
        },
        tool.versions.len(),
        if tool.versions.len() == 1 { "" } else { "s" },
        tool.calls,
        last.map_or_else(String::new, |e| esc(&e.action)),
        last.map_or_else(String::new, |e| esc(&e.time)),
    );
    page.push_str(
        "<table><tr><th>time</th><th>action</th><th>version</th><th>user</th><th>ending</th></tr>",
    );
    for event in &tool.timeline {
        timeline_row(page, index, tool, event);
    }
    page.push_str("</table>");
    for (v, version) in tool.versions.iter().enumerate() {
        tool_version(page, index, v, version);
    }
    page.push_str("</details>\n");
}

/// One line of tool number `index`'s timeline, linked to its version and, for an attempt
/// shown in full, to its detail.
fn timeline_row(page: &mut String, index: usize, tool: &SavedToolHistory, event: &ToolEvent) {
    let version = tool
        .versions
        .iter()
        .position(|v| v.version == event.version)
        .map_or_else(
            || short(&event.version),
            |v| {
                format!(
                    "<a href=\"#tool-{index}-v{v}\">{}</a>",
                    short(&event.version)
                )
            },
        );
    let ending = event.ending.map_or_else(String::new, |e| {
        let shown = tag(e);
        match &event.anchor {
            Some(anchor) => link(anchor, &shown),
            None => shown,
        }
    });
    let _ = write!(
        page,
        "<tr><td>{}</td><td>{}</td><td><code>{version}</code></td><td>{}</td><td>{ending}</td></tr>",
        when(&event.time),
        esc(&event.action),
        opt(event.user.as_deref()),
    );
}

/// Version number `v` of tool number `index`, folded: why it cannot be shown, or its code and
/// schema, and its diff from the version before.
fn tool_version(page: &mut String, index: usize, v: usize, version: &ToolVersion) {
    let _ = write!(
        page,
        "<details id=\"tool-{index}-v{v}\"><summary>version {} <code>{}</code>, first seen {}</summary>",
        v + 1,
        esc(&version.version),
        esc(&version.first_seen)
    );
    if let Some(problem) = &version.problem {
        let _ = write!(
            page,
            "<p class=\"bad\">Its code cannot be shown: {}</p>",
            esc(problem)
        );
    }
    if let Some(stored) = &version.stored {
        let _ = write!(
            page,
            "<p>Saved by {} at {}: {}</p><pre class=\"code\">{}</pre><details><summary>schema</summary><pre>{}</pre></details>",
            esc(&stored.saved_by),
            esc(&stored.saved),
            esc(&stored.description),
            esc(&stored.code),
            esc(&stored.schema)
        );
    }
    if let Some(diff) = &version.diff_from_previous {
        diff_html(page, diff);
    }
    page.push_str("</details>");
}

/// A version's diff from the one before, folded.
fn diff_html(page: &mut String, diff: &[Line]) {
    page.push_str("<details><summary>diff from the version before</summary><pre class=\"diff\">");
    for line in diff {
        let _ = match line {
            Line::Same(text) => writeln!(page, "  {}", esc(text)),
            Line::Removed(text) => {
                write!(page, "<span class=\"del\">- {}</span>", esc(text))
            }
            Line::Added(text) => write!(page, "<span class=\"add\">+ {}</span>", esc(text)),
        };
    }
    page.push_str("</pre></details>");
}

/// Anchors of the saved tools' versions, by tool name and version.
type VersionAnchors<'a> = HashMap<(&'a str, &'a str), String>;

fn details(page: &mut String, report: &Report, versions: &VersionAnchors<'_>) {
    let _ = write!(
        page,
        "<section id=\"details\"><h2>Attempts in detail ({} shown)</h2>",
        report.details.len()
    );
    if report.details_omitted > 0 {
        let _ = write!(
            page,
            "<p class=\"muted\">Those needing attention first, then the newest; {} more are in the trail (<code>file-agent audit show FOLDER --user ID --since TIME</code> reads them).</p>",
            report.details_omitted
        );
    }
    for detail in &report.details {
        detail_html(page, detail, versions);
    }
    page.push_str("</section>\n");
}

fn files_table(page: &mut String, title: &str, files: &[crate::audit::FileDigest]) {
    if files.is_empty() {
        let _ = write!(page, "<dt>{title}</dt><dd class=\"muted\">none</dd>");
        return;
    }
    let _ = write!(
        page,
        "<dt>{title}</dt><dd><table><tr><th>name</th><th>bytes</th><th>sha256</th></tr>"
    );
    for file in files {
        let _ = write!(
            page,
            "<tr><td>{}</td><td class=\"n\">{}</td><td><code>{}</code></td></tr>",
            esc(&file.name),
            file.bytes,
            esc(&file.sha256)
        );
    }
    page.push_str("</table></dd>");
}

/// One attempt shown in full, folded: what happened, who asked, where it ran, what went in and
/// came out.
fn detail_html(page: &mut String, detail: &Detail, versions: &VersionAnchors<'_>) {
    let r = &detail.record;
    let _ = write!(
        page,
        "<details id=\"{}\"><summary>{} {} {} · user {} · chat {}{}</summary><dl>",
        esc(&detail.anchor),
        esc(&r.time),
        esc(&r.caller.tool),
        tag(detail.ending),
        opt(r.caller.user.as_deref()),
        opt(r.caller.chat.as_deref()),
        if detail.session_mark.as_ref().is_some_and(|m| m.broken) {
            " · <span class=\"bad\">session chain BROKEN</span>"
        } else {
            ""
        }
    );
    row(page, "status", format!("<code>{}</code>", esc(&r.status)));
    row(
        page,
        "exit code",
        r.exit_code.map_or_else(|| opt(None), |c| c.to_string()),
    );
    row(page, "duration", format!("{} ms", r.duration_ms));
    row(
        page,
        "chain, line",
        format!("{} #{}", esc(&detail.chain), r.seq),
    );
    row(
        page,
        "receipt",
        format!(
            "leaf {} · leaf hash <code>{}</code> (audit prove --index {})",
            detail.leaf_index,
            esc(&detail.leaf_hash),
            detail.leaf_index
        ),
    );
    detail_caller(page, r, versions);
    if let Some(session) = &r.session {
        sessions::detail_rows(page, session, detail.session_mark.as_ref());
    }
    detail_container(page, r);
    files_table(page, "inputs", &r.inputs);
    files_table(page, "outputs", &r.outputs);
    if let Some(error) = &r.error {
        row(page, "error", format!("<pre>{}</pre>", esc(error)));
    }
    detail_code(page, r);
    page.push_str("</dl></details>\n");
}

/// One `name: value` pair of a detail; `value` is markup already.
fn row(page: &mut String, name: &str, value: String) {
    let _ = write!(page, "<dt>{name}</dt><dd>{value}</dd>");
}

/// Who asked for an attempt: the call, the client, who wrote the code and, for a saved tool,
/// which version (linked to its code).
fn detail_caller(page: &mut String, r: &crate::audit::Record, versions: &VersionAnchors<'_>) {
    row(
        page,
        "call",
        format!(
            "<code>{}</code> (request {})",
            esc(&r.caller.call),
            esc(&r.caller.request.to_string())
        ),
    );
    if let Some(trace) = &r.caller.trace_id {
        // The OpenTelemetry trace of the call: what to search the tracing backend for.
        row(page, "trace", format!("<code>{}</code>", esc(trace)));
    }
    row(page, "client", opt(r.caller.client.as_deref()));
    row(
        page,
        "author",
        format!(
            "{}{}",
            esc(&r.author),
            r.model
                .as_deref()
                .map(|m| format!(" ({})", esc(m)))
                .unwrap_or_default()
        ),
    );
    if let Some(mark) = &r.saved_tool {
        row(page, "saved tool", saved_tool_mark(mark, versions));
    }
}

/// Which saved tool an attempt ran, and which version, linked to its code when shown.
fn saved_tool_mark(mark: &crate::audit::ToolMark, versions: &VersionAnchors<'_>) -> String {
    let version = versions
        .get(&(mark.name.as_str(), mark.version.as_str()))
        .map_or_else(
            || format!("<code>{}</code>", short(&mark.version)),
            |anchor| {
                link(
                    anchor,
                    &format!("<code>{}</code> (its code)", short(&mark.version)),
                )
            },
        );
    format!(
        "my_{} {} version {version}",
        esc(&mark.name),
        esc(&mark.action),
    )
}

/// Where an attempt ran: the image, the runtime, the container and its limits.
fn detail_container(page: &mut String, r: &crate::audit::Record) {
    row(
        page,
        "image",
        format!(
            "{} <code>{}</code>",
            esc(&r.image),
            opt(r.image_id.as_deref())
        ),
    );
    row(page, "runtime", esc(&r.runtime));
    row(
        page,
        "container",
        format!(
            "{} <code>{}</code> created {}",
            opt(r.container_kind.as_deref()),
            r.container.as_deref().map_or_else(|| opt(None), short),
            opt(r.container_created.as_deref())
        ),
    );
    row(
        page,
        "limits",
        format!("<code>{}</code>", esc(&r.limits.to_string())),
    );
}

/// The code an attempt ran: its hash, and the code itself or why it is not there.
fn detail_code(page: &mut String, r: &crate::audit::Record) {
    row(
        page,
        "code sha256",
        format!("<code>{}</code>", esc(&r.code_sha256)),
    );
    row(
        page,
        "code",
        r.code.as_deref().map_or_else(
            || {
                let why = if r.code_sha256.is_empty() {
                    "none: nothing ran"
                } else {
                    "not kept (FILE_AGENT_AUDIT_CODE=false)"
                };
                format!("<span class=\"muted\">{why}</span>")
            },
            |code| format!("<pre class=\"code\">{}</pre>", esc(code)),
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_escaped_and_reordering_characters_shown() {
        assert_eq!(
            esc("</pre><img src=x onerror=alert(1)>"),
            "&lt;/pre&gt;&lt;img src=x onerror=alert(1)&gt;"
        );
        assert_eq!(esc("a\"'&b"), "a&quot;&#39;&amp;b");
        assert_eq!(esc("x\u{202e}y\u{1b}z\nw"), "x\\u{202e}y\\u{1b}z\nw");
    }
}
