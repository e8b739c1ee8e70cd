//! Office Open XML packages (.xlsx, .docx, .pptx) checked from untrusted bytes by their structure,
//! the way Excel and Word find their way into them, without ever loading a sheet's cells or a
//! document's text into the server's memory:
//!
//! 1. the zip is read with [`zip`](super::zip), under its caps;
//! 2. `[Content_Types].xml` and `_rels/.rels` are parsed whole (each at most
//!    [`MAX_PARSED_PART_BYTES`]) to find the main part and check its content type;
//! 3. for a workbook, `workbook.xml` and its relationships are parsed whole the same way: at
//!    least one sheet, and every sheet's part present; for a presentation, `presentation.xml`
//!    likewise: at least one slide, and every slide's part present;
//! 4. every entry is inflated once (CRC-32, sizes and caps checked, nothing kept) except the
//!    first [`PART_HEAD_BYTES`] of each sheet or slide part, or of the document part, whose
//!    root element (and, for a document, its body) are checked.
//!
//! XML is read with quick-xml, which expands no entities beyond the five predefined ones; a
//! DTD is refused outright (Office files never have one).

use std::collections::HashMap;

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use thiserror::Error;

use super::filetype::FileType;
use super::zip::{Archive, ZipError, ZipLimits};
use crate::config::MIB;

/// The largest part parsed whole (content types, relationships, `workbook.xml`).
pub const MAX_PARSED_PART_BYTES: u64 = 16 * MIB;
/// Bytes kept from the start of a sheet part or a document part, to check its root element.
pub const PART_HEAD_BYTES: usize = 64 * 1024;

const CONTENT_TYPES: &str = "[Content_Types].xml";
const ROOT_RELATIONSHIPS: &str = "_rels/.rels";
/// The relationship type of the main part, transitional and strict.
const OFFICE_DOCUMENT: [&str; 2] = [
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument",
    "http://purl.oclc.org/ooxml/officeDocument/relationships/officeDocument",
];
/// Root elements a workbook's sheet part may have.
const SHEET_ROOTS: [&str; 4] = ["worksheet", "chartsheet", "dialogsheet", "macrosheet"];
/// The root element of a slide part.
const SLIDE_ROOTS: [&str; 1] = ["sld"];

/// The content type of the main part of a package of `kind` (`None`: not a package).
fn main_content_type(kind: FileType) -> Option<&'static str> {
    match kind {
        FileType::Excel => {
            Some("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml")
        }
        FileType::Docx => {
            Some("application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml")
        }
        FileType::Pptx => Some(
            "application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml",
        ),
        FileType::Pdf => None,
    }
}

/// The application that opens a package of `kind`.
fn application(kind: FileType) -> &'static str {
    match kind {
        FileType::Excel => "Excel",
        FileType::Docx => "Word",
        FileType::Pptx => "PowerPoint",
        FileType::Pdf => "a PDF reader",
    }
}

/// How a package's main part lists its parts: the root element, the listing element (whose
/// relationship id names a part), the root elements the listed parts may have, and words.
struct Listing {
    root: &'static str,
    item: &'static str,
    part_roots: &'static [&'static str],
    /// What a listed part is called ("sheet").
    what: &'static str,
    /// What a listed part must be ("worksheet"), for the error when it is not.
    must_be: &'static str,
}

const SHEETS: Listing = Listing {
    root: "workbook",
    item: "sheet",
    part_roots: &SHEET_ROOTS,
    what: "sheet",
    must_be: "worksheet",
};
const SLIDES: Listing = Listing {
    root: "presentation",
    item: "sldId",
    part_roots: &SLIDE_ROOTS,
    what: "slide",
    must_be: "slide",
};

/// Why a package is not a usable file of its kind. The messages start with "it".
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PackageError {
    /// The zip itself is refused.
    #[error("it {0}")]
    Zip(#[from] ZipError),
    /// The parts are there but do not make a file of the kind.
    #[error("{0}")]
    Structure(String),
}

impl PackageError {
    /// Whether a cap (not damage) refused the file.
    pub fn is_limit(&self) -> bool {
        matches!(self, Self::Zip(error) if error.is_limit())
    }
}

fn structure(message: impl Into<String>) -> PackageError {
    PackageError::Structure(message.into())
}

/// Checks that `bytes` is a package of `kind` that its application can open.
pub fn check(bytes: &[u8], kind: FileType) -> Result<(), PackageError> {
    let archive = Archive::open(bytes, ZipLimits::OFFICE)?;
    let content_types = read_required_part(
        &archive,
        CONTENT_TYPES,
        &format!("{} cannot open it", application(kind)),
    )?;
    let types = ContentTypes::parse(&content_types)?;
    let main = main_part(&archive)?;
    check_main_type(&types, &main, kind)?;
    let listing = match kind {
        FileType::Excel => Some(&SHEETS),
        FileType::Pptx => Some(&SLIDES),
        FileType::Docx | FileType::Pdf => None,
    };
    let heads: Vec<String> = match listing {
        Some(listing) => listed_parts(&archive, &main, listing)?,
        None => vec![main.clone()],
    };
    let wanted: Vec<String> = heads.iter().map(|h| h.to_ascii_lowercase()).collect();
    let kept = archive.verify(
        |name| wanted.contains(&name.to_ascii_lowercase()),
        PART_HEAD_BYTES,
    )?;
    for part in &heads {
        let head = kept
            .get(&part.to_ascii_lowercase())
            .map(Vec::as_slice)
            .unwrap_or_default();
        match listing {
            Some(listing) => check_listed_head(part, head, listing)?,
            None => check_document_head(part, head)?,
        }
    }
    Ok(())
}

/// Checks that `[Content_Types].xml` gives the main part the type of a plain file of `kind`.
fn check_main_type(types: &ContentTypes, main: &str, kind: FileType) -> Result<(), PackageError> {
    let expected = main_content_type(kind)
        .ok_or_else(|| structure(format!("a {} is not an Office package", kind.label())))?;
    match types.of(main) {
        Some(found) if found == expected => Ok(()),
        Some(found) => Err(structure(format!(
            "its main part {main} is of type {found}, not {expected}; save it as a plain .{} file",
            kind.extension()
        ))),
        None => Err(structure(format!(
            "{CONTENT_TYPES} gives no type for its main part {main}"
        ))),
    }
}

/// A part parsed whole, within [`MAX_PARSED_PART_BYTES`].
fn read_part(archive: &Archive<'_>, name: &str) -> Result<Vec<u8>, PackageError> {
    Ok(archive.read(name, MAX_PARSED_PART_BYTES)?)
}

/// Part `name` read whole, as [`read_part`]; when the zip has no such part, the error is
/// "it has no `name`, so `so`".
fn read_required_part(
    archive: &Archive<'_>,
    name: &str,
    so: &str,
) -> Result<Vec<u8>, PackageError> {
    if archive.find(name).is_none() {
        return Err(structure(format!("it has no {name}, so {so}")));
    }
    read_part(archive, name)
}

/// The stored name of part `target`, which must be in the zip; `what` names it in the error.
fn present_part(archive: &Archive<'_>, what: &str, target: &str) -> Result<String, PackageError> {
    archive
        .find(target)
        .map(str::to_string)
        .ok_or_else(|| structure(format!("{what} {target} is missing from the file")))
}

/// `[Content_Types].xml`: types by extension and by part.
struct ContentTypes {
    defaults: HashMap<String, String>,
    overrides: HashMap<String, String>,
}

impl ContentTypes {
    fn parse(xml: &[u8]) -> Result<Self, PackageError> {
        let mut types = Self {
            defaults: HashMap::new(),
            overrides: HashMap::new(),
        };
        walk_xml(xml, CONTENT_TYPES, false, |element| {
            match element.local_name().as_ref() {
                "Default" => {
                    if let (Some(extension), Some(kind)) = (
                        attribute(element, "Extension")?,
                        attribute(element, "ContentType")?,
                    ) {
                        types.defaults.insert(extension.to_ascii_lowercase(), kind);
                    }
                }
                "Override" => {
                    if let (Some(part), Some(kind)) = (
                        attribute(element, "PartName")?,
                        attribute(element, "ContentType")?,
                    ) {
                        let part = part.trim_start_matches('/').to_ascii_lowercase();
                        types.overrides.insert(part, kind);
                    }
                }
                _ => {}
            }
            Ok(true)
        })?;
        Ok(types)
    }

    /// The type of part `name`: its override, else its extension's default.
    fn of(&self, name: &str) -> Option<&str> {
        let key = name.to_ascii_lowercase();
        if let Some(found) = self.overrides.get(&key) {
            return Some(found);
        }
        let extension = key.rsplit_once('.')?.1;
        self.defaults.get(extension).map(String::as_str)
    }
}

/// One relationship of a part.
struct Relationship {
    id: String,
    kind: String,
    /// The target part's name in the zip, resolved against the source part's folder.
    target: String,
}

/// The relationships in `rels` (a `.rels` part) of the part in folder `base`.
fn relationships(xml: &[u8], rels: &str, base: &str) -> Result<Vec<Relationship>, PackageError> {
    let mut found = Vec::new();
    walk_xml(xml, rels, false, |element| {
        if element.local_name().as_ref() == "Relationship"
            && attribute(element, "TargetMode")?.as_deref() != Some("External")
            && let (Some(id), Some(kind), Some(target)) = (
                attribute(element, "Id")?,
                attribute(element, "Type")?,
                attribute(element, "Target")?,
            )
        {
            found.push(Relationship {
                id,
                kind,
                target: resolve(base, &target),
            });
        }
        Ok(true)
    })?;
    Ok(found)
}

/// `target` relative to folder `base` ("" is the package root; `/x` is absolute).
fn resolve(base: &str, target: &str) -> String {
    let mut segments: Vec<&str> = if target.starts_with('/') {
        Vec::new()
    } else {
        base.split('/').filter(|s| !s.is_empty()).collect()
    };
    for segment in target.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    segments.join("/")
}

/// The main part `_rels/.rels` names, which must be in the zip.
fn main_part(archive: &Archive<'_>) -> Result<String, PackageError> {
    let xml = read_required_part(
        archive,
        ROOT_RELATIONSHIPS,
        "nothing says where its content is",
    )?;
    let main = relationships(&xml, ROOT_RELATIONSHIPS, "")?
        .into_iter()
        .find(|relation| OFFICE_DOCUMENT.contains(&relation.kind.as_str()))
        .ok_or_else(|| structure(format!("its {ROOT_RELATIONSHIPS} names no main part")))?;
    present_part(archive, "its main part", &main.target)
}

/// The parts (sheets of a workbook, slides of a presentation) that the main part `main`
/// lists, each present in the zip; at least one.
fn listed_parts(
    archive: &Archive<'_>,
    main: &str,
    listing: &Listing,
) -> Result<Vec<String>, PackageError> {
    let xml = read_part(archive, main)?;
    let item_ids = item_ids(&xml, main, listing)?;
    let what = listing.what;
    let (folder, file) = main.rsplit_once('/').unwrap_or(("", main));
    let rels_name = if folder.is_empty() {
        format!("_rels/{file}.rels")
    } else {
        format!("{folder}/_rels/{file}.rels")
    };
    let rels = read_required_part(archive, &rels_name, &format!("its {what}s cannot be found"))?;
    let relations = relationships(&rels, &rels_name, folder)?;
    item_ids
        .iter()
        .map(|id| {
            let relation = relations
                .iter()
                .find(|relation| &relation.id == id)
                .ok_or_else(|| structure(format!("{what} {id} is not in {rels_name}")))?;
            present_part(archive, &format!("the {what} part"), &relation.target)
        })
        .collect()
}

/// The relationship ids of the items (sheets, slides) the main part lists, in order; the part
/// must have the listing's root element and list at least one item, each with an id.
fn item_ids(xml: &[u8], main: &str, listing: &Listing) -> Result<Vec<String>, PackageError> {
    let mut root_seen = false;
    let mut item_ids = Vec::new();
    let what = listing.what;
    walk_xml(xml, main, false, |element| {
        if !root_seen {
            root_seen = true;
            if element.local_name().as_ref() != listing.root {
                return Err(structure(format!(
                    "its main part {main} is not a {}",
                    listing.root
                )));
            }
        }
        if element.local_name().as_ref() == listing.item {
            // `r:id`: the id attribute in the relationships namespace, whatever its prefix.
            let id = element
                .attributes()
                .filter_map(Result::ok)
                .find(|a| a.key.local_name().as_ref() == "id" && a.key.prefix().is_some())
                .and_then(|a| a.normalized_value(XmlVersion::Implicit1_0).ok())
                .map(|value| value.into_owned());
            item_ids.push(
                id.ok_or_else(|| structure(format!("a {what} in {main} has no relationship id")))?,
            );
        }
        Ok(true)
    })?;
    if item_ids.is_empty() {
        return Err(structure(format!("the {} has no {what}s", listing.root)));
    }
    Ok(item_ids)
}

/// Checks that a listed part (a sheet, a slide) starts with one of its kind's root elements.
fn check_listed_head(part: &str, head: &[u8], listing: &Listing) -> Result<(), PackageError> {
    let mut root = None;
    walk_xml(head, part, true, |element| {
        root = Some(element.local_name().as_ref().to_string());
        Ok(false)
    })?;
    match root {
        Some(root) if listing.part_roots.contains(&root.as_str()) => Ok(()),
        _ => Err(structure(format!(
            "its {} part {part} is not a {}",
            listing.what, listing.must_be
        ))),
    }
}

fn check_document_head(part: &str, head: &[u8]) -> Result<(), PackageError> {
    let mut root = None;
    let mut body = false;
    walk_xml(head, part, true, |element| {
        let name = element.local_name();
        if root.is_none() {
            root = Some(name.as_ref() == "document");
            return Ok(root == Some(true));
        }
        body = name.as_ref() == "body";
        Ok(!body)
    })?;
    if root != Some(true) {
        return Err(structure(format!(
            "its main part {part} is not a Word document"
        )));
    }
    if !body {
        return Err(structure(format!("its {part} has no body")));
    }
    Ok(())
}

/// The unescaped value of the attribute named `name` (no prefix) of `element`.
fn attribute(element: &BytesStart<'_>, name: &str) -> Result<Option<String>, PackageError> {
    for attribute in element.attributes() {
        let attribute = attribute.map_err(|error| structure(format!("it has bad XML: {error}")))?;
        if attribute.key.as_ref() == name {
            let value = attribute
                .normalized_value(XmlVersion::Implicit1_0)
                .map_err(|error| structure(format!("it has bad XML: {error}")))?;
            return Ok(Some(value.into_owned()));
        }
    }
    Ok(None)
}

/// Calls `visit` with every start or empty element of `xml` in order, until it returns
/// `false`. A DTD is refused. With `partial` (`xml` is the head of a part), XML that breaks
/// off at the end is not an error: the walk just ends there.
fn walk_xml(
    xml: &[u8],
    part: &str,
    partial: bool,
    mut visit: impl FnMut(&BytesStart<'_>) -> Result<bool, PackageError>,
) -> Result<(), PackageError> {
    let mut reader = quick_xml::Reader::from_reader(xml);
    loop {
        match reader.read_event() {
            Ok(Event::Start(element) | Event::Empty(element)) => {
                if !visit(&element)? {
                    return Ok(());
                }
            }
            Ok(Event::DocType(_)) => {
                return Err(structure(format!(
                    "its part {part} has a DTD, which Office files never have"
                )));
            }
            Ok(Event::Eof) => return Ok(()),
            Ok(_) => {}
            Err(_) if partial => return Ok(()),
            Err(error) => {
                return Err(structure(format!(
                    "its part {part} is not well-formed XML ({error})"
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::untrusted::zip::zip_with;

    const TYPES: &str = r#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#;
    const ROOT_RELS_XL: &str = r#"<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>"#;
    const ROOT_RELS_DOC: &str = r#"<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="/word/document.xml"/></Relationships>"#;
    const WORKBOOK: &str = r#"<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="A" sheetId="1" r:id="rId1"/><sheet name="B" sheetId="2" r:id="rId2"/></sheets></workbook>"#;
    const WORKBOOK_RELS: &str = r#"<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="x/worksheet" Target="worksheets/sheet1.xml"/><Relationship Id="rId2" Type="x/worksheet" Target="/xl/worksheets/sheet2.xml"/></Relationships>"#;
    const SHEET: &str = r#"<?xml version="1.0"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData><row r="1"><c r="A1"><v>1</v></c></row></sheetData></worksheet>"#;
    const DOCUMENT: &str = r#"<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>Hi</w:t></w:r></w:p></w:body></w:document>"#;

    fn workbook_with(replace: &[(&str, &str)]) -> Vec<u8> {
        let mut parts = vec![
            ("[Content_Types].xml", TYPES),
            ("_rels/.rels", ROOT_RELS_XL),
            ("xl/workbook.xml", WORKBOOK),
            ("xl/_rels/workbook.xml.rels", WORKBOOK_RELS),
            ("xl/worksheets/sheet1.xml", SHEET),
            ("xl/worksheets/sheet2.xml", SHEET),
        ];
        for (name, content) in replace {
            parts.retain(|(n, _)| n != name);
            if !content.is_empty() {
                parts.push((name, content));
            }
        }
        zip_with(&parts)
    }

    #[test]
    fn a_workbook_and_a_document_with_their_parts_pass() {
        assert_eq!(check(&workbook_with(&[]), FileType::Excel), Ok(()));
        let document = zip_with(&[
            ("[Content_Types].xml", TYPES),
            ("_rels/.rels", ROOT_RELS_DOC),
            ("word/document.xml", DOCUMENT),
        ]);
        assert_eq!(check(&document, FileType::Docx), Ok(()));
        assert!(check(&document, FileType::Excel).is_err());
        assert!(check(&workbook_with(&[]), FileType::Docx).is_err());
    }

    #[test]
    fn missing_or_wrong_parts_are_named() {
        for (replace, words) in [
            (("[Content_Types].xml", ""), "no [Content_Types].xml"),
            (("_rels/.rels", ""), "no _rels/.rels"),
            (("xl/worksheets/sheet2.xml", ""), "sheet2.xml is missing"),
            (
                ("xl/workbook.xml", r#"<workbook><sheets/></workbook>"#),
                "no sheets",
            ),
            (("xl/worksheets/sheet1.xml", "<html/>"), "not a worksheet"),
            (
                (
                    "xl/workbook.xml",
                    "<workbook><sheets><sheet r:id='x'></workbook>",
                ),
                "not well-formed",
            ),
            (
                (
                    "xl/workbook.xml",
                    r#"<!DOCTYPE x [<!ENTITY a "aaaa">]><workbook/>"#,
                ),
                "DTD",
            ),
        ] {
            let error = check(&workbook_with(&[replace]), FileType::Excel).unwrap_err();
            assert!(error.to_string().contains(words), "{replace:?}: {error}");
        }
        let no_body = zip_with(&[
            ("[Content_Types].xml", TYPES),
            ("_rels/.rels", ROOT_RELS_DOC),
            (
                "word/document.xml",
                "<w:document xmlns:w='x'><w:sectPr/></w:document>",
            ),
        ]);
        assert!(
            check(&no_body, FileType::Docx)
                .unwrap_err()
                .to_string()
                .contains("no body")
        );
    }

    #[test]
    fn a_presentation_needs_a_listed_slide_part() {
        const TYPES_PPT: &str = r#"<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/><Override PartName="/ppt/presentation.xml" ContentType="application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml"/></Types>"#;
        const ROOT_RELS_PPT: &str = r#"<Relationships><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="ppt/presentation.xml"/></Relationships>"#;
        const PRESENTATION: &str = r#"<p:presentation xmlns:p="p" xmlns:r="r"><p:sldMasterIdLst><p:sldMasterId id="2147483648" r:id="rId1"/></p:sldMasterIdLst><p:sldIdLst><p:sldId id="256" r:id="rId2"/></p:sldIdLst></p:presentation>"#;
        const RELS: &str = r#"<Relationships><Relationship Id="rId1" Type="x/slideMaster" Target="slideMasters/slideMaster1.xml"/><Relationship Id="rId2" Type="x/slide" Target="slides/slide1.xml"/></Relationships>"#;
        let deck = |presentation: &str, slide: Option<&str>| {
            let mut parts = vec![
                ("[Content_Types].xml", TYPES_PPT),
                ("_rels/.rels", ROOT_RELS_PPT),
                ("ppt/presentation.xml", presentation),
                ("ppt/_rels/presentation.xml.rels", RELS),
            ];
            if let Some(slide) = slide {
                parts.push(("ppt/slides/slide1.xml", slide));
            }
            zip_with(&parts)
        };
        let slide = r#"<p:sld xmlns:p="p"><p:cSld/></p:sld>"#;
        assert_eq!(
            check(&deck(PRESENTATION, Some(slide)), FileType::Pptx),
            Ok(())
        );
        assert!(check(&deck(PRESENTATION, Some(slide)), FileType::Docx).is_err());
        for (presentation, slide, words) in [
            (
                PRESENTATION,
                None,
                "slide part ppt/slides/slide1.xml is missing",
            ),
            (
                PRESENTATION,
                Some("<p:sldMaster xmlns:p='p'/>"),
                "is not a slide",
            ),
            (
                r#"<p:presentation xmlns:p="p"><p:sldIdLst/></p:presentation>"#,
                Some(slide),
                "has no slides",
            ),
            (
                r#"<p:sldIdLst xmlns:p="p"/>"#,
                Some(slide),
                "not a presentation",
            ),
        ] {
            let error = check(&deck(presentation, slide), FileType::Pptx).unwrap_err();
            assert!(error.to_string().contains(words), "{words}: {error}");
        }
    }

    #[test]
    fn relationship_targets_resolve_like_paths() {
        assert_eq!(
            resolve("xl", "worksheets/sheet1.xml"),
            "xl/worksheets/sheet1.xml"
        );
        assert_eq!(resolve("xl", "/xl/a.xml"), "xl/a.xml");
        assert_eq!(resolve("xl/charts", "../media/i.png"), "xl/media/i.png");
        assert_eq!(resolve("", "xl/workbook.xml"), "xl/workbook.xml");
    }
}
