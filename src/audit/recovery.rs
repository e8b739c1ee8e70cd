//! The end of a chain file. A server writes each line with its newline in one append and
//! syncs it before the call's answer goes out, so the newline is the mark of a line that was
//! written whole. At start-up the server continues its chain from the last whole line, read
//! back to the newline before it whatever its length ([`last_line`]).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Blocks in which a file is read backwards, looking for a newline.
const BLOCK: u64 = 64 * 1024;

/// The offset of the last `\n` before `end` in `file`, reading backwards.
fn newline_before(file: &File, end: u64) -> std::io::Result<Option<u64>> {
    let mut block = vec![0; BLOCK as usize];
    let mut end = end;
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let part = &mut block[..(end - start) as usize];
        file.read_exact_at(part, start)?;
        if let Some(at) = part.iter().rposition(|&b| b == b'\n') {
            return Ok(Some(start + at as u64));
        }
        end = start;
    }
    Ok(None)
}

/// Where the whole lines of `file` end: just past its last newline (0 when it has none).
/// Anything after that is an unfinished line.
fn whole_lines_end(file: &File) -> std::io::Result<u64> {
    let size = file.metadata()?.len();
    Ok(newline_before(file, size)?.map_or(0, |at| at + 1))
}

/// The last whole, non-blank line of `file` (without its newline), read back to the newline
/// before it however long it is; an unfinished tail is not a line.
pub fn last_line(file: &File) -> std::io::Result<Option<Vec<u8>>> {
    let mut end = whole_lines_end(file)?;
    // `end` is just past a newline; the line is what lies between the one before and it.
    while end > 0 {
        let newline = end - 1;
        let start = newline_before(file, newline)?.map_or(0, |at| at + 1);
        let mut line = vec![0; (newline - start) as usize];
        file.read_exact_at(&mut line, start)?;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if !line.iter().all(u8::is_ascii_whitespace) {
            return Ok(Some(line));
        }
        end = start;
    }
    Ok(None)
}

/// Syncs the folder holding `path`, so that a file created, renamed or cut in it stays so
/// after a crash of the machine, not only of the process. A file system that cannot sync a
/// folder at all (some answer EINVAL) is taken at its word, as PostgreSQL does.
pub fn sync_folder(path: &Path) -> std::io::Result<()> {
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    match File::open(folder.unwrap_or_else(|| Path::new(".")))?.sync_all() {
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported
            ) =>
        {
            Ok(())
        }
        synced => synced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf, File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        std::fs::write(&path, bytes).unwrap();
        let file = File::options().read(true).append(true).open(&path).unwrap();
        (dir, path, file)
    }

    #[test]
    fn the_last_line_is_read_whole_however_long() {
        let long = "x".repeat(3 * BLOCK as usize + 17);
        let (_dir, _, file) = file_with(format!("first\n{long}\n").as_bytes());
        assert_eq!(last_line(&file).unwrap().unwrap(), long.as_bytes());
        let (_dir, _, file) = file_with(format!("{long}\n\n  \n").as_bytes());
        assert_eq!(last_line(&file).unwrap().unwrap(), long.as_bytes());
        let (_dir, _, file) = file_with(format!("first\r\n{long}").as_bytes());
        assert_eq!(last_line(&file).unwrap().unwrap(), b"first");
        let (_dir, _, file) = file_with(long.as_bytes());
        assert_eq!(last_line(&file).unwrap(), None);
        let (_dir, _, file) = file_with(b"");
        assert_eq!(last_line(&file).unwrap(), None);
    }
}
