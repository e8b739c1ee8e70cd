//! The texts the model reads, from `prompts/`: a system prompt per file type and action, the
//! message sent after a failed attempt, and the MCP tool descriptions. They are compiled in
//! with `include_str!`; a file of the same relative name in `FILE_AGENT_PROMPTS_DIR` replaces
//! one at start-up. Placeholders are written `{{name}}`; [`PLACEHOLDERS`] lists which file may
//! use which.

use std::path::Path;

use thiserror::Error;

/// The built-in prompts, by their path under `prompts/`.
const BUILT_IN: [(&str, &str); 26] = [
    (
        "create_excel.md",
        include_str!("../prompts/create_excel.md"),
    ),
    (
        "modify_excel.md",
        include_str!("../prompts/modify_excel.md"),
    ),
    ("create_docx.md", include_str!("../prompts/create_docx.md")),
    ("modify_docx.md", include_str!("../prompts/modify_docx.md")),
    ("create_pptx.md", include_str!("../prompts/create_pptx.md")),
    ("modify_pptx.md", include_str!("../prompts/modify_pptx.md")),
    ("create_pdf.md", include_str!("../prompts/create_pdf.md")),
    ("retry.md", include_str!("../prompts/retry.md")),
    ("analyze.md", include_str!("../prompts/analyze.md")),
    (
        "analysis_step.md",
        include_str!("../prompts/analysis_step.md"),
    ),
    (
        "analysis_fix.md",
        include_str!("../prompts/analysis_fix.md"),
    ),
    (
        "analysis_final.md",
        include_str!("../prompts/analysis_final.md"),
    ),
    ("checker.md", include_str!("../prompts/checker.md")),
    (
        "analysis_redo.md",
        include_str!("../prompts/analysis_redo.md"),
    ),
    ("research.md", include_str!("../prompts/research.md")),
    ("create_tool.md", include_str!("../prompts/create_tool.md")),
    (
        "tools/generate_file.md",
        include_str!("../prompts/tools/generate_file.md"),
    ),
    (
        "tools/modify_file.md",
        include_str!("../prompts/tools/modify_file.md"),
    ),
    (
        "tools/run_python.md",
        include_str!("../prompts/tools/run_python.md"),
    ),
    (
        "tools/analyze_file.md",
        include_str!("../prompts/tools/analyze_file.md"),
    ),
    (
        "tools/data_analysis_tool.md",
        include_str!("../prompts/tools/data_analysis_tool.md"),
    ),
    (
        "tools/conduct_deep_research.md",
        include_str!("../prompts/tools/conduct_deep_research.md"),
    ),
    (
        "tools/create_tool.md",
        include_str!("../prompts/tools/create_tool.md"),
    ),
    (
        "tools/generate_tool.md",
        include_str!("../prompts/tools/generate_tool.md"),
    ),
    (
        "tools/list_tools.md",
        include_str!("../prompts/tools/list_tools.md"),
    ),
    (
        "tools/delete_tool.md",
        include_str!("../prompts/tools/delete_tool.md"),
    ),
];

/// The prompts that list the sandbox's packages (`{{packages}}`): those that make the model
/// write code, and `run_python`'s description, read by the model that writes its code.
const WITH_PACKAGES: [&str; 10] = [
    "create_excel.md",
    "modify_excel.md",
    "create_docx.md",
    "modify_docx.md",
    "create_pptx.md",
    "modify_pptx.md",
    "create_pdf.md",
    "analyze.md",
    "create_tool.md",
    "tools/run_python.md",
];

/// The placeholders each prompt may use (and the built-in uses all of); the others have none.
/// `packages` is replaced once, when the prompts are loaded, by the image's packages.
pub const PLACEHOLDERS: [(&str, &[&str]); 14] = [
    ("create_excel.md", &["packages"]),
    ("modify_excel.md", &["packages"]),
    ("create_docx.md", &["packages"]),
    ("modify_docx.md", &["packages"]),
    ("create_pptx.md", &["packages"]),
    ("modify_pptx.md", &["packages"]),
    ("create_pdf.md", &["packages"]),
    ("analyze.md", &["packages"]),
    ("create_tool.md", &["packages"]),
    ("tools/run_python.md", &["packages"]),
    ("retry.md", &["attempt", "max_attempts", "error"]),
    ("analysis_step.md", &["step", "max_steps", "output"]),
    (
        "analysis_fix.md",
        &["attempt", "max_attempts", "error", "inspection"],
    ),
    ("analysis_redo.md", &["feedback"]),
];

/// An override that cannot be used.
#[derive(Debug, Error)]
#[error(
    "cannot read the prompt override {path}: {reason}; fix or remove it (FILE_AGENT_PROMPTS_DIR)"
)]
pub struct PromptError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

/// Every prompt, resolved.
#[derive(Debug, Clone)]
pub struct Prompts {
    /// System prompt: a new workbook with xlsxwriter.
    pub create_excel: String,
    /// System prompt: change a workbook with openpyxl.
    pub modify_excel: String,
    /// System prompt: a new document with python-docx.
    pub create_docx: String,
    /// System prompt: change a document with python-docx.
    pub modify_docx: String,
    /// System prompt: a new presentation with python-pptx.
    pub create_pptx: String,
    /// System prompt: change a presentation with python-pptx.
    pub modify_pptx: String,
    /// System prompt: a new PDF with reportlab.
    pub create_pdf: String,
    /// The message after a failed attempt (`{{attempt}}`, `{{max_attempts}}`, `{{error}}`).
    pub retry: String,
    /// Description of the `generate_file` tool.
    pub tool_generate_file: String,
    /// Description of the `modify_file` tool.
    pub tool_modify_file: String,
    /// Description of the `run_python` tool.
    pub tool_run_python: String,
    /// System prompt of the analysis steps (`analyze_file`, `data_analysis_tool`).
    pub analyze: String,
    /// The message after a successful analysis step (`{{step}}`, `{{max_steps}}`, `{{output}}`).
    pub analysis_step: String,
    /// The message after a failed analysis attempt (`{{attempt}}`, `{{max_attempts}}`,
    /// `{{error}}`, `{{inspection}}`).
    pub analysis_fix: String,
    /// The message when the step limit is reached: answer now.
    pub analysis_final: String,
    /// System prompt of the checker that reviews an analysis.
    pub checker: String,
    /// The message that asks for a redo with the checker's `{{feedback}}`.
    pub analysis_redo: String,
    /// Instructions sent with a deep-research request.
    pub research: String,
    /// Description of the `analyze_file` tool.
    pub tool_analyze_file: String,
    /// Description of the `data_analysis_tool` tool.
    pub tool_data_analysis: String,
    /// Description of the `conduct_deep_research` tool.
    pub tool_research: String,
    /// System prompt of `generate_tool`: a reusable tool's code and schema.
    pub create_tool: String,
    /// Description of the `create_tool` tool.
    pub tool_create_tool: String,
    /// Description of the `generate_tool` tool.
    pub tool_generate_tool: String,
    /// Description of the `list_tools` tool.
    pub tool_list_tools: String,
    /// Description of the `delete_tool` tool.
    pub tool_delete_tool: String,
}

impl Default for Prompts {
    fn default() -> Self {
        Self::resolve(|_| Ok(None), &base_packages())
            .unwrap_or_else(|_| unreachable!("built-ins never fail"))
    }
}

/// The base set's packages, as the prompts list them when nothing better is known.
fn base_packages() -> String {
    crate::config::packages::Manifest::from_lists(None).prompt_text()
}

impl Prompts {
    /// The built-ins, each replaced by the file of the same name under `dir` if there is one,
    /// listing the base set's packages.
    pub fn load(dir: Option<&Path>) -> Result<Self, PromptError> {
        Self::load_with(dir, &base_packages())
    }

    /// [`Self::load`], with `packages` (the image's manifest's
    /// [`crate::config::packages::Manifest::prompt_text`]) in place of `{{packages}}`.
    pub fn load_with(dir: Option<&Path>, packages: &str) -> Result<Self, PromptError> {
        Self::resolve(
            |name| {
                let Some(dir) = dir else { return Ok(None) };
                let path = dir.join(name);
                match std::fs::read_to_string(&path) {
                    Ok(text) => {
                        check_placeholders(name, &text).map_err(|reason| PromptError {
                            path: path.display().to_string(),
                            reason,
                        })?;
                        Ok(Some(text))
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(error) => Err(PromptError {
                        path: path.display().to_string(),
                        reason: error.to_string(),
                    }),
                }
            },
            packages,
        )
    }

    fn resolve(
        read: impl Fn(&str) -> Result<Option<String>, PromptError>,
        packages: &str,
    ) -> Result<Self, PromptError> {
        let get = |name: &str| -> Result<String, PromptError> {
            let built_in = BUILT_IN
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, text)| text.to_string())
                .unwrap_or_default();
            let text = read(name)?.unwrap_or(built_in).trim().to_string();
            Ok(if WITH_PACKAGES.contains(&name) {
                render(&text, &[("packages", packages)])
            } else {
                text
            })
        };
        Ok(Self {
            create_excel: get("create_excel.md")?,
            modify_excel: get("modify_excel.md")?,
            create_docx: get("create_docx.md")?,
            modify_docx: get("modify_docx.md")?,
            create_pptx: get("create_pptx.md")?,
            modify_pptx: get("modify_pptx.md")?,
            create_pdf: get("create_pdf.md")?,
            retry: get("retry.md")?,
            tool_generate_file: get("tools/generate_file.md")?,
            tool_modify_file: get("tools/modify_file.md")?,
            tool_run_python: get("tools/run_python.md")?,
            analyze: get("analyze.md")?,
            analysis_step: get("analysis_step.md")?,
            analysis_fix: get("analysis_fix.md")?,
            analysis_final: get("analysis_final.md")?,
            checker: get("checker.md")?,
            analysis_redo: get("analysis_redo.md")?,
            research: get("research.md")?,
            tool_analyze_file: get("tools/analyze_file.md")?,
            tool_data_analysis: get("tools/data_analysis_tool.md")?,
            tool_research: get("tools/conduct_deep_research.md")?,
            create_tool: get("create_tool.md")?,
            tool_create_tool: get("tools/create_tool.md")?,
            tool_generate_tool: get("tools/generate_tool.md")?,
            tool_list_tools: get("tools/list_tools.md")?,
            tool_delete_tool: get("tools/delete_tool.md")?,
        })
    }
}

/// Replaces each `{{name}}` by its value; unknown placeholders stay as written.
pub fn render(template: &str, values: &[(&str, &str)]) -> String {
    let mut text = template.to_string();
    for (name, value) in values {
        text = text.replace(&format!("{{{{{name}}}}}"), value);
    }
    text
}

/// The `{{name}}` placeholders in `text`.
fn placeholders(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                found.push(after[..end].to_string());
                rest = &after[end + 2..];
            }
            None => break,
        }
    }
    found
}

/// The placeholders `name` may use.
fn allowed_placeholders(name: &str) -> &'static [&'static str] {
    PLACEHOLDERS
        .iter()
        .find(|(file, _)| *file == name)
        .map_or(&[], |(_, allowed)| allowed)
}

/// A prompt may use only its own placeholders (see [`PLACEHOLDERS`]).
fn check_placeholders(name: &str, text: &str) -> Result<(), String> {
    let allowed = allowed_placeholders(name);
    match placeholders(text)
        .into_iter()
        .find(|p| !allowed.contains(&p.as_str()))
    {
        Some(unknown) => Err(format!(
            "unknown placeholder {{{{{unknown}}}}} (allowed here: {allowed:?})"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_prompts_use_only_known_placeholders_and_use_all_of_theirs() {
        for (name, text) in BUILT_IN {
            check_placeholders(name, text).unwrap();
            assert!(!text.trim().is_empty(), "{name} is empty");
            for placeholder in allowed_placeholders(name) {
                assert!(
                    text.contains(&format!("{{{{{placeholder}}}}}")),
                    "{name} lacks {placeholder}"
                );
            }
        }
        for (file, _) in PLACEHOLDERS {
            assert!(BUILT_IN.iter().any(|(name, _)| *name == file), "{file}");
        }
        for name in WITH_PACKAGES {
            assert!(allowed_placeholders(name).contains(&"packages"), "{name}");
        }
        let retry = Prompts::default().retry;
        let rendered = render(
            &retry,
            &[("attempt", "1"), ("max_attempts", "3"), ("error", "boom")],
        );
        assert!(!rendered.contains("{{"), "{rendered}");
        assert!(rendered.contains("boom"));
    }

    #[test]
    fn the_system_prompts_name_the_libraries_the_issue_asks_for() {
        let prompts = Prompts::default();
        assert!(prompts.create_excel.contains("xlsxwriter"));
        assert!(prompts.modify_excel.contains("openpyxl"));
        assert!(
            prompts.create_docx.contains("python-docx") || prompts.create_docx.contains("docx")
        );
        assert!(prompts.modify_excel.contains("input_file_path"));
        assert!(prompts.create_pptx.contains("python-pptx"));
        assert!(prompts.modify_pptx.contains("input_file_path"));
        assert!(prompts.create_pdf.contains("reportlab"));
    }

    #[test]
    fn the_code_writing_prompts_list_the_images_packages_with_versions() {
        let prompts = Prompts::load_with(
            None,
            "numpy 2.3.5; added by this server's operator: scipy 1.16.3",
        )
        .unwrap();
        for text in [
            &prompts.create_excel,
            &prompts.analyze,
            &prompts.tool_run_python,
            &prompts.create_tool,
        ] {
            assert!(text.contains("scipy 1.16.3"), "{text}");
            assert!(!text.contains("{{"), "{text}");
            assert!(text.contains("pip"), "{text}");
        }
        let default = Prompts::default();
        assert!(default.analyze.contains("pandas 2."), "{}", default.analyze);
    }

    #[test]
    fn a_directory_overrides_by_name_and_bad_placeholders_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tools")).unwrap();
        std::fs::write(dir.path().join("tools/run_python.md"), "Run it.").unwrap();
        let prompts = Prompts::load(Some(dir.path())).unwrap();
        assert_eq!(prompts.tool_run_python, "Run it.");
        assert_eq!(prompts.create_excel, Prompts::default().create_excel);

        std::fs::write(dir.path().join("create_docx.md"), "Hello {{user}}").unwrap();
        let err = Prompts::load(Some(dir.path())).unwrap_err();
        assert!(err.to_string().contains("create_docx.md"), "{err}");
    }
}
