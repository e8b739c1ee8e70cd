//! A mutation fuzzer for the parsers that read untrusted bytes in the server (`src/untrusted/`),
//! on stable Rust and with no crate beyond file-agent's own: the detection by bytes
//! (`detect::detect`), the zip reader (`zip`), the OOXML check (`ooxml::check`) and the PDF
//! check (`pdf::Checker`, which runs `pdf::check` in a memory-capped child: here this program).
//!
//! `cargo run --example fuzz -- <target|all> [--seconds N] [--seed S]`
//!
//! Each target starts from the seed files in `fuzz/corpus/<target>/` and runs them, then
//! mutations of them (bit flips, interesting integers over sizes and offsets, cut, duplicated
//! or spliced ranges; for the ooxml target half the inputs are a seed's parts with markup
//! mutated, zipped again with true checksums so that the XML is reached), until its time is
//! up. The process caps its own address space at the
//! PDF check's bound (`pdf::CHECK_MEMORY` plus the largest input), the bound SECURITY.md
//! states, so an input that needs more aborts the run (the PDF's child caps itself the
//! same way, and its running out is the check's refusal, not a finding). Before each run the input is written
//! to `fuzz/artifacts/<target>/current`, so whatever stops the process (a panic, an abort,
//! running out of memory) leaves it behind; a panic is also saved as `crash-<hash>`, and an
//! input slower than [`SLOW`] as `slow-<hash>`. Exit status 1 when anything was found.
//!
//! It is not coverage-guided (that needs nightly and libFuzzer): it finds panics, aborts,
//! runaway memory and slow inputs near the seeds, not deep paths.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use file_agent::untrusted::filetype::FileType;
use file_agent::untrusted::zip::{Archive, ZipLimits};
use file_agent::untrusted::{detect, ooxml, pdf};

/// An input slower than this is reported.
const SLOW: Duration = Duration::from_secs(2);
/// Inputs grow no larger than this.
const MAX_INPUT: usize = 1024 * 1024;
/// The targets, by name.
const TARGETS: [&str; 4] = ["filetype", "zip", "ooxml", "pdf"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The pdf target checks through the server's own capped child: this program, run again.
    if let [command, memory] = args.as_slice()
        && command == pdf::CHILD_COMMAND
    {
        return pdf::child_main(memory);
    }
    let value = |flag: &str| {
        args.iter()
            .position(|arg| arg == flag)
            .and_then(|at| args.get(at + 1))
            .and_then(|value| value.parse::<u64>().ok())
    };
    let seconds = value("--seconds").unwrap_or(60);
    let seed = value("--seed").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |elapsed| elapsed.as_nanos() as u64)
    });
    let wanted = args.first().map(String::as_str).unwrap_or("all");
    let targets: Vec<&str> = match wanted {
        "all" => TARGETS.to_vec(),
        name if TARGETS.contains(&name) => vec![name],
        other => {
            eprintln!("fuzz: unknown target {other:?}; one of {TARGETS:?} or all");
            return ExitCode::from(2);
        }
    };
    let memory = pdf::CHECK_MEMORY + MAX_INPUT as u64;
    if let Err(error) =
        nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_AS, memory, memory)
    {
        eprintln!("fuzz: cannot cap the address space: {error}");
        return ExitCode::from(2);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut found = 0;
    for target in targets {
        found += fuzz(&root, target, Duration::from_secs(seconds), seed);
    }
    if found == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs one input through `target`. Errors are the expected answer to bad bytes; only a
/// panic, an abort or the time it takes count.
fn run(target: &str, bytes: &[u8]) {
    match target {
        "filetype" => {
            let _ = detect::detect(bytes, "input.xlsx", None);
            let _ = detect::detect(bytes, "input.doc", Some("application/msword"));
        }
        "zip" => {
            if let Ok(archive) = Archive::open(bytes, ZipLimits::OFFICE) {
                let _ = archive.verify(|_| true, 64 * 1024);
                let names: Vec<String> = archive.names().take(8).map(str::to_string).collect();
                for name in names {
                    let _ = archive.read(&name, 16 * 1024 * 1024);
                }
            }
        }
        "ooxml" => {
            for kind in [FileType::Excel, FileType::Docx, FileType::Pptx] {
                let _ = ooxml::check(bytes, kind);
            }
        }
        _ => {
            // As the server checks a PDF: in a child capped at the bound SECURITY.md states,
            // where running out of memory or time is a refusal of the file. Only a panic of
            // the reader is a finding.
            let verdict = PDF_RUNTIME.with(|runtime| runtime.block_on(PDF_CHECKER.check(bytes)));
            if matches!(verdict, Ok(Err(pdf::PdfError::ReaderFailed)) | Err(_)) {
                panic!("the PDF check failed: {verdict:?}");
            }
        }
    }
}

thread_local! {
    /// The runtime the pdf target's checks run on.
    static PDF_RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the PDF checks");
}

/// The server's PDF checker, with this program as its child.
static PDF_CHECKER: std::sync::LazyLock<pdf::Checker> =
    std::sync::LazyLock::new(|| pdf::Checker::this_program(1));

/// Fuzzes `target` for `time`; returns how many inputs it found (crashes and slow ones).
fn fuzz(root: &Path, target: &str, time: Duration, seed: u64) -> usize {
    let corpus = read_corpus(&root.join("corpus").join(target));
    if corpus.is_empty() {
        eprintln!("fuzz {target}: no seeds in fuzz/corpus/{target}/");
        return 1;
    }
    let artifacts = root.join("artifacts").join(target);
    let _ = std::fs::create_dir_all(&artifacts);
    let current = artifacts.join("current");
    // Kept open: rewriting it in place costs a fraction of creating it for every run.
    let Ok(current_file) = std::fs::File::create(&current) else {
        eprintln!("fuzz {target}: cannot write {}", current.display());
        return 1;
    };
    let mut random = Random(seed | 1);
    let started = Instant::now();
    let (mut runs, mut found) = (0u64, 0usize);
    // The seeds' parts, for the ooxml target's repacked inputs.
    let packages: Vec<Vec<(String, Vec<u8>)>> = match target {
        "ooxml" => corpus.iter().filter_map(|seed| parts_of(seed)).collect(),
        _ => Vec::new(),
    };
    // Zipped again unchanged, every seed package must still pass: else repacking is broken
    // and the repacked inputs would never reach the markup.
    for package in &packages {
        let repacked = stored_zip(package);
        let kinds = [FileType::Excel, FileType::Docx, FileType::Pptx];
        if !kinds
            .iter()
            .any(|&kind| ooxml::check(&repacked, kind).is_ok())
        {
            eprintln!("fuzz {target}: a seed zipped again no longer passes; fix stored_zip");
            return 1;
        }
    }
    // Every seed as it is first, then mutations until the time is up.
    let mut queue: Vec<Vec<u8>> = corpus.clone();
    while started.elapsed() < time {
        let input = queue.pop().unwrap_or_else(|| {
            if !packages.is_empty() && random.below(2) == 0 {
                let package = &packages[random.below(packages.len())];
                return repacked(package, &mut random);
            }
            let base = &corpus[random.below(corpus.len())];
            let other = &corpus[random.below(corpus.len())];
            mutate(base, other, &mut random)
        });
        let _ = current_file
            .set_len(0)
            .and_then(|()| current_file.write_all_at(&input, 0));
        let began = Instant::now();
        let outcome = std::panic::catch_unwind(|| run(target, &input));
        let took = began.elapsed();
        runs += 1;
        let kind = match (outcome.is_err(), took > SLOW) {
            (true, _) => Some("crash"),
            (false, true) => Some("slow"),
            _ => None,
        };
        if let Some(kind) = kind {
            found += 1;
            let path = artifacts.join(format!("{kind}-{:016x}", hash(&input)));
            let _ = std::fs::write(&path, &input);
            eprintln!(
                "fuzz {target}: {kind} ({took:?}) on {} bytes, saved as {}",
                input.len(),
                path.display()
            );
        }
    }
    drop(current_file);
    let _ = std::fs::remove_file(&current);
    let rate = runs as f64 / started.elapsed().as_secs_f64();
    eprintln!(
        "fuzz {target}: {runs} runs in {:.0?} ({rate:.0}/s, seed {seed}), {found} found",
        started.elapsed()
    );
    let _ = std::io::stderr().flush();
    found
}

/// The seed files of a folder, sorted by name.
fn read_corpus(folder: &Path) -> Vec<Vec<u8>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(folder)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.sort();
    paths
        .iter()
        .filter_map(|path| std::fs::read(path).ok())
        .collect()
}

/// The parts of a seed package, inflated (`None` if it is not a readable zip).
fn parts_of(seed: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let archive = Archive::open(seed, ZipLimits::OFFICE).ok()?;
    let names: Vec<String> = archive.names().map(str::to_string).collect();
    names
        .into_iter()
        .map(|name| {
            archive
                .read(&name, 1024 * 1024)
                .ok()
                .map(|bytes| (name, bytes))
        })
        .collect()
}

/// Markup that reaches the OOXML check's paths: elements, relationships, a DTD, entities.
const XML_PIECES: [&str; 12] = [
    "<",
    "/>",
    "</x>",
    "<!DOCTYPE x [<!ENTITY a \"b\">]>",
    "&a;",
    "&#0;",
    " xmlns:r=\"r\"",
    " r:id=\"rId1\"",
    " Target=\"../../../x.xml\"",
    " Target=\"/xl/worksheets/sheet1.xml\"",
    "<Override PartName=\"/x\" ContentType=\"y\"/>",
    "<sheet name=\"S\" sheetId=\"2\" r:id=\"rId9\"/>",
];

/// A package of `parts` with one part's markup mutated (or a part renamed, dropped or
/// doubled), zipped again with true CRCs and sizes, so the check gets past the zip reader.
fn repacked(parts: &[(String, Vec<u8>)], random: &mut Random) -> Vec<u8> {
    let mut parts = parts.to_vec();
    let at = random.below(parts.len());
    match random.below(6) {
        0 => parts[at]
            .0
            .push_str(["x", "/", ".xml", "\\.."][random.below(4)]),
        1 => {
            parts.remove(at);
        }
        2 => {
            let copy = parts[at].clone();
            parts.push(copy);
        }
        _ => {
            for _ in 0..=random.below(4) {
                let content = &mut parts[at].1;
                let position = random.below(content.len() + 1);
                let piece = XML_PIECES[random.below(XML_PIECES.len())];
                content.splice(position..position, piece.bytes());
            }
            let other = parts[random.below(parts.len())].1.clone();
            parts[at].1 = mutate(&parts[at].1, &other, random);
        }
    }
    stored_zip(&parts)
}

/// A zip of `parts`, stored, with true CRCs and sizes.
fn stored_zip(parts: &[(String, Vec<u8>)]) -> Vec<u8> {
    let (mut bytes, mut central) = (Vec::new(), Vec::new());
    for (name, content) in parts {
        let offset = bytes.len() as u32;
        let mut fields = Vec::new();
        fields.extend_from_slice(&20u16.to_le_bytes());
        fields.extend_from_slice(&0u32.to_le_bytes()); // flags, method (stored)
        fields.extend_from_slice(&0u16.to_le_bytes());
        fields.extend_from_slice(&0x21u16.to_le_bytes());
        fields.extend_from_slice(&crc32fast::hash(content).to_le_bytes());
        fields.extend_from_slice(&(content.len() as u32).to_le_bytes());
        fields.extend_from_slice(&(content.len() as u32).to_le_bytes());
        fields.extend_from_slice(&(name.len() as u16).to_le_bytes());
        fields.extend_from_slice(&0u16.to_le_bytes());
        bytes.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        bytes.extend_from_slice(&fields);
        bytes.extend_from_slice(name.as_bytes());
        bytes.extend_from_slice(content);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes());
        central.extend_from_slice(&fields);
        central.extend_from_slice(&[0; 10]); // comment, disk, attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let (directory, count) = (bytes.len() as u32, parts.len() as u16);
    bytes.extend_from_slice(&central);
    bytes.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&count.to_le_bytes());
    bytes.extend_from_slice(&count.to_le_bytes());
    bytes.extend_from_slice(&(central.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&directory.to_le_bytes());
    bytes.extend_from_slice(&0u16.to_le_bytes());
    bytes
}

/// One to eight mutations of `base`, sometimes spliced with `other`.
fn mutate(base: &[u8], other: &[u8], random: &mut Random) -> Vec<u8> {
    let mut bytes = base.to_vec();
    for _ in 0..=random.below(8) {
        let len = bytes.len();
        match random.below(9) {
            0 if len > 0 => {
                let at = random.below(len);
                bytes[at] ^= 1 << random.below(8);
            }
            1 if len > 0 => {
                let at = random.below(len);
                bytes[at] = [0, 0xff, 0x7f, 0x80, b'/', b'<', b'['][random.below(7)];
            }
            // An interesting integer over what may be a size, offset or count.
            2 if len >= 4 => {
                let at = random.below(len - 3);
                let values: [u32; 8] = [
                    0,
                    1,
                    0xffff,
                    0xffff_ffff,
                    0x7fff_ffff,
                    len as u32,
                    (len as u32).wrapping_sub(1),
                    random.next() as u32,
                ];
                let value = values[random.below(values.len())];
                if random.below(2) == 0 {
                    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
                } else {
                    bytes[at..at + 2].copy_from_slice(&(value as u16).to_le_bytes());
                }
            }
            // Cut a range.
            3 if len > 1 => {
                let at = random.below(len);
                let cut = random.below((len - at).min(256)) + 1;
                bytes.drain(at..(at + cut).min(len));
            }
            // Duplicate a range in place.
            4 if len > 1 && len < MAX_INPUT / 2 => {
                let at = random.below(len);
                let size = random.below((len - at).min(4096)) + 1;
                let piece = bytes[at..at + size].to_vec();
                let times = 1 + random.below(16);
                for _ in 0..times {
                    bytes.splice(at..at, piece.iter().copied());
                }
            }
            // Splice in a range of another seed.
            5 if !other.is_empty() => {
                let from = random.below(other.len());
                let size = random.below((other.len() - from).min(1024)) + 1;
                let at = random.below(len + 1);
                bytes.splice(at..at, other[from..from + size].iter().copied());
            }
            // Decimal numbers (PDF offsets, counts, lengths) made large or odd.
            6 => {
                if let Some(at) = (0..len)
                    .map(|_| random.below(len.max(1)))
                    .find(|&at| bytes.get(at).is_some_and(u8::is_ascii_digit))
                {
                    let number = ["0", "99999999999", "4294967296", "-1", "1e9", "2147483647"]
                        [random.below(6)];
                    bytes.splice(at..at + 1, number.bytes());
                }
            }
            // Truncate.
            7 if len > 1 => bytes.truncate(random.below(len)),
            _ => {
                let at = random.below(len + 1);
                bytes.insert(at, random.next() as u8);
            }
        }
        bytes.truncate(MAX_INPUT);
    }
    bytes
}

/// FNV-1a, to name saved inputs.
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// xorshift64*: reproducible from `--seed`.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `bound` (0 when `bound` is 0).
    fn below(&mut self, bound: usize) -> usize {
        if bound == 0 {
            0
        } else {
            (self.next() % bound as u64) as usize
        }
    }
}
