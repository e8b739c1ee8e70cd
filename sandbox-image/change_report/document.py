"""The change report of a Word document (KIND docx): the body's paragraphs and tables matched
in order, headings, sections, and the package parts that differ."""

import collections
import difflib
import re

from lxml import etree

from .core import MAX_EXAMPLES, canon, clean, load, local, part_differences
from .sequences import match, walk


MAX_DIFF = 200  # characters of a word diff
CONTEXT_WORDS = 5  # unchanged words kept on each side of a change in a word diff
MAX_HEADINGS = 10
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
RUN_FORMAT = {"rStyle", "b", "i", "u", "strike", "sz", "rFonts", "color", "highlight", "vertAlign"}
# Labels of the parts that differ, by part name: the first pattern that matches.
PART_LABELS = {r"/word/(header|footer)": "headers or footers", r"/word/media/": "images",
               r"/word/comments": "comments", r"/word/document\.xml$": "body formatting",
               r"/word/styles": "styles", r"/word/numbering": "numbering",
               r"/word/footnotes": "footnotes", r"/word/endnotes": "endnotes",
               r"/word/settings": "settings", r"/docProps/": "document properties",
               r"": "other parts"}


def docx_report(before, after):
    import docx

    def read(path):
        document = docx.Document(path)
        return body_items(document), document.part.package

    (body_a, package_a), (body_b, package_b) = [
        load(side, "docx", path, read) for side, path in (("original", before), ("result", after))]
    paragraphs, examples, formatting, by_position = compare_paragraphs(
        body_a["paragraphs"], body_b["paragraphs"])
    tables, table_formatting = compare_tables(body_a["tables"], body_b["tables"])
    sections = [[canon(s, skip_attrs=("rsidR", "rsidSect", "rsidRPr", "rsidDel"),
                       skip_tags=("headerReference", "footerReference")) for s in body["sections"]]
                for body in (body_a, body_b)]
    sections_differ = sections[0] != sections[1]
    body_changed = bool(examples or formatting or table_formatting or sections_differ
                        or tables["added"] or tables["removed"] or tables["changed"])
    labels = {next(label for pattern, label in PART_LABELS.items() if re.match(pattern, name))
              for name in part_differences(package_a, package_b, {})}
    if body_changed or "comments" in labels:
        labels.discard("body formatting")  # told more precisely (comments are anchored there)
    other = [label for label in ("headers or footers", "images") if label in labels]
    other += ["sections"] * sections_differ + ["table formatting"] * table_formatting
    other += [label for label in PART_LABELS.values() if label in labels and label not in other]
    if by_position:
        other.append("compared by position (large document)")
    added, removed = heading_changes(body_a["paragraphs"], body_b["paragraphs"])
    return {"kind": "docx", "changed": body_changed or bool(labels), "paragraphs": paragraphs,
            "tables": tables, "headings_added": added, "headings_removed": removed,
            "examples": examples, "formatting_changed": formatting, "other": other}


def body_items(document):
    """The body's paragraphs as (text, is a heading, element), its tables and its section
    settings, content controls opened (python-docx's document.paragraphs skips them)."""
    names = {}
    for style in document.styles.element.iter(W + "style"):
        name = style.find(W + "name")
        names[style.get(W + "styleId")] = (name.get(W + "val") or "") if name is not None else ""
    body = {"paragraphs": [], "tables": [], "sections": []}

    def visit(parent):
        for child in parent:
            if child.tag == W + "p":
                style = child.find(f"{W}pPr/{W}pStyle")
                name = names.get(style.get(W + "val") if style is not None else None, "").lower()
                heading = name.startswith("heading") or name == "title"
                body["paragraphs"].append((paragraph_text(child), heading, child))
                body["sections"] += child.findall(f"{W}pPr/{W}sectPr")
            elif child.tag == W + "tbl":
                body["tables"].append(child)
            elif child.tag == W + "sectPr":
                body["sections"].append(child)
            elif child.tag in (W + "sdt", W + "sdtContent", W + "customXml"):
                visit(child)

    visit(document.element.body)
    return body


def run_text(run):
    parts = []
    for child in run:
        if child.tag == W + "t":
            parts.append(child.text or "")
        elif child.tag == W + "tab":
            parts.append("\t")
        elif child.tag in (W + "br", W + "cr"):
            parts.append("\n")
    return "".join(parts)


def paragraph_text(element):
    return "".join(run_text(run) for run in element.iter(W + "r"))


def paragraph_format(paragraph):
    """Style, alignment and the runs' formats, each with the text it covers (neighbours with
    the same format joined, so runs split differently compare equal)."""
    props = paragraph.find(W + "pPr")
    runs = []
    for run in paragraph.iter(W + "r"):
        run_props = run.find(W + "rPr")
        fmt = () if run_props is None else tuple(
            canon(c) for c in run_props if local(c.tag) in RUN_FORMAT)
        text = run_text(run)
        if runs and runs[-1][0] == fmt:
            runs[-1][1] += text
        elif text:
            runs.append([fmt, text])
    if props is None:
        return None, None, runs
    return canon(props.find(W + "pStyle")), canon(props.find(W + "jc")), runs


def compare_paragraphs(paras_a, paras_b):
    """(counts, examples, paragraphs reformatted, whether paired by position)."""
    ops, by_position = match([p[0] for p in paras_a], [p[0] for p in paras_b])
    counts = {"before": len(paras_a), "after": len(paras_b), "added": 0, "removed": 0,
              "changed": 0}
    examples, formatting = [], 0
    for event, i, j in walk(ops):
        if event == "pair":
            (text_a, _, element_a), (text_b, _, element_b) = paras_a[i], paras_b[j]
            if text_a == text_b:
                formatting += paragraph_format(element_a) != paragraph_format(element_b)
                continue
            counts["changed"] += 1
            if len(examples) < MAX_EXAMPLES:
                examples.append({"change": "changed", "before": clean(text_a),
                                 "after": clean(text_b), "diff": word_diff(text_a, text_b)})
        else:
            counts[event] += 1
            if len(examples) < MAX_EXAMPLES:
                text = paras_a[i][0] if i is not None else paras_b[j][0]
                examples.append({"change": event, "text": clean(text)})
    return counts, examples, formatting, by_position


def heading_changes(paras_a, paras_b):
    """Headings only in the result, and only in the original (their texts as multisets)."""
    counts = [collections.Counter(text for text, heading, _ in paras if heading and text.strip())
              for paras in (paras_a, paras_b)]
    found = []
    for paras, surplus in ((paras_b, counts[1] - counts[0]), (paras_a, counts[0] - counts[1])):
        listed = []
        for text, heading, _ in paras:
            if heading and surplus[text] > 0 and len(listed) < MAX_HEADINGS:
                surplus[text] -= 1
                listed.append(clean(text))
        found.append(listed)
    return found


def word_diff(before, after):
    """Removals [-...-] and insertions {+...+} between unchanged words, of which only
    CONTEXT_WORDS are kept on each side of a change."""
    a, b = before.split(), after.split()
    if a == b:
        return "(only the spacing differs)"
    if len(a) * len(b) > 1_000_000:  # a huge paragraph
        ops = match(a, b)[0]
    else:
        ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    parts, n = [], CONTEXT_WORDS
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            words = a[i1:i2]
            if i1 == 0 and len(words) > n:  # before the first change
                words = ["…"] + words[-n:]
            elif i2 == len(a) and len(words) > n:  # after the last change
                words = words[:n] + ["…"]
            elif len(words) > 2 * n:
                words = words[:n] + ["…"] + words[-n:]
            parts.append(" ".join(words))
            continue
        if i2 > i1:
            parts.append("[-" + " ".join(a[i1:i2]) + "-]")
        if j2 > j1:
            parts.append("{+" + " ".join(b[j1:j2]) + "+}")
    return clean(" ".join(parts), MAX_DIFF)


def compare_tables(tables_a, tables_b):
    """Counts as for paragraphs, by the tables' cell texts; and whether a table with the same
    texts differs otherwise (its formatting)."""
    def cells(table):
        return tuple(tuple("\n".join(paragraph_text(p) for p in cell.iter(W + "p"))
                           for cell in row.findall(W + "tc")) for row in table.findall(W + "tr"))

    sigs_a, sigs_b = [cells(t) for t in tables_a], [cells(t) for t in tables_b]
    counts = {"before": len(sigs_a), "after": len(sigs_b), "added": 0, "removed": 0,
              "changed": 0}
    formatting = False
    for event, i, j in walk(match(sigs_a, sigs_b)[0]):
        if event != "pair":
            counts[event] += 1
        elif sigs_a[i] != sigs_b[j]:
            counts["changed"] += 1
        elif not formatting:
            formatting = etree.tostring(tables_a[i]) != etree.tostring(tables_b[j])
    return counts, formatting
