//! The layering ARCHITECTURE.md states, checked on the source: no module imports a module that
//! imports it back, at the top level of the crate or between siblings. A test only: it reads
//! `src/` as text (`crate::` and `super::` paths outside comments and `mod tests`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `src/tools/files.rs` → `["tools", "files"]`; `src/tools/mod.rs` → `["tools"]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Every `.rs` file below `folder`.
pub(crate) fn rust_files(folder: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every path a file names: `crate::a::b` as `[a, b]`, `super::x` resolved against `module`.
fn referenced(module: &[String], text: &str) -> Vec<Vec<String>> {
    let code: String = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default()
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (start, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
    {
        if code[..start].ends_with(word) || code[..start].ends_with("::") {
            continue;
        }
        let mut base: Vec<String> = Vec::new();
        let mut rest = &code[start..];
        if let Some(after) = rest.strip_prefix("crate::") {
            rest = after;
        } else {
            base = module.to_vec();
            while let Some(after) = rest.strip_prefix("super::") {
                base.pop();
                rest = after;
            }
        }
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            group
                .split('}')
                .next()
                .unwrap_or_default()
                .split(',')
                .collect()
        } else {
            vec![rest]
        };
        for name in names {
            let first: String = name.trim().chars().take_while(|c| word(*c)).collect();
            if !first.is_empty() {
                let mut path = base.clone();
                path.push(first);
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let is_module = |path: &[String]| {
        let joined = src.join(path.join("/"));
        joined.with_extension("rs").is_file() || joined.is_dir()
    };
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in &files {
        let module = module_of(&src, file);
        for target in referenced(&module, &std::fs::read_to_string(file).unwrap()) {
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common >= module.len() || common >= target.len() {
                continue; // a module's own descendant or ancestor
            }
            let (from, to) = (module[..=common].to_vec(), target[..=common].to_vec());
            if is_module(&to) {
                edges.entry(from).or_default().insert(to);
            }
        }
    }
    // A cycle is a path back to where it started.
    fn reaches(
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        from: &Vec<String>,
        goal: &Vec<String>,
        seen: &mut BTreeSet<Vec<String>>,
        path: &mut Vec<String>,
    ) -> bool {
        for next in edges.get(from).into_iter().flatten() {
            path.push(next.join("::"));
            if next == goal || (seen.insert(next.clone()) && reaches(edges, next, goal, seen, path))
            {
                return true;
            }
            path.pop();
        }
        false
    }
    for module in edges.keys() {
        let mut path = vec![module.join("::")];
        let cycle = reaches(&edges, module, module, &mut BTreeSet::new(), &mut path);
        assert!(!cycle, "an import cycle: {}", path.join(" -> "));
    }
    // The check sees imports at all: tools imports sandbox.
    assert!(edges[&vec!["tools".to_string()]].contains(&vec!["sandbox".to_string()]));
}
