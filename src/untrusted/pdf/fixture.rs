//! A PDF built from its objects, for tests only: the unit tests of [`super`] and the tests of
//! the check's child process (`tests/integration/local/pdf.rs`, which includes this file by
//! its path) build their files with this one function.

/// A PDF whose objects are `objects` (numbered from 1, object 1 the catalog), with a correct
/// cross-reference table.
pub fn pdf_of(objects: &[impl AsRef<[u8]>]) -> Vec<u8> {
    let mut out = b"%PDF-1.5\n".to_vec();
    let mut offsets = Vec::new();
    for (index, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend(format!("{} 0 obj\n", index + 1).as_bytes());
        out.extend(body.as_ref());
        out.extend(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        out.extend(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}
