//! Getting the Python out of a model's reply: the fenced block when there is one (the prompts
//! ask for exactly one ```python block), else the whole reply if it looks like code.

/// The code in `reply`, or `None` when there is none.
///
/// Takes the first block fenced as `python`/`py`, else the first fenced block of any kind, else
/// the reply itself when it has no fence at all. An unclosed fence (a reply cut by a token
/// limit) yields what follows it.
pub fn extract_code(reply: &str) -> Option<String> {
    let blocks = fenced_blocks(reply);
    let chosen = blocks
        .iter()
        .find(|(lang, _)| matches!(lang.as_str(), "python" | "py" | "python3"))
        .or_else(|| blocks.first())
        .map(|(_, body)| body.clone());
    let code = match chosen {
        Some(code) => code,
        None if !reply.contains("```") => reply.to_string(),
        None => return None,
    };
    let code = code.trim_matches('\n').to_string();
    (!code.trim().is_empty()).then_some(code)
}

/// The body of the first block fenced as one of `languages` (lower case), if any.
pub fn extract_block(reply: &str, languages: &[&str]) -> Option<String> {
    fenced_blocks(reply)
        .into_iter()
        .find(|(lang, _)| languages.contains(&lang.as_str()))
        .map(|(_, body)| body)
}

/// `(language, body)` of each fenced block, in order.
fn fenced_blocks(reply: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in reply.lines() {
        let trimmed = line.trim_start();
        match current.as_mut() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    current = Some((info.trim().to_ascii_lowercase(), String::new()));
                }
            }
            Some((_, body)) => {
                if trimmed.trim_end() == "```" {
                    if let Some(done) = current.take() {
                        blocks.push(done);
                    }
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    if let Some(unclosed) = current {
        blocks.push(unclosed);
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_python_block_among_others() {
        let reply = "Here:\n```bash\nls\n```\nand\n```python\nprint('hi')\nx = 1\n```\nDone.";
        assert_eq!(extract_code(reply).unwrap(), "print('hi')\nx = 1");
    }

    #[test]
    fn takes_an_unlabelled_block_a_bare_reply_and_an_unclosed_fence() {
        assert_eq!(extract_code("```\nprint(1)\n```").unwrap(), "print(1)");
        assert_eq!(extract_code("print(2)\n").unwrap(), "print(2)");
        assert_eq!(extract_code("```python\nprint(3)\n").unwrap(), "print(3)");
    }

    #[test]
    fn empty_blocks_and_empty_replies_give_nothing() {
        assert_eq!(extract_code("```python\n\n```"), None);
        assert_eq!(extract_code("   "), None);
    }
}
