"""file-agent change report: a fixed (not model-written) comparison of an original office file
with the copy a model-written script made of it.

What it is for
    modify_file answers with what changed, computed by file-agent from the two files rather than
    taken from the model's word, and refuses a copy in which nothing changed. So "changed" must be
    false for a byte-identical copy and for a plain load-and-save with the same library (openpyxl,
    python-docx, python-pptx), and true for any difference found, formatting included.

How it is invoked
    Inside the sandbox container, with both files read-only under /work/in:

        import runpy
        runpy.run_path("/opt/file-agent/change_report.py",
                       init_globals={"KIND": "xlsx", "BEFORE": "/work/in/original.xlsx",
                                     "AFTER": "/work/in/result.xlsx"},
                       run_name="__main__")

    KIND is "xlsx", "docx" or "pptx", decided by the server from the bytes. For manual runs the
    globals may be left out: ``python3 change_report.py KIND BEFORE AFTER``.

Output contract
    stdout: one JSON object on one line (ASCII, \\u escapes), read by src/tools/changes.rs. Every
    string taken from a file is cut to 80 characters ("…" when cut), control characters replaced
    by spaces. Lists are capped as noted.
    - all kinds: "kind", "changed" (bool: any difference found, formatting included).
    - xlsx: "sheets_added", "sheets_removed" (names); "sheets_renamed" ([{"before", "after"}]: a
      name only in the original and one only in the result at the same position); "sheets" (20:
      sheets in both that differ, by their name in the result: {"name", "cells_changed",
      "examples" (5, row-major: {"cell", "before", "after"}), "formatting_changed" (cells with
      the same value and another style), "formatting_examples" (5 refs), "rows_before",
      "rows_after", "columns_before", "columns_after" (extent of the cells holding a value),
      "other" (settings that differ: column widths, merged cells, freeze panes, ...)}); "other"
      (workbook-level: defined names, sheet order, charts, images, comments, tables).
      Values read: formulas "=...", 12.0 as "12", dates in ISO form, TRUE/FALSE, empty "".
    - docx: "paragraphs", "tables" ({"before", "after", "added", "removed", "changed"});
      "headings_added", "headings_removed" (10 each); "examples" (5, in document order:
      {"change": "changed", "before", "after", "diff"}, the word diff with removals [-...-] and
      insertions {+...+} cut to 200 characters, or {"change": "added"|"removed", "text"});
      "formatting_changed" (paragraphs with the same text and another style, alignment or run
      formatting); "other" (headers or footers, images, sections, comments, styles, ...).
    - pptx: "slides_before", "slides_after"; "added" (numbered in the result), "removed"
      (numbered in the original), "changed_slides" (numbered in the result, with "what": text,
      layout, pictures, shapes, position or size, notes, formatting, other), 20 each, each
      {"number", "title", ...}. ("changed_slides", not "changed": that key is the boolean.)

Exit codes
    0  the report is on stdout.
    2  a file cannot be read as KIND, or the comparison failed unexpectedly: one sentence on
       stderr says which file ("the original" or "the result") and why, never a traceback.

Time and memory (1 GiB, about 60 s): workbooks are streamed row by row, both sheets side by
side, through openpyxl's own cell parser (so values, dates and shared formulas read as openpyxl
reads them), with the sheet settings taken in the same pass; no workbook is loaded whole, and
past CELL_SECONDS the cells left are reported as not compared. Paragraphs and slides are matched
with difflib between anchors, within MATCH_SECONDS, else by position. Only the standard library,
openpyxl, python-docx, python-pptx and lxml are used.
"""

import bisect
import collections
import datetime
import difflib
import hashlib
import json
import os
import re
import sys
import time
import warnings
import zipfile
from xml.etree import ElementTree

from lxml import etree

KIND_NAMES = {"xlsx": "an Excel workbook", "docx": "a Word document", "pptx": "a PowerPoint deck"}
MAX_TEXT = 80  # characters of one string taken from a file
MAX_DIFF = 200  # characters of a word diff
CONTEXT_WORDS = 5  # unchanged words kept on each side of a change in a word diff
MAX_EXAMPLES = 5
MAX_HEADINGS = 10
MAX_LISTED = 20  # sheets, slides
STARTED = time.monotonic()
# Workbooks: seconds after the start past which no more cells are read. A million formula cells
# a side took 9-16 s on the development host, 16-25 s when the original holds them as shared
# formulas (which openpyxl translates cell by cell).
CELL_SECONDS = 40
# Restyled cells remembered per sheet (the others only counted), to leave out merged ones.
KEEP_RESTYLED = 100_000
# Paragraphs, tables, slides (see match()): seconds after the start for difflib, and the longest
# stretch it is given. Beyond AUTOJUNK_FROM items, anchors are looked for and difflib's autojunk
# bounds the time repeated items (empty paragraphs) cost.
MATCH_SECONDS = 30
MATCH_LIMIT = 20_000
AUTOJUNK_FROM = 2000
XML_PARSER = etree.XMLParser(remove_blank_text=True, resolve_entities=False, no_network=True)
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class InputProblem(Exception):
    """A file cannot be compared; the message is one sentence for the model."""


def clean(text, limit=MAX_TEXT):
    """A string from a file, safe to show: no control characters, at most ``limit`` characters."""
    text = CONTROL.sub(" ", str(text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def unreadable(side, kind, error):
    reason = str(error).split(". ")[0]  # the first sentence of the library's message
    reason = clean(f"{type(error).__name__}: {reason}", 200).rstrip(". ")
    return InputProblem(f"The {side} cannot be read as {KIND_NAMES[kind]} ({reason}).")


def load(side, kind, path, opener):
    """opener(path), with any failure told as one sentence naming the file."""
    if not zipfile.is_zipfile(path):
        raise InputProblem(f"The {side} cannot be read as {KIND_NAMES[kind]}: it is not a ZIP "
                           "package (another kind of file, or a truncated one).")
    try:
        return opener(path)
    except Exception as error:
        raise unreadable(side, kind, error) from None


def guarded(side, kind, items):
    """The items of a generator that reads a file, with a failure told as for load()."""
    try:
        yield from items
    except Exception as error:
        raise unreadable(side, kind, error) from None


def local(tag):
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def canon(element, skip_attrs=(), skip_tags=(), drop_false=False):
    """An XML element as a comparable value: names without prefixes, attributes sorted. With
    drop_false, "0", "false" and showButton="1" are left out: openpyxl writes such defaults."""
    if element is None:
        return None
    attrs = tuple(sorted(
        (local(k), v) for k, v in element.attrib.items() if local(k) not in skip_attrs and not (
            drop_false and (v in ("0", "false") or (local(k), v) == ("showButton", "1")))))
    children = tuple(canon(child, skip_attrs, skip_tags, drop_false) for child in element
                     if isinstance(child.tag, str) and local(child.tag) not in skip_tags)
    return local(element.tag), attrs, (element.text or "").strip(), children


def digest(part, digests):
    """SHA-256 of a package part's bytes, once per part (an image may be tens of megabytes)."""
    if id(part) not in digests:
        digests[id(part)] = hashlib.sha256(part.blob).hexdigest()
    return digests[id(part)]


def part_differences(package_a, package_b, digests):
    """Names of the parts (those reached by relationships, which the libraries save) whose
    content is in one file only. By content, not name: python-pptx renumbers slide parts. XML
    parts are serialized by the library, so a load-and-save compares equal."""
    sides = []
    for package in (package_a, package_b):
        parts = collections.defaultdict(list)
        for part in package.iter_parts():
            parts[digest(part, digests)].append(str(part.partname))
        sides.append(parts)
    return sorted({name for mine, theirs in (sides, sides[::-1])
                   for key, names in mine.items() if key not in theirs for name in names})


# ---------------------------------------------------------------------------------------------
# Sequences (paragraphs, tables, slides)


class BudgetMatcher(difflib.SequenceMatcher):
    """difflib's matcher, giving up (TimeoutError) once the deadline has passed."""

    def __init__(self, a, b, deadline):
        self.deadline = deadline
        super().__init__(None, a, b, autojunk=len(a) + len(b) > AUTOJUNK_FROM)

    def find_longest_match(self, alo=0, ahi=None, blo=0, bhi=None):
        if time.monotonic() > self.deadline:
            raise TimeoutError
        return super().find_longest_match(alo, ahi, blo, bhi)


def match(keys_a, keys_b):
    """Opcodes as difflib's (walk() pairs the items of any block by position) matching two
    sequences, and whether a stretch had to be paired by position. The common start and end are
    matched first; in a long middle, items found once on each side anchor the match (as
    "patience diff" does), and difflib only sees the stretches between anchors."""
    n_a, n_b = len(keys_a), len(keys_b)
    start = end = 0
    while start < min(n_a, n_b) and keys_a[start] == keys_b[start]:
        start += 1
    while end < min(n_a, n_b) - start and keys_a[n_a - 1 - end] == keys_b[n_b - 1 - end]:
        end += 1
    anchors = []
    if n_a + n_b - 2 * (start + end) > AUTOJUNK_FROM:
        anchors = unique_anchors(keys_a, start, n_a - end, keys_b, start, n_b - end)
    ops, by_position, i, j = [("equal", 0, start, 0, start)], False, start, start
    for anchor_i, anchor_j in anchors + [(n_a - end, n_b - end)]:
        if i < anchor_i and j < anchor_j and (anchor_i - i) + (anchor_j - j) <= MATCH_LIMIT:
            try:
                matcher = BudgetMatcher(keys_a[i:anchor_i], keys_b[j:anchor_j],
                                        STARTED + MATCH_SECONDS)
                ops += [(tag, x1 + i, x2 + i, y1 + j, y2 + j)
                        for tag, x1, x2, y1, y2 in matcher.get_opcodes()]
                i, j = anchor_i, anchor_j
            except TimeoutError:
                pass
        if i < anchor_i or j < anchor_j:
            ops.append(("replace", i, anchor_i, j, anchor_j))
            by_position = by_position or (i < anchor_i and j < anchor_j)
        ops.append(("equal", anchor_i, anchor_i + 1, anchor_j, anchor_j + 1))
        i, j = anchor_i + 1, anchor_j + 1
    ops[-1] = ("equal", n_a - end, n_a, n_b - end, n_b)
    return [op for op in ops if op[1] < op[2] or op[3] < op[4]], by_position


def unique_anchors(a, a1, a2, b, b1, b2):
    """(i, j) of the keys found once in a[a1:a2] and once in b[b1:b2]: the longest chain of
    them in the same order on both sides (patience sorting)."""
    count_a, count_b = collections.Counter(a[a1:a2]), collections.Counter(b[b1:b2])
    where_b = {b[j]: j for j in range(b1, b2) if count_b[b[j]] == 1}
    pairs = [(i, where_b[a[i]]) for i in range(a1, a2) if count_a[a[i]] == 1 and a[i] in where_b]
    tails, tail_js, back = [], [], []
    for k, (_, j) in enumerate(pairs):
        x = bisect.bisect_left(tail_js, j)
        back.append(tails[x - 1] if x else None)
        if x == len(tails):
            tails.append(k)
            tail_js.append(j)
        else:
            tails[x], tail_js[x] = k, j
    chain, k = [], tails[-1] if tails else None
    while k is not None:
        chain.append(pairs[k])
        k = back[k]
    return chain[::-1]


def walk(ops):
    """("pair", i, j), ("removed", i, None), ("added", None, j) in order: a block pairs its
    items one to one, and the surplus is removed or added."""
    for _tag, i1, i2, j1, j2 in ops:
        k = min(i2 - i1, j2 - j1)
        for x in range(k):
            yield "pair", i1 + x, j1 + x
        for i in range(i1 + k, i2):
            yield "removed", i, None
        for j in range(j1 + k, j2):
            yield "added", None, j


# ---------------------------------------------------------------------------------------------
# Workbooks

S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"


def xlsx_report(before, after):
    from openpyxl import load_workbook

    books = [load(side, "xlsx", path, lambda p: load_workbook(p, read_only=True))
             for side, path in (("original", before), ("result", after))]
    names_a, names_b = books[0].sheetnames, books[1].sheetnames
    renamed = {a: names_b[i] for i, a in enumerate(names_a) if a not in names_b
               and i < len(names_b) and names_b[i] not in names_a}
    report = {"kind": "xlsx", "changed": False,
              "sheets_added": [clean(b) for b in names_b
                               if b not in names_a and b not in renamed.values()],
              "sheets_removed": [clean(a) for a in names_a
                                 if a not in names_b and a not in renamed],
              "sheets_renamed": [{"before": clean(a), "after": clean(b)}
                                 for a, b in renamed.items()],
              "sheets": [], "other": []}
    pairs = [(a, renamed.get(a, a)) for a in names_a if a in names_b or a in renamed]
    paired = {b for _, b in pairs}
    if [b for _, b in pairs] != [b for b in names_b if b in paired]:
        report["other"].append("sheet order")
    changed_sheets = 0
    for name_a, name_b in pairs:
        if time.monotonic() > STARTED + CELL_SECONDS:
            report["other"].append("some sheets not compared (time limit)")
            break
        sheet = compare_sheet(books[0][name_a], books[1][name_b])
        if sheet["cells_changed"] or sheet["formatting_changed"] or sheet["other"]:
            changed_sheets += 1
            if len(report["sheets"]) < MAX_LISTED:
                report["sheets"].append(sheet)
    if defined_names(books[0], renamed) != defined_names(books[1], {}):
        report["other"].append("defined names")
    items = [workbook_items(side, path) for side, path in (("original", before), ("result", after))]
    report["other"] += [name for name in items[0] if items[0][name] != items[1][name]]
    report["changed"] = bool(report["sheets_added"] or report["sheets_removed"] or renamed
                             or changed_sheets or report["other"])
    return report


def cell_style(book, style_id):
    """A cell format resolved to comparable values: two workbooks number theirs differently."""
    from openpyxl.styles.numbers import BUILTIN_FORMATS, BUILTIN_FORMATS_MAX_SIZE

    try:
        xf = book._cell_styles[style_id]
        number = xf.numFmtId
        if number >= BUILTIN_FORMATS_MAX_SIZE:
            number = book._number_formats[number - BUILTIN_FORMATS_MAX_SIZE]
        return (book._fonts[xf.fontId], book._fills[xf.fillId], book._borders[xf.borderId],
                BUILTIN_FORMATS.get(number, number), book._alignments[xf.alignmentId],
                book._protections[xf.protectionId], bool(xf.quotePrefix))
    except (IndexError, TypeError):
        return "unknown style", style_id


def render_value(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, (str, int)):
        return str(value)
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()  # Excel has no date without a time: midnight is a date
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(getattr(value, "text", None), str):  # an array formula
        return value.text
    if type(value).__name__ == "DataTableFormula":
        return f"=TABLE({getattr(value, 'r1', '') or ''},{getattr(value, 'r2', '') or ''})"
    return str(value)


class SheetReader:
    """One worksheet, streamed: its rows through openpyxl's own cell parser, and its settings as
    small comparable values read in the same pass (openpyxl's objects for, say, a million merged
    ranges would not fit in memory)."""

    TAGS = {S + tag: name for tag, name in (
        ("cols", "column widths"), ("mergeCells", "merged cells"), ("sheetViews", "freeze panes"),
        ("conditionalFormatting", "conditional formatting"),
        ("dataValidations", "data validation"), ("autoFilter", "auto filter"))}

    def __init__(self, sheet):
        from openpyxl.worksheet._reader import WorkSheetParser

        self.book = book = sheet.parent
        self.source, self.dxfs = sheet._get_source(), book._differential_styles
        self.parser = WorkSheetParser(self.source, sheet._shared_strings, epoch=book.epoch,
                                      date_formats=book._date_formats,
                                      timedelta_formats=book._timedelta_formats)
        self.settings = {name: [] for name in self.TAGS.values()}

    def rows(self):
        """(row number, cells, (height, hidden)) per <row>, in file order. The stdlib's parser,
        as openpyxl's: twice as fast as lxml's when Python touches every cell, and it fetches
        no external entity. Each row is dropped once read, so memory stays flat."""
        sheet_data, row_tag = None, S + "row"
        with self.source:
            for event, element in ElementTree.iterparse(self.source, ("start", "end")):
                if event == "start":
                    if element.tag == S + "sheetData":
                        sheet_data = element
                elif element.tag == row_tag:
                    number, cells = self.parser.parse_row(element)
                    self.parser.row_dimensions.clear()  # openpyxl keeps them: memory
                    yield number, cells, (element.get("ht"), element.get("hidden") in ("1", "true"))
                    element.clear()
                    if sheet_data is not None and len(sheet_data):
                        sheet_data.remove(element)
                elif element.tag in self.TAGS:
                    self.read_setting(self.TAGS[element.tag], element)
                    element.clear()

    def read_setting(self, name, element):
        found = self.settings[name]
        if name == "column widths":
            found += [(int(c.get("min", 0)), int(c.get("max", 0)), c.get("width"),
                       c.get("hidden") in ("1", "true")) for c in element]
        elif name == "merged cells":
            found += [c.get("ref") for c in element]
        elif name == "freeze panes":
            pane = element.find(f"{S}sheetView/{S}pane")
            if pane is not None and pane.get("state") in ("frozen", "frozenSplit"):
                found.append(canon(pane, skip_attrs=("activePane",)))
        elif name == "conditional formatting":
            for rule in element.iter(S + "cfRule"):  # with its format, not the format's number
                try:
                    dxf = canon(self.dxfs[int(rule.get("dxfId"))].to_tree())
                except (IndexError, ValueError, TypeError):
                    dxf = rule.get("dxfId")
                found.append((element.get("sqref"), dxf,
                              canon(rule, skip_attrs=("dxfId",), drop_false=True)))
        else:
            found += [canon(e, drop_false=True)
                      for e in ([element] if name == "auto filter" else element)]

    def normalized(self):
        settings = {name: sorted(map(repr, found)) for name, found in self.settings.items()}
        joined = []  # column ranges, adjacent equal ones joined (openpyxl regroups them)
        for low, high, width, hidden in sorted(self.settings["column widths"]):
            value = (None if hidden or not width else float(width), hidden)
            if value == (None, False):
                continue
            if joined and joined[-1][1] + 1 == low and joined[-1][2] == value:
                joined[-1][1] = high
            else:
                joined.append([low, high, value])
        settings["column widths"] = joined
        return settings


def compare_sheet(sheet_a, sheet_b):
    """One sheet's entry of the report."""
    from openpyxl.utils import get_column_letter
    from openpyxl.utils.cell import range_boundaries

    entry = {"name": clean(sheet_b.title), "cells_changed": 0, "examples": [],
             "formatting_changed": 0, "formatting_examples": [], "rows_before": 0,
             "rows_after": 0, "columns_before": 0, "columns_after": 0, "other": []}
    if not (hasattr(sheet_a, "_get_source") and hasattr(sheet_b, "_get_source")):
        if type(sheet_a) is not type(sheet_b):
            entry["other"].append("sheet type")
        return entry  # chart sheets: charts are compared for the whole workbook
    readers = SheetReader(sheet_a), SheetReader(sheet_b)
    restyled, cut_at = compare_cells(readers, entry)
    # Cells under a merged range (all but its top-left one) show no style, and openpyxl drops
    # theirs when it saves: their differences do not count.
    merged = []
    for ref in readers[0].settings["merged cells"] + readers[1].settings["merged cells"]:
        try:
            c1, r1, c2, r2 = range_boundaries(ref)
            merged.append((c1 or 1, r1 or 1, c2 or 16384, r2 or 1048576))
        except (ValueError, TypeError):
            pass
    if merged and len(merged) * len(restyled) <= 5_000_000:
        kept = [(row, col) for row, col in restyled if not any(
            c1 <= col <= c2 and r1 <= row <= r2 and (row, col) != (r1, c1)
            for c1, r1, c2, r2 in merged)]
        entry["formatting_changed"] -= len(restyled) - len(kept)
        restyled = kept
    entry["formatting_examples"] = [f"{get_column_letter(col)}{row}"
                                    for row, col in restyled[:MAX_EXAMPLES]]
    if cut_at:
        entry["other"].append(f"cells after row {cut_at} not compared (time limit)")
        return entry
    settings = readers[0].normalized(), readers[1].normalized()
    entry["other"][:0] = [name for name in settings[0] if settings[0][name] != settings[1][name]]
    if sheet_a.sheet_state != sheet_b.sheet_state:
        entry["other"].append("visibility")
    return entry


def compare_cells(readers, entry):
    """Streams both sheets' rows side by side, counting into ``entry``. Returns the first
    KEEP_RESTYLED (row, column) with the same value and another style, and the row where the
    time ran out (None when every row was read). Runs for every cell: keep it lean."""
    from openpyxl.utils import get_column_letter

    rows = paired_rows(guarded("original", "xlsx", readers[0].rows()),
                       guarded("result", "xlsx", readers[1].rows()))
    same_style, restyled, heights_differ = {}, [], False
    for count, (number, (_, cells_a, format_a), (_, cells_b, format_b)) in enumerate(rows):
        if count % 256 == 0 and time.monotonic() > STARTED + CELL_SECONDS:
            return restyled, number - 1
        heights_differ = heights_differ or format_a != format_b
        for side, cells in (("before", cells_a), ("after", cells_b)):
            width = extent(cells)
            if width:
                entry["rows_" + side] = number
                entry["columns_" + side] = max(entry["columns_" + side], width)
        for a, b in paired_cells(cells_a, cells_b):
            value_a, value_b = a["value"], b["value"]
            if value_a != value_b or type(value_a) is not type(value_b):
                text_a, text_b = render_value(value_a), render_value(value_b)
                if text_a != text_b:  # else the same value, as 12 and 12.0
                    entry["cells_changed"] += 1
                    if len(entry["examples"]) < MAX_EXAMPLES:
                        entry["examples"].append({
                            "cell": f"{get_column_letter(a['column'])}{number}",
                            "before": clean(text_a), "after": clean(text_b)})
                    continue
            key = (a["style_id"], b["style_id"])
            same = same_style.get(key)
            if same is None:
                same = same_style[key] = (cell_style(readers[0].book, key[0])
                                          == cell_style(readers[1].book, key[1]))
            if not same:
                entry["formatting_changed"] += 1
                if len(restyled) < KEEP_RESTYLED:
                    restyled.append((number, a["column"]))
    if heights_differ:
        entry["other"].append("row heights")
    return restyled, None


def paired_rows(rows_a, rows_b):
    """Rows of both sheets side by side by row number; a row missing on one side is empty."""
    none = (0, (), (None, False))
    a, b = next(rows_a, None), next(rows_b, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):
            yield a[0], a, none
            a = next(rows_a, None)
        elif a is None or b[0] < a[0]:
            yield b[0], none, b
            b = next(rows_b, None)
        else:
            yield a[0], a, b
            a, b = next(rows_a, None), next(rows_b, None)


def paired_cells(cells_a, cells_b):
    """(cell, cell) for each column either row fills; an empty cell where a row has none."""
    if [c["column"] for c in cells_a] == [c["column"] for c in cells_b]:
        return zip(cells_a, cells_b)
    by_a, by_b = {c["column"]: c for c in cells_a}, {c["column"]: c for c in cells_b}
    return [(by_a.get(col) or {"column": col, "value": None, "style_id": 0},
             by_b.get(col) or {"column": col, "value": None, "style_id": 0})
            for col in sorted(by_a.keys() | by_b.keys())]


def extent(cells):
    """The last column of a row that holds a value, or 0."""
    for cell in reversed(cells):
        if cell["value"] is not None and cell["value"] != "":
            return cell["column"]
    return 0


def defined_names(book, renamed):
    """Workbook and sheet-scoped names, as (scope, name, value)."""
    names = [("", name, definition.value) for name, definition in book.defined_names.items()]
    for sheet in book.worksheets:
        scope = renamed.get(sheet.title, sheet.title)
        names += [(scope, name, definition.value)
                  for name, definition in getattr(sheet, "defined_names", {}).items()]
    return sorted(names)


def workbook_items(side, path):
    """Charts, images, comments and tables, as comparable values: openpyxl rewrites their parts
    when it saves, so what they show is compared, not their bytes."""
    items = {"charts": [], "images": [], "comments": [], "tables": []}
    a_ns = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
    c_ns = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if name.startswith("xl/media/"):
                    hashed = hashlib.sha256()
                    with archive.open(name) as part:
                        for chunk in iter(lambda: part.read(1 << 20), b""):
                            hashed.update(chunk)
                    items["images"].append(hashed.hexdigest())
                    continue
                kind = re.fullmatch(r"xl/(chart|comment|table)s/\1\d*\.xml|xl/(comment)s\d*\.xml",
                                    name)
                if not kind:
                    continue
                root = etree.fromstring(archive.read(name), XML_PARSER)
                if kind[1] == "chart":
                    items["charts"].append((
                        [local(e.tag) for e in root.iter(c_ns + "*") if e.tag.endswith("Chart")],
                        [e.text for e in root.iter(c_ns + "f")],
                        [e.text for e in root.iter(a_ns + "t") if e.text]))
                elif kind[1] == "table":
                    items["tables"].append((root.get("displayName"), root.get("ref")))
                else:
                    items["comments"] += [(c.get("ref"), "".join(c.itertext()))
                                          for c in root.iter(S + "comment")]
    except Exception as error:
        raise unreadable(side, "xlsx", error) from None
    return {label: sorted(map(repr, found)) for label, found in items.items()}


# ---------------------------------------------------------------------------------------------
# Word documents

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


# ---------------------------------------------------------------------------------------------
# Presentations

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


# ---------------------------------------------------------------------------------------------
# Entry point


def arguments():
    """KIND, BEFORE, AFTER from the runpy globals, or from the command line for manual runs."""
    given = globals()
    kind, before, after = given.get("KIND"), given.get("BEFORE"), given.get("AFTER")
    if not (kind and before and after):
        if len(sys.argv) != 4:
            raise InputProblem("usage: change_report.py KIND BEFORE AFTER (KIND: xlsx, docx, pptx)")
        kind, before, after = sys.argv[1:4]
    kind = str(kind).lower()
    if kind not in KIND_NAMES:
        raise InputProblem(f"Unknown kind {clean(kind, 20)!r}: expected xlsx, docx or pptx.")
    for side, path in (("original", before), ("result", after)):
        if not os.path.isfile(str(path)):
            raise InputProblem(f"The {side} cannot be opened: there is no file at {clean(path)}.")
    return kind, str(before), str(after)


def main():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the libraries' warnings would only be noise
            kind, before, after = arguments()
            report = {"xlsx": xlsx_report, "docx": docx_report, "pptx": pptx_report}[kind](
                before, after)
            output = json.dumps(report, ensure_ascii=True, separators=(",", ":"))
    except InputProblem as problem:
        print(problem, file=sys.stderr)
        return 2
    except MemoryError:
        print("The files are too large to compare within the sandbox's memory.", file=sys.stderr)
        return 2
    except Exception as error:  # never a traceback
        print(f"The comparison failed ({clean(f'{type(error).__name__}: {error}', 200)}).",
              file=sys.stderr)
        return 2
    sys.stdout.write(output + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
