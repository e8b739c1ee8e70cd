//! The one way the server reads a zip it did not write (an .xlsx, .docx or .pptx a script
//! produced, or one a user uploaded): a strict central-directory reader and a bounded inflater.
//!
//! A zip is a compression bomb waiting to happen: 3 MB can inflate to gigabytes, the sizes
//! it declares can lie, entries can overlap, and the entry count can be huge. So this reader:
//! - caps the number of entries and the length of their names before keeping anything;
//! - never trusts a declared inflated size: bytes are counted while they are inflated, per
//!   entry and in all, and inflating stops at the cap ([`ZipLimits`]);
//! - refuses an entry that inflates to more than [`MAX_RATIO`] times its compressed size once
//!   it is past [`RATIO_CHECKED_FROM_BYTES`] (no real Office part comes close: real sheets
//!   compress about 15:1);
//! - checks every entry's CRC-32, and that its inflated size matches the declared one;
//! - refuses encryption, compression methods other than stored and deflate, two entries
//!   with the same name (ASCII case ignored, as Office part names are), and entries whose
//!   bytes overlap (a non-recursive zip bomb's way of inflating one kernel many times);
//! - keeps in memory only what a caller asks for, up to a cap it names: everything else is
//!   inflated through a fixed buffer and dropped.
//!
//! It does not write zips, follow paths on disk, or understand what is inside (see
//! `ooxml` for that).

use std::collections::HashMap;

use flate2::{Decompress, FlushDecompress, Status};
use thiserror::Error;

use crate::config::MIB;

/// Entries a zip may have.
pub const MAX_ENTRIES: usize = 10_000;
/// Bytes of one entry's name.
pub const MAX_NAME_BYTES: usize = 1024;
/// Bytes one entry may inflate to.
pub const MAX_ENTRY_INFLATED_BYTES: u64 = 512 * MIB;
/// Bytes all entries together may inflate to.
pub const MAX_TOTAL_INFLATED_BYTES: u64 = 1024 * MIB;
/// The largest inflated-to-compressed ratio of an entry past [`RATIO_CHECKED_FROM_BYTES`].
pub const MAX_RATIO: u64 = 100;
/// Inflated bytes of an entry below which its ratio is not checked (a small, very regular part
/// such as an empty style sheet may compress far better than a sheet of data).
pub const RATIO_CHECKED_FROM_BYTES: u64 = 16 * MIB;
/// The buffer entries are inflated through.
const INFLATE_BUFFER_BYTES: usize = 64 * 1024;

/// Signatures of the zip records read here.
const LOCAL_HEADER: u32 = 0x0403_4b50;
const CENTRAL_HEADER: u32 = 0x0201_4b50;
const END_OF_DIRECTORY: u32 = 0x0605_4b50;
const ZIP64_END_LOCATOR: u32 = 0x0706_4b50;
const ZIP64_END_OF_DIRECTORY: u32 = 0x0606_4b50;
/// Fixed sizes of those records.
const LOCAL_HEADER_LEN: usize = 30;
const CENTRAL_HEADER_LEN: usize = 46;
const END_OF_DIRECTORY_LEN: usize = 22;
const ZIP64_END_LOCATOR_LEN: usize = 20;
const ZIP64_END_OF_DIRECTORY_LEN: usize = 56;
/// The longest comment after the end-of-directory record.
const MAX_COMMENT_LEN: usize = u16::MAX as usize;
/// The extra field that carries 64-bit sizes and offsets.
const ZIP64_EXTRA: u16 = 0x0001;

/// The caps one read is held to. [`ZipLimits::OFFICE`] is what the server uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZipLimits {
    /// Entries in the archive.
    pub max_entries: usize,
    /// Inflated bytes of one entry.
    pub max_entry_bytes: u64,
    /// Inflated bytes of all entries of one [`Archive::verify`].
    pub max_total_bytes: u64,
    /// Inflated-to-compressed ratio of one entry, checked past `ratio_checked_from`.
    pub max_ratio: u64,
    /// Inflated bytes of an entry from which its ratio is checked.
    pub ratio_checked_from: u64,
}

impl ZipLimits {
    /// The caps for Office files, from the constants above.
    pub const OFFICE: Self = Self {
        max_entries: MAX_ENTRIES,
        max_entry_bytes: MAX_ENTRY_INFLATED_BYTES,
        max_total_bytes: MAX_TOTAL_INFLATED_BYTES,
        max_ratio: MAX_RATIO,
        ratio_checked_from: RATIO_CHECKED_FROM_BYTES,
    };
}

/// Why a zip was refused. The messages complete "the file ..." for a person or a model.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ZipError {
    /// No end-of-central-directory record: not a zip at all (or cut short).
    #[error("is not a zip package: {0}")]
    NotZip(&'static str),
    /// The records contradict each other or the bytes.
    #[error("is damaged: {0}")]
    Damaged(String),
    /// Encryption, or a compression method Office files do not use.
    #[error("has a part, {name}, that {what}, which Office files never do")]
    Unsupported {
        /// The entry.
        name: String,
        /// What it does.
        what: String,
    },
    /// More entries than [`ZipLimits::max_entries`].
    #[error("has more than {max} parts, more than file-agent reads (a limit against zip bombs)")]
    TooManyEntries {
        /// The cap.
        max: usize,
    },
    /// One entry inflates past [`ZipLimits::max_entry_bytes`].
    #[error(
        "has a part, {name}, that inflates to more than {max_mib} MiB, more than file-agent reads of one part (a limit against zip bombs)"
    )]
    EntryTooLarge {
        /// The entry.
        name: String,
        /// The cap in MiB.
        max_mib: u64,
    },
    /// All entries together inflate past [`ZipLimits::max_total_bytes`].
    #[error(
        "inflates to more than {max_mib} MiB in all, more than file-agent reads (a limit against zip bombs)"
    )]
    TotalTooLarge {
        /// The cap in MiB.
        max_mib: u64,
    },
    /// An entry inflates past [`ZipLimits::max_ratio`] times its compressed size.
    #[error(
        "has a part, {name}, that inflates to more than {ratio} times its compressed size, which file-agent refuses as a likely zip bomb"
    )]
    RatioTooHigh {
        /// The entry.
        name: String,
        /// The cap.
        ratio: u64,
    },
    /// A part the caller reads whole is larger than the caller's cap.
    #[error("has a part, {name}, larger than the {max_kib} KiB file-agent reads of such a part")]
    PartTooLarge {
        /// The entry.
        name: String,
        /// The cap in KiB.
        max_kib: u64,
    },
}

impl ZipError {
    /// Whether a cap (not damage) refused the file: making it smaller is what helps.
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            Self::TooManyEntries { .. }
                | Self::EntryTooLarge { .. }
                | Self::TotalTooLarge { .. }
                | Self::RatioTooHigh { .. }
                | Self::PartTooLarge { .. }
        )
    }
}

fn damaged(why: impl Into<String>) -> ZipError {
    ZipError::Damaged(why.into())
}

/// One entry of the central directory.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    method: u16,
    crc32: u32,
    compressed_size: u64,
    /// The size the zip declares; checked against what inflating gives, never trusted.
    declared_size: u64,
    /// Where the compressed bytes start (after the local header).
    data_start: usize,
    /// Where its local header starts.
    local_start: usize,
}

/// A zip's directory over its bytes: names known, nothing inflated yet.
#[derive(Debug)]
pub struct Archive<'a> {
    bytes: &'a [u8],
    entries: Vec<Entry>,
    /// Lower-cased name → index in `entries`.
    index: HashMap<String, usize>,
    limits: ZipLimits,
}

/// Little-endian reads that fail on short input instead of panicking.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn at(bytes: &'a [u8], at: usize) -> Self {
        Self { bytes, at }
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], ZipError> {
        let end = self
            .at
            .checked_add(len)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| damaged("a record runs past the end of the file"))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn u16(&mut self) -> Result<u16, ZipError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, ZipError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, ZipError> {
        let b = self.take(8)?;
        let mut word = [0; 8];
        word.copy_from_slice(b);
        Ok(u64::from_le_bytes(word))
    }
}

fn to_usize(value: u64) -> Result<usize, ZipError> {
    usize::try_from(value).map_err(|_| damaged("an offset does not fit in memory"))
}

/// Where the central directory is and how many entries it claims.
struct Directory {
    offset: u64,
    size: u64,
    entries: u64,
}

/// The last end-of-central-directory record (and its zip64 twin, when the fields overflow).
fn find_directory(bytes: &[u8]) -> Result<Directory, ZipError> {
    if bytes.len() < END_OF_DIRECTORY_LEN {
        return Err(ZipError::NotZip("it is too short"));
    }
    let position = end_of_directory(bytes)?;
    let mut cursor = Cursor::at(bytes, position + 4);
    let disk = cursor.u16()?;
    let directory_disk = cursor.u16()?;
    let entries_here = cursor.u16()?;
    let entries = cursor.u16()?;
    let size = cursor.u32()?;
    let offset = cursor.u32()?;
    if disk != 0 || directory_disk != 0 || entries_here != entries {
        return Err(ZipError::Unsupported {
            name: "(the archive)".into(),
            what: "spans several disks".into(),
        });
    }
    let zip64 = entries == u16::MAX || size == u32::MAX || offset == u32::MAX;
    if !zip64 {
        return Ok(Directory {
            offset: offset.into(),
            size: size.into(),
            entries: entries.into(),
        });
    }
    zip64_directory(bytes, position)
}

/// Where the end-of-directory record is: the last signature, within the longest comment of
/// the end, whose comment fits in the file (`bytes` is at least one record long).
fn end_of_directory(bytes: &[u8]) -> Result<usize, ZipError> {
    let last = bytes.len() - END_OF_DIRECTORY_LEN;
    let first = last.saturating_sub(MAX_COMMENT_LEN);
    let signature = END_OF_DIRECTORY.to_le_bytes();
    (first..=last)
        .rev()
        .find(|&at| {
            bytes[at..at + 4] == signature && {
                let comment = u16::from_le_bytes([bytes[at + 20], bytes[at + 21]]) as usize;
                at + END_OF_DIRECTORY_LEN + comment <= bytes.len()
            }
        })
        .ok_or(ZipError::NotZip("it has no end-of-directory record"))
}

/// The directory as the zip64 end-of-directory record says, found through its locator just
/// before the end-of-directory record at `position`; the record must lie before the locator.
fn zip64_directory(bytes: &[u8], position: usize) -> Result<Directory, ZipError> {
    let locator = position
        .checked_sub(ZIP64_END_LOCATOR_LEN)
        .ok_or_else(|| damaged("its zip64 locator is missing"))?;
    let mut cursor = Cursor::at(bytes, locator);
    if cursor.u32()? != ZIP64_END_LOCATOR {
        return Err(damaged("its zip64 locator is missing"));
    }
    let _disk = cursor.u32()?;
    let record = to_usize(cursor.u64()?)?;
    let mut cursor = Cursor::at(bytes, record);
    if cursor.u32()? != ZIP64_END_OF_DIRECTORY {
        return Err(damaged("its zip64 end-of-directory record is missing"));
    }
    let _record_size = cursor.u64()?;
    let _versions = cursor.take(4)?;
    let _disks = cursor.take(8)?;
    let entries_here = cursor.u64()?;
    let entries = cursor.u64()?;
    let size = cursor.u64()?;
    let offset = cursor.u64()?;
    if entries_here != entries || record + ZIP64_END_OF_DIRECTORY_LEN > locator {
        return Err(damaged("its zip64 end-of-directory record is inconsistent"));
    }
    Ok(Directory {
        offset,
        size,
        entries,
    })
}

impl<'a> Archive<'a> {
    /// Reads the directory of `bytes` under `limits`: counts and names only, nothing inflated.
    pub fn open(bytes: &'a [u8], limits: ZipLimits) -> Result<Self, ZipError> {
        let directory = find_directory(bytes)?;
        // The count is checked before anything is kept; the loop below stops at it too, so a
        // directory longer than it claims cannot sneak more entries in.
        if directory.entries > limits.max_entries as u64 {
            return Err(ZipError::TooManyEntries {
                max: limits.max_entries,
            });
        }
        let start = to_usize(directory.offset)?;
        let end = start
            .checked_add(to_usize(directory.size)?)
            .filter(|end| *end <= bytes.len())
            .ok_or_else(|| damaged("its central directory runs past the end of the file"))?;
        let mut cursor = Cursor::at(&bytes[..end], start);
        let mut entries = Vec::with_capacity(directory.entries as usize);
        let mut index = HashMap::with_capacity(directory.entries as usize);
        for _ in 0..directory.entries {
            let entry = read_central_entry(&mut cursor, bytes)?;
            let key = entry.name.to_ascii_lowercase();
            if index.insert(key, entries.len()).is_some() {
                return Err(damaged(format!("two parts are named {}", entry.name)));
            }
            entries.push(entry);
        }
        if cursor.at != end {
            return Err(damaged(
                "its central directory holds more than its end record says",
            ));
        }
        refuse_overlaps(&entries)?;
        Ok(Self {
            bytes,
            entries,
            index,
            limits,
        })
    }

    /// The entries' names, in directory order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|entry| entry.name.as_str())
    }

    /// The entry called `name` (ASCII case ignored), if there is one.
    fn entry(&self, name: &str) -> Option<&Entry> {
        self.index
            .get(&name.to_ascii_lowercase())
            .map(|&at| &self.entries[at])
    }

    /// The stored name of the entry called `name` (ASCII case ignored), if there is one.
    pub fn find(&self, name: &str) -> Option<&str> {
        self.entry(name).map(|entry| entry.name.as_str())
    }

    /// Inflates entry `name` whole; refused past `max` bytes (and the archive's caps).
    pub fn read(&self, name: &str, max: u64) -> Result<Vec<u8>, ZipError> {
        let entry = self
            .entry(name)
            .ok_or_else(|| damaged(format!("it has no part {name}")))?;
        let mut content = Vec::new();
        let mut total = 0;
        self.inflate(entry, &mut total, &mut |chunk| {
            if (content.len() + chunk.len()) as u64 > max {
                return Err(ZipError::PartTooLarge {
                    name: entry.name.clone(),
                    max_kib: max / 1024,
                });
            }
            content.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(content)
    }

    /// Inflates every entry once, checking its CRC-32 and size within the caps, and returns
    /// the first `head_bytes` of each entry `keep_head` names (lower-cased name → bytes). The
    /// rest is dropped as it is inflated.
    pub fn verify(
        &self,
        keep_head: impl Fn(&str) -> bool,
        head_bytes: usize,
    ) -> Result<HashMap<String, Vec<u8>>, ZipError> {
        let mut heads = HashMap::new();
        let mut total = 0;
        for entry in &self.entries {
            let keep = keep_head(&entry.name);
            let mut head = Vec::new();
            self.inflate(entry, &mut total, &mut |chunk| {
                if keep && head.len() < head_bytes {
                    let room = head_bytes - head.len();
                    head.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Ok(())
            })?;
            if keep {
                heads.insert(entry.name.to_ascii_lowercase(), head);
            }
        }
        Ok(heads)
    }

    /// Inflates `entry` through a fixed buffer into `sink`, counting against `total` and the
    /// caps while it goes, then checks the CRC-32 and the declared size.
    fn inflate(
        &self,
        entry: &Entry,
        total: &mut u64,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), ZipError>,
    ) -> Result<(), ZipError> {
        let data_end = entry
            .data_start
            .checked_add(to_usize(entry.compressed_size)?)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| damaged(format!("part {} runs past the end of the file", entry.name)))?;
        let data = &self.bytes[entry.data_start..data_end];
        let mut meter = Meter {
            name: &entry.name,
            limits: &self.limits,
            total,
            produced: 0,
            crc: crc32fast::Hasher::new(),
        };
        let mut emit = |chunk: &[u8], consumed: u64| -> Result<(), ZipError> {
            meter.count(chunk, consumed)?;
            sink(chunk)
        };
        match entry.method {
            0 => unstore(data, &mut emit)?,
            _ => inflate_deflated(data, &entry.name, &mut emit)?,
        }
        let produced = meter.produced;
        if meter.crc.finalize() != entry.crc32 {
            return Err(damaged(format!(
                "part {} does not match its checksum",
                entry.name
            )));
        }
        if produced != entry.declared_size {
            return Err(damaged(format!(
                "part {} inflates to {produced} bytes but declares {}",
                entry.name, entry.declared_size
            )));
        }
        Ok(())
    }
}

/// What inflating one entry has produced so far, checked against the caps as it grows.
struct Meter<'a> {
    /// The entry's name, for the errors.
    name: &'a str,
    /// The caps.
    limits: &'a ZipLimits,
    /// Bytes inflated from every entry read so far, this one included.
    total: &'a mut u64,
    /// Bytes inflated from this entry.
    produced: u64,
    /// The CRC-32 of what this entry inflated to.
    crc: crc32fast::Hasher,
}

impl Meter<'_> {
    /// Counts a chunk inflated once `consumed` compressed bytes were read: refused past the
    /// entry cap, the total cap, or (past `ratio_checked_from`) the ratio.
    fn count(&mut self, chunk: &[u8], consumed: u64) -> Result<(), ZipError> {
        let limits = self.limits;
        self.produced += chunk.len() as u64;
        *self.total += chunk.len() as u64;
        if self.produced > limits.max_entry_bytes {
            return Err(ZipError::EntryTooLarge {
                name: self.name.to_string(),
                max_mib: limits.max_entry_bytes / MIB,
            });
        }
        if *self.total > limits.max_total_bytes {
            return Err(ZipError::TotalTooLarge {
                max_mib: limits.max_total_bytes / MIB,
            });
        }
        if self.produced > limits.ratio_checked_from
            && self.produced > consumed.max(1).saturating_mul(limits.max_ratio)
        {
            return Err(ZipError::RatioTooHigh {
                name: self.name.to_string(),
                ratio: limits.max_ratio,
            });
        }
        self.crc.update(chunk);
        Ok(())
    }
}

/// Takes each inflated chunk with the compressed bytes consumed so far (the caps are counted
/// there).
type Emit<'a> = dyn FnMut(&[u8], u64) -> Result<(), ZipError> + 'a;

/// A stored entry's `data`, in chunks of [`INFLATE_BUFFER_BYTES`], to `emit`. Stored data never
/// exceeds a ratio of 1: the compressed bytes consumed once a chunk is read are the bytes up to
/// its end.
fn unstore(data: &[u8], emit: &mut Emit<'_>) -> Result<(), ZipError> {
    let mut consumed: u64 = 0;
    for chunk in data.chunks(INFLATE_BUFFER_BYTES) {
        consumed += chunk.len() as u64;
        emit(chunk, consumed)?;
    }
    Ok(())
}

/// Inflates a deflated entry's `data` through a buffer of [`INFLATE_BUFFER_BYTES`], each chunk
/// to `emit` with the compressed bytes consumed so far; a stream that stops giving or taking
/// bytes before its end is cut short.
fn inflate_deflated(data: &[u8], name: &str, emit: &mut Emit<'_>) -> Result<(), ZipError> {
    let mut inflater = Decompress::new(false);
    let mut buffer = vec![0u8; INFLATE_BUFFER_BYTES];
    loop {
        let (before_in, before_out) = (inflater.total_in(), inflater.total_out());
        let input = &data[to_usize(before_in)?..];
        let status = inflater
            .decompress(input, &mut buffer, FlushDecompress::None)
            .map_err(|error| damaged(format!("part {name} does not inflate: {error}")))?;
        let written = (inflater.total_out() - before_out) as usize;
        emit(&buffer[..written], inflater.total_in())?;
        if status == Status::StreamEnd {
            return Ok(());
        }
        if written == 0 && inflater.total_in() == before_in {
            return Err(damaged(format!("part {name} is cut short")));
        }
    }
}

/// One central-directory entry, with its local header checked against it.
fn read_central_entry(cursor: &mut Cursor<'_>, bytes: &[u8]) -> Result<Entry, ZipError> {
    if cursor.u32()? != CENTRAL_HEADER {
        return Err(damaged("its central directory has a broken entry"));
    }
    let fixed = cursor.take(CENTRAL_HEADER_LEN - 4)?;
    let mut fields = Cursor::at(fixed, 0);
    let _made_by = fields.u16()?;
    let _needed = fields.u16()?;
    let flags = fields.u16()?;
    let method = fields.u16()?;
    let _time = fields.u32()?;
    let crc32 = fields.u32()?;
    let compressed_size = u64::from(fields.u32()?);
    let declared_size = u64::from(fields.u32()?);
    let name_len = fields.u16()? as usize;
    let extra_len = fields.u16()? as usize;
    let comment_len = fields.u16()? as usize;
    let _disk = fields.u16()?;
    let _internal = fields.u16()?;
    let _external = fields.u32()?;
    let local_offset = u64::from(fields.u32()?);
    if name_len > MAX_NAME_BYTES {
        return Err(damaged(format!(
            "a part's name is longer than {MAX_NAME_BYTES} bytes"
        )));
    }
    let raw_name = cursor.take(name_len)?;
    let name = String::from_utf8_lossy(raw_name).into_owned();
    let extra = cursor.take(extra_len)?;
    let _comment = cursor.take(comment_len)?;

    let (declared_size, compressed_size, local_offset) =
        widen(extra, (declared_size, compressed_size, local_offset))?;
    check_method(&name, flags, method, compressed_size, declared_size)?;
    let local = to_usize(local_offset)?;
    let data_start = data_start(bytes, local, &name, raw_name)?;
    Ok(Entry {
        name,
        method,
        crc32,
        compressed_size,
        declared_size,
        data_start,
        local_start: local,
    })
}

/// The declared size, the compressed size and the local header's offset, each read from the
/// zip64 extra field (in this order) when its 32-bit field is at its maximum.
fn widen(extra: &[u8], narrow: (u64, u64, u64)) -> Result<(u64, u64, u64), ZipError> {
    let (mut declared_size, mut compressed_size, mut local_offset) = narrow;
    let mut extras = Cursor::at(extra, 0);
    while extras.at + 4 <= extra.len() {
        let id = extras.u16()?;
        let len = extras.u16()? as usize;
        let body = extras.take(len)?;
        if id == ZIP64_EXTRA {
            let mut wide = Cursor::at(body, 0);
            if declared_size == u64::from(u32::MAX) {
                declared_size = wide.u64()?;
            }
            if compressed_size == u64::from(u32::MAX) {
                compressed_size = wide.u64()?;
            }
            if local_offset == u64::from(u32::MAX) {
                local_offset = wide.u64()?;
            }
        }
    }
    Ok((declared_size, compressed_size, local_offset))
}

/// Refuses an encrypted entry, a method other than stored (0) or deflated (8), and a stored
/// entry whose two sizes differ.
fn check_method(
    name: &str,
    flags: u16,
    method: u16,
    compressed_size: u64,
    declared_size: u64,
) -> Result<(), ZipError> {
    if flags & 0x1 != 0 {
        return Err(ZipError::Unsupported {
            name: name.to_string(),
            what: "is encrypted".into(),
        });
    }
    if method != 0 && method != 8 {
        return Err(ZipError::Unsupported {
            name: name.to_string(),
            what: format!("is compressed with method {method}"),
        });
    }
    if method == 0 && compressed_size != declared_size {
        return Err(damaged(format!(
            "stored part {name} declares two different sizes"
        )));
    }

    Ok(())
}

/// Where the entry's data starts, after its local header at `local`; the local header must
/// name the entry as the central directory does (`raw_name`), as another reader that walks
/// the local headers would see it.
fn data_start(bytes: &[u8], local: usize, name: &str, raw_name: &[u8]) -> Result<usize, ZipError> {
    let mut header = Cursor::at(bytes, local);
    if header.u32()? != LOCAL_HEADER {
        return Err(damaged(format!("part {name} has no local header")));
    }
    let fixed = header.take(LOCAL_HEADER_LEN - 4)?;
    let local_name_len = u16::from_le_bytes([fixed[22], fixed[23]]) as usize;
    let local_extra_len = u16::from_le_bytes([fixed[24], fixed[25]]) as usize;
    if header.take(local_name_len)? != raw_name {
        return Err(damaged(format!(
            "part {name} has another name in its local header"
        )));
    }
    header.take(local_extra_len)?;
    Ok(header.at)
}

/// Refuses entries whose bytes (local header to the end of the compressed data) overlap.
/// Writers never do that; a non-recursive zip bomb does, so that thousands of entries
/// inflate the same compressed kernel (each would count towards the total cap, but only
/// after a gigabyte of inflating).
fn refuse_overlaps(entries: &[Entry]) -> Result<(), ZipError> {
    let mut spans: Vec<(usize, usize, &str)> = entries
        .iter()
        .map(|entry| {
            let end = entry
                .data_start
                .saturating_add(usize::try_from(entry.compressed_size).unwrap_or(usize::MAX));
            (entry.local_start, end, entry.name.as_str())
        })
        .collect();
    spans.sort_unstable();
    for pair in spans.windows(2) {
        let ((_, end, first), (start, _, second)) = (pair[0], pair[1]);
        if start < end {
            return Err(damaged(format!(
                "parts {first} and {second} overlap (a zip bomb's trick)"
            )));
        }
    }
    Ok(())
}

/// A zip of `entries` (name, text), written by the zip crate with its default options: the
/// test fixture of the modules that read zips.
#[cfg(test)]
pub(crate) fn zip_with(entries: &[(&str, &str)]) -> Vec<u8> {
    use std::io::Write;
    let mut buffer = std::io::Cursor::new(Vec::new());
    let mut writer = zip::ZipWriter::new(&mut buffer);
    for (name, content) in entries {
        writer
            .start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        writer.write_all(content.as_bytes()).unwrap();
    }
    writer.finish().unwrap();
    buffer.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zip_of(entries: &[(&str, &[u8])], method: zip::CompressionMethod) -> Vec<u8> {
        let mut buffer = std::io::Cursor::new(Vec::new());
        let mut writer = zip::ZipWriter::new(&mut buffer);
        let options = zip::write::SimpleFileOptions::default().compression_method(method);
        for (name, content) in entries {
            writer.start_file(*name, options).unwrap();
            writer.write_all(content).unwrap();
        }
        writer.finish().unwrap();
        buffer.into_inner()
    }

    /// Small caps, so tests stay small.
    const TEST_LIMITS: ZipLimits = ZipLimits {
        max_entries: 4,
        max_entry_bytes: 1024 * 1024,
        max_total_bytes: 1536 * 1024,
        max_ratio: 50,
        ratio_checked_from: 64 * 1024,
    };

    /// Raw DEFLATE of `data`.
    fn deflate(data: &[u8]) -> Vec<u8> {
        let mut encoder =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    /// A one-entry zip written by hand, declaring `crc` and `declared_size` whatever they are.
    fn raw_zip(name: &str, method: u16, data: &[u8], crc: u32, declared_size: u32) -> Vec<u8> {
        let mut fields = Vec::new();
        for value in [20u16, 0, method, 0, 0x21] {
            fields.extend_from_slice(&value.to_le_bytes());
        }
        fields.extend_from_slice(&crc.to_le_bytes());
        fields.extend_from_slice(&(data.len() as u32).to_le_bytes());
        fields.extend_from_slice(&declared_size.to_le_bytes());
        fields.extend_from_slice(&(name.len() as u16).to_le_bytes());
        fields.extend_from_slice(&0u16.to_le_bytes());
        let mut bytes = LOCAL_HEADER.to_le_bytes().to_vec();
        bytes.extend_from_slice(&fields);
        bytes.extend_from_slice(name.as_bytes());
        bytes.extend_from_slice(data);
        let directory_at = bytes.len() as u32;
        bytes.extend_from_slice(&CENTRAL_HEADER.to_le_bytes());
        bytes.extend_from_slice(&20u16.to_le_bytes());
        bytes.extend_from_slice(&fields);
        bytes.extend_from_slice(&[0; 10]); // comment length, disk, attributes
        bytes.extend_from_slice(&0u32.to_le_bytes()); // the local header's offset
        bytes.extend_from_slice(name.as_bytes());
        let directory_len = bytes.len() as u32 - directory_at;
        bytes.extend_from_slice(&END_OF_DIRECTORY.to_le_bytes());
        for value in [0u16, 0, 1, 1] {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        bytes.extend_from_slice(&directory_len.to_le_bytes());
        bytes.extend_from_slice(&directory_at.to_le_bytes());
        bytes.extend_from_slice(&0u16.to_le_bytes());
        bytes
    }

    #[test]
    fn reads_names_parts_and_heads_of_zips_the_zip_crate_writes() {
        for method in [
            zip::CompressionMethod::Stored,
            zip::CompressionMethod::Deflated,
        ] {
            let bytes = zip_of(
                &[("a.xml", b"<a>one</a>"), ("Dir/B.xml", b"<b>two</b>")],
                method,
            );
            let archive = Archive::open(&bytes, TEST_LIMITS).unwrap();
            assert_eq!(archive.names().collect::<Vec<_>>(), ["a.xml", "Dir/B.xml"]);
            assert_eq!(archive.find("dir/b.XML"), Some("Dir/B.xml"));
            assert_eq!(archive.read("a.xml", 100).unwrap(), b"<a>one</a>");
            assert!(matches!(
                archive.read("a.xml", 4),
                Err(ZipError::PartTooLarge { .. })
            ));
            let heads = archive.verify(|name| name.starts_with("Dir/"), 3).unwrap();
            assert_eq!(heads["dir/b.xml"], b"<b>");
            assert_eq!(heads.len(), 1);
        }
    }

    #[test]
    fn a_zip_bomb_with_a_lying_declared_size_stops_at_the_cap_and_the_ratio() {
        // 8 MiB of zeros declared as 100 bytes: inflating stops at the ratio check.
        let zeros = vec![0u8; 8 * 1024 * 1024];
        let bomb = raw_zip(
            "bomb.xml",
            8,
            &deflate(&zeros),
            crc32fast::hash(&zeros),
            100,
        );
        let archive = Archive::open(&bomb, TEST_LIMITS).unwrap();
        assert_eq!(
            archive.verify(|_| false, 0),
            Err(ZipError::RatioTooHigh {
                name: "bomb.xml".into(),
                ratio: 50
            })
        );
        // With the ratio allowed, the per-entry cap stops it, whatever the declared size says.
        let no_ratio = ZipLimits {
            max_ratio: u64::MAX,
            ..TEST_LIMITS
        };
        let archive = Archive::open(&bomb, no_ratio).unwrap();
        assert_eq!(
            archive.verify(|_| false, 0),
            Err(ZipError::EntryTooLarge {
                name: "bomb.xml".into(),
                max_mib: 1
            })
        );
        // A size that lies the other way round is damage.
        let small = b"<x/>".repeat(10);
        let liar = raw_zip(
            "x.xml",
            8,
            &deflate(&small),
            crc32fast::hash(&small),
            1_000_000,
        );
        let error = Archive::open(&liar, TEST_LIMITS)
            .unwrap()
            .verify(|_| false, 0)
            .unwrap_err();
        assert!(error.to_string().contains("declares 1000000"), "{error}");
        assert!(!error.is_limit());
    }

    #[test]
    fn the_total_counts_every_entry_even_when_they_share_their_bytes() {
        let content = vec![b'x'; 600 * 1024];
        let bytes = zip_of(
            &[
                ("a", &content[..]),
                ("b", &content[..]),
                ("c", &content[..]),
            ],
            zip::CompressionMethod::Stored,
        );
        let archive = Archive::open(&bytes, TEST_LIMITS).unwrap();
        assert_eq!(
            archive.verify(|_| false, 0),
            Err(ZipError::TotalTooLarge { max_mib: 1 })
        );
    }

    #[test]
    fn too_many_entries_duplicates_crc_errors_and_odd_methods_are_refused() {
        let five: Vec<(String, &[u8])> = (0..5).map(|i| (format!("{i}"), &b"x"[..])).collect();
        let five: Vec<(&str, &[u8])> = five.iter().map(|(n, c)| (n.as_str(), *c)).collect();
        let bytes = zip_of(&five, zip::CompressionMethod::Stored);
        assert_eq!(
            Archive::open(&bytes, TEST_LIMITS).unwrap_err(),
            ZipError::TooManyEntries { max: 4 }
        );

        let bytes = zip_of(
            &[("a.xml", b"1"), ("A.XML", b"2")],
            zip::CompressionMethod::Stored,
        );
        assert!(
            Archive::open(&bytes, TEST_LIMITS)
                .unwrap_err()
                .to_string()
                .contains("two parts are named")
        );

        let bad_crc = raw_zip("a.xml", 0, b"hello", crc32fast::hash(b"hellO"), 5);
        let error = Archive::open(&bad_crc, TEST_LIMITS)
            .unwrap()
            .verify(|_| false, 0)
            .unwrap_err();
        assert!(error.to_string().contains("checksum"), "{error}");

        let bzip = raw_zip("a.xml", 12, b"BZh", 0, 3);
        assert!(matches!(
            Archive::open(&bzip, TEST_LIMITS),
            Err(ZipError::Unsupported { .. })
        ));

        let good = zip_of(&[("a.xml", b"<a/>")], zip::CompressionMethod::Deflated);
        for cut in [10, good.len() / 2, good.len() - 1] {
            assert!(Archive::open(&good[..cut], TEST_LIMITS).is_err(), "{cut}");
        }
        assert!(matches!(
            Archive::open(b"not a zip at all, just text", TEST_LIMITS),
            Err(ZipError::NotZip(_))
        ));
    }

    #[test]
    fn zip64_records_and_extra_fields_are_read() {
        let mut buffer = std::io::Cursor::new(Vec::new());
        let mut writer = zip::ZipWriter::new(&mut buffer);
        let options = zip::write::SimpleFileOptions::default().large_file(true);
        writer.start_file("big.xml", options).unwrap();
        writer.write_all(b"<big/>").unwrap();
        writer.finish().unwrap();
        let bytes = buffer.into_inner();
        // The entry's sizes are in its zip64 extra field.
        let archive = Archive::open(&bytes, TEST_LIMITS).unwrap();
        assert_eq!(archive.read("big.xml", 100).unwrap(), b"<big/>");

        // The same archive ended by zip64 records: the 32-bit end record only points at them.
        let end = bytes.len() - END_OF_DIRECTORY_LEN;
        let field = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let (size, offset) = (u64::from(field(end + 12)), u64::from(field(end + 16)));
        let mut wide = bytes[..end].to_vec();
        let record_at = wide.len() as u64;
        wide.extend_from_slice(&ZIP64_END_OF_DIRECTORY.to_le_bytes());
        wide.extend_from_slice(&44u64.to_le_bytes());
        wide.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        for value in [1u64, 1, size, offset] {
            wide.extend_from_slice(&value.to_le_bytes());
        }
        wide.extend_from_slice(&ZIP64_END_LOCATOR.to_le_bytes());
        wide.extend_from_slice(&0u32.to_le_bytes());
        wide.extend_from_slice(&record_at.to_le_bytes());
        wide.extend_from_slice(&1u32.to_le_bytes());
        wide.extend_from_slice(&END_OF_DIRECTORY.to_le_bytes());
        wide.extend_from_slice(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        wide.extend_from_slice(&[0xff; 8]);
        wide.extend_from_slice(&[0, 0]);
        let archive = Archive::open(&wide, TEST_LIMITS).unwrap();
        assert_eq!(archive.read("big.xml", 100).unwrap(), b"<big/>");
    }
}
