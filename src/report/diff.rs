//! A line diff between two versions of a saved tool's code, for the report: the longest
//! common subsequence of lines, kept, removed and added. Code is at most 64 KiB, so the
//! table is bounded; past [`MAX_CELLS`] the diff says only that everything changed.

use serde::Serialize;

/// The largest LCS table computed (lines before × lines after).
const MAX_CELLS: usize = 4_000_000;

/// One line of a diff.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", content = "text", rename_all = "snake_case")]
pub enum Line {
    /// In both versions.
    Same(String),
    /// Only in the version before.
    Removed(String),
    /// Only in the version after.
    Added(String),
}

/// The lines of `before` and `after`, each marked same, removed or added.
pub fn lines(before: &str, after: &str) -> Vec<Line> {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    if a.len().saturating_mul(b.len()) > MAX_CELLS {
        return a
            .iter()
            .map(|l| Line::Removed(l.to_string()))
            .chain(b.iter().map(|l| Line::Added(l.to_string())))
            .collect();
    }
    let common = Common::of(&a, &b);
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            out.push(Line::Same(a[i].to_string()));
            (i, j) = (i + 1, j + 1);
        } else if common.at(i + 1, j) >= common.at(i, j + 1) {
            out.push(Line::Removed(a[i].to_string()));
            i += 1;
        } else {
            out.push(Line::Added(b[j].to_string()));
            j += 1;
        }
    }
    out.extend(a[i..].iter().map(|l| Line::Removed(l.to_string())));
    out.extend(b[j..].iter().map(|l| Line::Added(l.to_string())));
    out
}

/// The LCS table of two lists of lines: `at(i, j)` is the LCS length of `a[i..]` and `b[j..]`.
struct Common {
    cells: Vec<u32>,
    width: usize,
}

impl Common {
    /// Fills the table, from the ends backwards.
    fn of(a: &[&str], b: &[&str]) -> Self {
        let width = b.len() + 1;
        let mut table = Self {
            cells: vec![0u32; (a.len() + 1) * width],
            width,
        };
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                table.cells[i * width + j] = if a[i] == b[j] {
                    table.at(i + 1, j + 1) + 1
                } else {
                    table.at(i + 1, j).max(table.at(i, j + 1))
                };
            }
        }
        table
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells[i * self.width + j]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_line_is_removed_then_added_between_the_same_lines() {
        let diff = lines(
            "def run(x):\n    return x\n# end",
            "def run(x):\n    return 2 * x\n# end",
        );
        assert_eq!(
            diff,
            [
                Line::Same("def run(x):".into()),
                Line::Removed("    return x".into()),
                Line::Added("    return 2 * x".into()),
                Line::Same("# end".into()),
            ]
        );
        assert_eq!(lines("", "a"), [Line::Added("a".into())]);
    }
}
