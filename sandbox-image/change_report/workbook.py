"""The change report of an Excel workbook (KIND xlsx): both workbooks streamed sheet by sheet,
side by side, through openpyxl's own cell parser; charts, images, comments and tables compared by
what they show."""

import datetime
import hashlib
import re
import time
import zipfile
from xml.etree import ElementTree

from lxml import etree

from .core import MAX_EXAMPLES, MAX_LISTED, STARTED, canon, clean, guarded, load, local, unreadable


# Workbooks: seconds after the start past which no more cells are read. A million formula cells
# a side took 9-16 s on the development host, 16-25 s when the original holds them as shared
# formulas (which openpyxl translates cell by cell).
CELL_SECONDS = 40
# Restyled cells remembered per sheet (the others only counted), to leave out merged ones.
KEEP_RESTYLED = 100_000
XML_PARSER = etree.XMLParser(remove_blank_text=True, resolve_entities=False, no_network=True)
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
