//! Every parser of bytes the server did not write. Each function here takes hostile bytes: a
//! file a user uploaded, a file a model-written script produced, or an answer a script of the
//! image printed inside the sandbox. Read this module first in a security review.
//!
//! The bounds each one keeps (the constants are in the files, named and documented):
//!
//! | module | reads | bounds |
//! |---|---|---|
//! | [`detect`] | an upload's kind (`detect`), an output's structure (`validate`) | the first bytes only, then [`zip`] and [`ooxml`]; PDFs go to [`pdf`] |
//! | [`zip`] | an Office package's zip | 10,000 entries, names of 1 KiB, 512 MiB per entry and 1 GiB in all counted while inflating (never the declared sizes), a ratio of 100 past 16 MiB, CRC-32 and sizes checked, no encryption, no duplicate or overlapping entries, a fixed 64 KiB inflate buffer |
//! | [`ooxml`] | an .xlsx, .docx or .pptx's structure | `[Content_Types].xml`, the relationships and the workbook or presentation part parsed whole up to 16 MiB each, the first 64 KiB of each sheet, slide or document part, no DTD, no entities beyond XML's five |
//! | [`pdf`] | a PDF output | parsed only in a child process capped at 512 MiB plus the file (`RLIMIT_AS`), 20 s of CPU and 30 s of wall time; inside it 64 object streams of 8 MiB inflated, 100,000 page-tree nodes; the server reads 64 KiB of its answer |
//! | [`table`] | an analysis upload's kind | the zip's central directory (the [`zip`] caps) or the first 64 KiB scanned for NUL bytes |
//! | [`change_report`] | the comparison script's JSON | at most the sandbox's stdout cap, serde_json's recursion limit of 128, each value from a file cut to 80 characters and shown as inline code, 5 items of a list, 3,000 characters rendered |
//! | [`door`] | the data folder's files whoever holds it can replace (the audit folder's, the sessions' folders', and the files a reviewer names) | opened only as regular files (no link, FIFO, socket, device or folder; never blocking, never truncating), lines of 16 MiB, whole files within the bound their caller names |
//!
//! What the sandbox itself sends back (the runner's frames, the tar of `/work/out`) is read by
//! `sandbox::stream` and `sandbox::archive`, under the caps SECURITY.md lists; saved tools'
//! schemas are compiled by `tools::dynamic::schema` within theirs.
//!
//! This module depends on nothing above it: not on the tools, the sandbox, storage, audit or
//! the model. Its parsers only answer "what is this" and "does it hold"; they never write a
//! file, open a path they were given or start anything but the PDF check's own child. The one
//! exception is [`door`], which opens the paths `audit`, `sandbox` and `tools` give it, and is
//! here so that all three can: it decides nothing about the bytes it lets through.

pub mod change_report;
pub mod detect;
pub mod door;
pub mod filetype;
pub mod ooxml;
pub mod pdf;
pub mod table;
pub mod zip;
