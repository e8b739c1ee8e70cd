"""The change report of a PowerPoint deck (KIND pptx): slides matched in order, and for each
pair the kinds of change (text, layout, pictures, shapes, position or size, notes, formatting)."""

from .core import MAX_LISTED, canon, clean, digest, load, local, part_differences
from .sequences import match, walk


A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
SHAPE_TAGS = {"sp", "pic", "graphicFrame", "grpSp", "cxnSp", "contentPart"}
# Run attributes PowerPoint sets by itself (spelling state, language): not formatting.
RUN_NOISE = ("lang", "altLang", "dirty", "err", "noProof", "smtClean", "smtId", "bmk")


def pptx_report(before, after):
    import pptx

    digests = {}

    def read(path):
        deck = pptx.Presentation(path)
        return deck.part.package, [slide_info(slide, digests) for slide in deck.slides]

    (package_a, slides_a), (package_b, slides_b) = [
        load(side, "pptx", path, read) for side, path in (("original", before), ("result", after))]
    report = {"kind": "pptx", "changed": False, "slides_before": len(slides_a),
              "slides_after": len(slides_b), "added": [], "removed": [], "changed_slides": []}
    found = 0
    for event, i, j in walk(match([s["key"] for s in slides_a], [s["key"] for s in slides_b])[0]):
        if event == "pair":
            entry = {"number": j + 1, "title": slides_b[j]["title"],
                     "what": slide_changes(slides_a[i], slides_b[j])}
            if not entry["what"]:
                continue
            event = "changed_slides"
        else:
            slide = slides_a[i] if event == "removed" else slides_b[j]
            entry = {"number": (i if event == "removed" else j) + 1, "title": slide["title"]}
        found += 1
        if len(report[event]) < MAX_LISTED:
            report[event].append(entry)
    # Masters, layouts, properties and the like: a difference there is a change too.
    report["changed"] = bool(found or part_differences(package_a, package_b, digests))
    return report


def slide_info(slide, digests):
    """What a slide shows, as comparable values; its pictures by the SHA-256 of their bytes."""
    tree = slide.shapes._spTree
    shapes = [child for child in tree if local(child.tag) in SHAPE_TAGS]
    texts = ["".join(t.text or "" for t in p.iter(A + "t")) for p in tree.iter(A + "p")]
    pictures = []
    for blip in tree.iter(A + "blip"):
        if blip.get(R + "embed"):
            try:
                pictures.append(digest(slide.part.related_part(blip.get(R + "embed")), digests))
            except KeyError:
                pictures.append("missing")
    notes = ""
    if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
        notes = slide.notes_slide.notes_text_frame.text
    title = slide_title(slide)
    return {"key": title + "\x1f" + "\n".join(texts), "title": clean(title), "text": texts,
            "layout": slide.slide_layout.name, "pictures": sorted(pictures),
            "kinds": [local(s.tag) for s in shapes], "notes": notes,
            "boxes": [(s.left, s.top, s.width, s.height) for s in slide.shapes],
            "formats": [shape_format(s) for s in shapes], "xml": digest(slide.part, digests)}


def slide_title(slide):
    """The title placeholder's text, else the first shape's with text, else ""."""
    title = slide.shapes.title
    if title is not None and title.has_text_frame and title.text_frame.text.strip():
        return title.text_frame.text
    for shape in slide.shapes:
        if shape.has_text_frame and shape.text_frame.text.strip():
            return shape.text_frame.text
    return ""


def shape_format(shape):
    """A shape's look: fill, line and geometry (not its position) and style, its paragraphs'
    settings, and its runs' formats with the text each covers (equal neighbours joined)."""
    props = shape.find(P + "spPr")
    if props is None:
        props = shape.find(P + "grpSpPr")
    runs = []
    for run in shape.iter(A + "r"):
        fmt = canon(run.find(A + "rPr"), skip_attrs=RUN_NOISE)
        if runs and runs[-1][0] == fmt:
            runs[-1][1] += run.findtext(A + "t") or ""
        else:
            runs.append([fmt, run.findtext(A + "t") or ""])
    return {"look": (canon(props, skip_tags=("xfrm",)), canon(shape.find(P + "style"))),
            "paragraphs": [canon(p.find(A + "pPr")) for p in shape.iter(A + "p")], "runs": runs}


def formats_differ(a, b):
    """Whether two shapes look different. With the same text, runs and paragraphs must match
    one to one; when the text changed, only the sets of formats used are compared (new text in
    a format already used is a text change, not a formatting one)."""
    if a["look"] != b["look"]:
        return True
    if [text for _, text in a["runs"]] == [text for _, text in b["runs"]]:
        return a["runs"] != b["runs"] or a["paragraphs"] != b["paragraphs"]
    return ({repr(fmt) for fmt, _ in a["runs"]} != {repr(fmt) for fmt, _ in b["runs"]}
            or set(map(repr, a["paragraphs"])) != set(map(repr, b["paragraphs"])))


def slide_changes(a, b):
    """The kinds of change between two paired slides ([] when they look the same)."""
    what = [label for key, label in (("text", "text"), ("layout", "layout"),
                                     ("pictures", "pictures"), ("kinds", "shapes"))
            if a[key] != b[key]]
    if a["kinds"] == b["kinds"] and a["boxes"] != b["boxes"]:
        what.append("position or size")
    if a["notes"] != b["notes"]:
        what.append("notes")
    if a["kinds"] == b["kinds"] and any(map(formats_differ, a["formats"], b["formats"])):
        what.append("formatting")
    if not what and a["xml"] != b["xml"]:
        what.append("other")
    return what
