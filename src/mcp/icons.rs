//! Each tool's icon for a client's tool picker: a small SVG, inline as a
//! `data:image/svg+xml;base64,...` URI (so a client fetches nothing from the server), with its
//! MIME type and `sizes: ["any"]` as the MCP spec asks of a scalable icon. Saved tools share
//! one. The drawings are 24×24 line icons in `currentColor`, so they follow the client's theme.

use base64::Engine;
use rmcp::model::Icon;

use crate::tools::catalog::Tool;

/// The MIME type of every icon.
pub const MIME_TYPE: &str = "image/svg+xml";

/// A 24×24 line drawing, `paths` being the shapes inside the `<svg>`.
macro_rules! svg {
    ($paths:literal) => {
        concat!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="24" height="24" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round">"#,
            $paths,
            "</svg>"
        )
    };
}

/// A page with a plus: a new file.
const NEW_FILE: &str = svg!(
    r#"<path d="M14 2H6a2 2 0 0 0-2 2v16a2 2 0 0 0 2 2h12a2 2 0 0 0 2-2V8z"/><path d="M14 2v6h6"/><path d="M12 12v6M9 15h6"/>"#
);
/// A page with a pencil: a changed copy.
const EDIT_FILE: &str = svg!(
    r#"<path d="M14 2H6a2 2 0 0 0-2 2v16a2 2 0 0 0 2 2h5"/><path d="M14 2v6h6"/><path d="M19.5 12.5l2 2-6.5 6.5H13v-2z"/>"#
);
/// A terminal prompt: code run.
const PYTHON: &str =
    svg!(r#"<rect x="2" y="4" width="20" height="16" rx="2"/><path d="M6 9l3 3-3 3M12 15h6"/>"#);
/// A bar chart with a check: a checked analysis.
const ANALYSIS: &str =
    svg!(r#"<path d="M3 3v18h18"/><path d="M8 17v-5M12 17V8M16 17v-3"/><path d="M15 6l2 2 4-4"/>"#);
/// A table behind a link: an analysis of a document URL.
const DATA_URL: &str = svg!(
    r#"<rect x="3" y="3" width="18" height="14" rx="1"/><path d="M3 8h18M9 8v9"/><path d="M10 21h4M12 17v4"/>"#
);
/// A magnifier over a globe: web research.
const RESEARCH: &str = svg!(
    r#"<circle cx="10" cy="10" r="7"/><path d="M3 10h14M10 3c2 2 3 4.5 3 7s-1 5-3 7c-2-2-3-4.5-3-7s1-5 3-7z"/><path d="M15 15l6 6"/>"#
);
/// A wrench with a plus: a tool made.
const NEW_TOOL: &str = svg!(
    r#"<path d="M14.7 6.3a4 4 0 0 0-5.4 5.4L3 18l3 3 6.3-6.3a4 4 0 0 0 5.4-5.4l-2.5 2.5-2.4-.6-.6-2.4z"/><path d="M19 15v6M16 18h6"/>"#
);
/// A wrench with a spark: a tool the model writes.
const GENERATED_TOOL: &str = svg!(
    r#"<path d="M14.7 6.3a4 4 0 0 0-5.4 5.4L3 18l3 3 6.3-6.3a4 4 0 0 0 5.4-5.4l-2.5 2.5-2.4-.6-.6-2.4z"/><path d="M19 14l1 2 2 1-2 1-1 2-1-2-2-1 2-1z"/>"#
);
/// A list: the saved tools.
const LIST: &str = svg!(
    r#"<path d="M9 6h12M9 12h12M9 18h12"/><circle cx="4" cy="6" r="1"/><circle cx="4" cy="12" r="1"/><circle cx="4" cy="18" r="1"/>"#
);
/// A bin: a tool deleted.
const DELETE: &str =
    svg!(r#"<path d="M3 6h18M8 6V4h8v2M6 6l1 15h10l1-15"/><path d="M10 11v6M14 11v6"/>"#);
/// A wrench: a saved tool.
const SAVED_TOOL: &str = svg!(
    r#"<path d="M14.7 6.3a4 4 0 0 0-5.4 5.4L3 18l3 3 6.3-6.3a4 4 0 0 0 5.4-5.4l-2.5 2.5-2.4-.6-.6-2.4z"/>"#
);

/// The SVG drawing of `tool`.
fn svg_of(tool: Tool) -> &'static str {
    match tool {
        Tool::GenerateFile => NEW_FILE,
        Tool::ModifyFile => EDIT_FILE,
        Tool::RunPython => PYTHON,
        Tool::AnalyzeFile => ANALYSIS,
        Tool::DataAnalysis => DATA_URL,
        Tool::DeepResearch => RESEARCH,
        Tool::CreateTool => NEW_TOOL,
        Tool::GenerateTool => GENERATED_TOOL,
        Tool::ListTools => LIST,
        Tool::DeleteTool => DELETE,
    }
}

/// The icons of `tool`, as `tools/list` gives them.
pub fn of(tool: Tool) -> Vec<Icon> {
    vec![icon(svg_of(tool))]
}

/// The icons of every saved tool.
pub fn of_saved_tool() -> Vec<Icon> {
    vec![icon(SAVED_TOOL)]
}

/// `svg` as an icon with an inline data URI.
fn icon(svg: &str) -> Icon {
    let encoded = base64::engine::general_purpose::STANDARD.encode(svg);
    Icon::new(format!("data:{MIME_TYPE};base64,{encoded}"))
        .with_mime_type(MIME_TYPE)
        .with_sizes(vec!["any".to_string()])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SVG inside an icon's data URI, checked to be well-formed XML whose root is an
    /// `<svg>` in the SVG namespace.
    pub(crate) fn decoded_svg(icon: &Icon) -> String {
        assert_eq!(icon.mime_type.as_deref(), Some(MIME_TYPE));
        assert_eq!(icon.sizes.as_deref(), Some(&["any".to_string()][..]));
        let encoded = icon
            .src
            .strip_prefix("data:image/svg+xml;base64,")
            .expect("a base64 SVG data URI");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        let svg = String::from_utf8(bytes).unwrap();
        let mut reader = quick_xml::Reader::from_str(&svg);
        let mut depth = 0i32;
        let mut root = None;
        loop {
            match reader.read_event().unwrap() {
                quick_xml::events::Event::Start(start) => {
                    if depth == 0 {
                        root = Some(start.to_owned());
                    }
                    depth += 1;
                }
                quick_xml::events::Event::End(_) => depth -= 1,
                quick_xml::events::Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!(depth, 0, "{svg}");
        let root = root.expect("a root element");
        assert_eq!(root.name().as_ref(), "svg");
        let namespace = root
            .try_get_attribute("xmlns")
            .unwrap()
            .expect("an xmlns")
            .value;
        assert_eq!(&*namespace, "http://www.w3.org/2000/svg");
        svg
    }

    #[test]
    fn every_tool_has_one_small_valid_svg_icon_of_its_own() {
        let mut seen = std::collections::HashSet::new();
        for tool in Tool::ALL {
            let icons = of(tool);
            assert_eq!(icons.len(), 1, "{}", tool.name());
            let svg = decoded_svg(&icons[0]);
            assert!(svg.len() < 1024, "{}: {} bytes", tool.name(), svg.len());
            assert!(seen.insert(svg), "{} shares its icon", tool.name());
        }
        decoded_svg(&of_saved_tool()[0]);
    }
}
