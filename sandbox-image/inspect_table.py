"""file-agent table inspection: a fixed (not model-written) look at one tabular input file.

What it is for
    Its stdout opens the language model's first message in a data-analysis loop. It tells the
    model how the file must be loaded (encoding, delimiter, header row, sheet) and what the
    table holds, so the model's first script reads the data correctly instead of guessing.

How it is invoked
    Inside the sandbox container, with the input read-only at /work/in/<name>:

        import runpy
        runpy.run_path("/opt/file-agent/inspect_table.py",
                       init_globals={"KIND": "csv", "PATH": "/work/in/data.csv", "NAME": "data.csv"},
                       run_name="__main__")

    KIND is "csv" (any delimited text), "xlsx" or "xls", decided by the server from the bytes.
    For manual runs the globals may be left out: ``python3 inspect_table.py KIND PATH [NAME]``.

Output contract
    stdout: plain text with light markdown, bounded (about 8,000 characters at most, whatever
    the file's width or length). For each table (the CSV, or each Excel sheet) it gives a
    "How to load" line: a pandas call that reads it correctly, written with ``input_file_path``
    (the name the sandbox presets) and verified here by making exactly that call. Then shape,
    columns with dtypes and null counts, a numeric summary, five sample rows and notes
    (duplicate or empty columns, numbers stored as text, totals rows, ...).

Exit codes
    0  the inspection is on stdout.
    2  the file cannot be read as KIND (empty, binary, corrupt, no data) or the inspection
       failed unexpectedly: one sentence on stderr says what is wrong, never a traceback.

Only the standard library and pandas (with openpyxl/xlrd for Excel) are used.
"""

import codecs
import csv
import io
import math
import os
import re
import sys
import warnings

import pandas as pd

# The output must stay small enough to sit at the top of a prompt.
MAX_OUTPUT_CHARS = 8000
# Rows read with header=None to find the header row, and the columns of them looked at.
HEADER_SCAN_ROWS = 30
HEADER_SCAN_COLUMNS = 1000
# Excel sheets described in full; the rest are listed by name and size.
MAX_SHEETS_DESCRIBED = 10
# Columns listed one per line; wider tables get "... and N more".
MAX_COLUMNS_LISTED = 40
# Columns shown in the sample rows, and the width of one shown cell.
MAX_SAMPLE_COLUMNS = 12
MAX_CELL_CHARS = 24
SAMPLE_ROWS = 5
# Bytes of a CSV looked at for the delimiter, quoting and header (the encoding check reads all).
CSV_SAMPLE_BYTES = 128 * 1024
# Values per text column tested for numbers or dates stored as text.
TEXT_SAMPLE_VALUES = 300
# Cells of Excel data read in all, shared by the described sheets: openpyxl reads only about
# 100,000 cells a second, so a larger sheet is profiled from its first rows, and its row count
# is taken from the sheet's XML instead.
EXCEL_CELL_BUDGET = 120_000
EXCEL_MIN_PROFILE_ROWS = 500

CSV_DELIMITERS = [",", ";", "\t", "|"]
DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}

# Numbers written as text. Thousands groups of exactly three digits.
DECIMAL_COMMA = re.compile(r"^[-+]?(\d{1,3}(\.\d{3})+|\d+),\d+$")  # 1.234,56 or 12,5
DOT_THOUSANDS_ONLY = re.compile(r"^[-+]?\d{1,3}(\.\d{3}){2,}$")  # 1.234.567 (12.345 is ambiguous)
COMMA_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d+)?$")  # 1,234 or 1,234.56
PLAIN_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
DECORATED_NUMBER = re.compile(r"^[-+]?[$€£¥]?\s?[-+]?[\d.,' ]*\d\s?(%|[$€£¥]|EUR|USD|GBP)?$")
DATE_TEXT = re.compile(r"^(\d{1,4})[-/.](\d{1,2})[-/.](\d{1,4})([ T]\d{1,2}:\d{2}(:\d{2})?)?$")
TOTAL_LABEL = re.compile(r"^\s*(grand\s+)?(total|totals|sum|summe|gesamt|totaal|totale)\b", re.I)


class InputProblem(Exception):
    """The file cannot be read as its kind; the message is one sentence for the user."""


# ---------------------------------------------------------------------------------------------
# Small helpers


def human_size(size):
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} bytes"


def py_literal(value):
    """A Python literal for a keyword argument, with double-quoted strings."""
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        escaped = escaped.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
        return f'"{escaped}"'
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, type):
        return value.__name__  # dtype={"Date": str}
    return repr(value)


def load_call(function, kwargs):
    args = ["input_file_path"] + [f"{key}={py_literal(value)}" for key, value in kwargs.items()]
    return f"df = pd.{function}({', '.join(args)})"


def cut(text, limit):
    """One line of at most ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def show_name(name, limit=40):
    return cut(name, limit) if isinstance(name, str) else str(name)


def is_empty(value):
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, str):
        return not value.strip()
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # list-like values have no single answer
        return False


def looks_numeric_text(text):
    text = text.strip()
    return bool(
        PLAIN_NUMBER.match(text)
        or DECIMAL_COMMA.match(text)
        or COMMA_THOUSANDS.match(text)
        or DOT_THOUSANDS_ONLY.match(text)
    )


def is_label(value):
    """True for text that is not a number or a date."""
    if isinstance(value, str):
        text = value.strip()
        return not (looks_numeric_text(text) or DATE_TEXT.match(text))
    return False


def is_year(value):
    if isinstance(value, str):
        return bool(re.fullmatch(r"\s*(19|20)\d\d\s*", value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value).is_integer() and 1900 <= value <= 2100
    return False


def is_date(value):
    return hasattr(value, "year") and hasattr(value, "month")


def is_header_cell(value, below):
    """True for a cell that reads like a column name, given the cells below it. Years and dates
    count when the cells below are not years or dates themselves: reports often label columns
    2021, 2022 or Jan 2024, Feb 2024 over numbers."""
    if is_label(value):
        return True
    for same_kind in (is_year, is_date):
        if same_kind(value):
            return sum(1 for other in below if same_kind(other)) < len(below) / 2 or not below
    return False


def row_text(row, limit=120):
    cells = [str(cell).strip() for cell in row if not is_empty(cell)]
    return cut(" | ".join(cells), limit) if cells else "(blank)"


# ---------------------------------------------------------------------------------------------
# Header detection, shared by CSV and Excel


def find_header(rows):
    """Finds the header row among the first rows of a table (a list of lists of cells).

    Returns (header_index, data_start, note): header_index is None when the table has no
    header row; data_start is the first row of the table (the header row, or the first data row
    when there is none). Raises InputProblem when every row is empty.

    A row is a header candidate when it is
    - wide: at least half as many filled cells as the widest row (and two or more);
    - mostly names: 75% of its filled cells are text, or years/dates over other values;
    - over the data: it covers 60% of the columns that most of the next ten rows fill. An
      empty first cell counts as covered, since crosstabs leave that corner blank.
    The first candidate is the header, unless it is a preamble line such as "Client: ACME
    Period: Q1": a later candidate covers the data better, and either a narrow row ("Currency:
    EUR") separates them or the later one comes right after it and is all names over values.
    Title, "Report generated ..." and blank rows are narrow, so they are never candidates.
    Without a candidate, the table starts at its first wide row that covers the data, with no
    header.
    """
    rows = [list(row[:HEADER_SCAN_COLUMNS]) for row in rows]  # bounds the work on wide files
    filled = [sum(1 for cell in row if not is_empty(cell)) for row in rows]
    width = max(filled, default=0)
    if width == 0:
        raise InputProblem("The file has no data: every row is empty. Upload a file with data.")
    least = 1 if width == 1 else max(2, math.ceil(width / 2))
    first_filled = next(index for index, count in enumerate(filled) if count)

    def below(index):
        return [j for j in range(index + 1, min(len(rows), index + 11)) if filled[j]]

    def columns(index):
        cells = rows[index]
        used = {c for c, cell in enumerate(cells) if not is_empty(cell)}
        if cells and is_empty(cells[0]):
            used.add(0)  # the blank corner of a crosstab
        return used

    def coverage(index):
        """Share of the columns that the rows below mostly fill which this row fills too."""
        under = below(index)
        if not under:
            return 1.0
        counts = {}
        for j in under:
            for c, cell in enumerate(rows[j]):
                if not is_empty(cell):
                    counts[c] = counts.get(c, 0) + 1
        common = {c for c, n in counts.items() if n >= len(under) / 2} or set(counts)
        return len(common & columns(index)) / len(common)

    def wide(index):
        return len(columns(index)) >= least

    def candidate(index):
        under = below(index)
        if not under and index != first_filled:
            return False  # the last row of a table is data, whatever it holds
        names = 0
        for c, cell in enumerate(rows[index]):
            if not is_empty(cell):
                column = [rows[j][c] for j in under if c < len(rows[j]) and not is_empty(rows[j][c])]
                names += is_header_cell(cell, column)
        return wide(index) and names >= 0.75 * filled[index] and coverage(index) >= 0.6

    def over_values(index):
        """True when some name in this row stands over a column of numbers or dates."""
        under = below(index)
        for c, cell in enumerate(rows[index]):
            column = [rows[j][c] for j in under if c < len(rows[j]) and not is_empty(rows[j][c])]
            if is_label(cell) and column and sum(not is_label(v) for v in column) >= len(column) / 2:
                return True
        return False

    header = next((index for index in range(len(rows)) if candidate(index)), None)
    while header is not None:
        under = below(header)
        if not under:
            break
        if wide(under[0]):
            # A wide row right below: move down only to a row of names that stands over values
            # and covers more, as when "Client: ACME Period: Q1" sits on the real header.
            later = under[0]
            if not (candidate(later) and over_values(later)
                    and all(is_label(cell) for cell in rows[later] if not is_empty(cell))):
                break
        else:
            # A narrow row right below (a preamble line, or a blank-ish first data row): move
            # to the next wide row if it is a candidate that covers the data better.
            later = next((j for j in under if wide(j)), None)
            if later is None or not candidate(later):
                break
        if coverage(later) <= coverage(header):
            break
        header = later
    if header is not None:
        under = [rows[j] for j in below(header)]
        note = ""
        if under and all(is_label(cell) for row in under for cell in row if not is_empty(cell)):
            note = "the rows below it are text too, so check that these are column names"
        return header, header, note

    for index in range(len(rows)):
        if filled[index] and wide(index) and coverage(index) >= 0.8:
            return None, index, "the first rows hold values, not column names"
    return None, first_filled, "no row reads like column names"


def title_rows(rows, data_start):
    """The non-blank rows above the table, as (index, text)."""
    return [(i, row_text(rows[i])) for i in range(data_start) if not all(map(is_empty, rows[i]))]


# ---------------------------------------------------------------------------------------------
# CSV: encoding, dialect, header


def detect_encoding(path):
    """Returns (encoding for pandas or None for the default UTF-8, description).

    Decodes the whole file strictly (in chunks, so a stray byte deep in the file is found): a
    file that is UTF-8 up to row 90,000 would otherwise fail only when the model reads it.
    Order: UTF-16 (only with its byte-order mark), UTF-8, Windows-1252, and Latin-1, which
    accepts every byte and so always ends the search.
    """
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        if first_decode_error(path, "utf-16") is not None:
            raise InputProblem(
                "The file starts like UTF-16 text but does not decode as UTF-16; "
                "re-export it as UTF-8 CSV."
            )
        return "utf-16", 'UTF-16 with a byte-order mark (as Excel\'s "Unicode text" export writes)'
    has_bom = head.startswith(codecs.BOM_UTF8)
    failure = first_decode_error(path, "utf-8")
    if failure is None:
        if has_bom:
            return "utf-8-sig", "UTF-8 with a byte-order mark"
        return None, "valid UTF-8 (pandas' default)"
    utf8_reason = f"not valid UTF-8 (byte 0x{failure[1]:02X} at offset {failure[0]:,})"
    if first_decode_error(path, "cp1252") is None:
        return "cp1252", f"Windows-1252: {utf8_reason}, and it decodes as cp1252"
    return "latin-1", (
        f"Latin-1: {utf8_reason} nor valid cp1252; Latin-1 accepts any byte, "
        "so check that the accented characters below look right"
    )


def first_decode_error(path, encoding):
    """(offset, byte value) of the first byte that does not decode, or None."""
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    offset = 0  # bytes handed to the decoder so far
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(1 << 20)
            pending = len(decoder.getstate()[0])  # bytes of a character split across chunks
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                return offset - pending + error.start, error.object[error.start]
            if not chunk:
                return None
            offset += len(chunk)


def read_sample(path, encoding):
    """The first CSV_SAMPLE_BYTES of the file as text, cut at the last complete line."""
    with open(path, "rb") as handle:
        raw = handle.read(CSV_SAMPLE_BYTES + 1)
    complete = len(raw) <= CSV_SAMPLE_BYTES
    raw = raw[:CSV_SAMPLE_BYTES]
    text = raw.decode(encoding or "utf-8", errors="replace")
    if encoding in ("utf-8-sig", "utf-16"):
        text = text.lstrip("\ufeff")
    if not complete and "\n" in text:
        text = text[: text.rindex("\n") + 1]
    return text


def check_binary(path):
    """Refuses files that are not text: NUL bytes or many control characters."""
    with open(path, "rb") as handle:
        head = handle.read(64 * 1024)
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return
    signatures = {
        b"PK\x03\x04": "a ZIP archive (perhaps an .xlsx workbook)",
        b"\xd0\xcf\x11\xe0": "an old Office document (perhaps an .xls workbook)",
        b"%PDF": "a PDF document",
        b"\x89PNG": "a PNG image",
        b"\xff\xd8\xff": "a JPEG image",
        b"\x1f\x8b": "a gzip archive",
    }
    for magic, what in signatures.items():
        if head.startswith(magic):
            raise InputProblem(
                f"The file is not text but {what}; upload the table as CSV or as an Excel workbook."
            )
    controls = sum(1 for byte in head if byte < 32 and byte not in (9, 10, 12, 13))
    if b"\x00" in head or controls > 0.02 * len(head):
        raise InputProblem(
            "The file is not text: it contains binary data, so it cannot be read as CSV; "
            "export the table as CSV (or upload the original spreadsheet)."
        )


def parse_rows(text, delimiter, quotechar='"', limit=None):
    """The sample's first rows as lists of fields (a blank line is an empty row, so row
    numbers match pandas' skiprows)."""
    reader = csv.reader(io.StringIO(text), delimiter=delimiter, quotechar=quotechar, strict=False)
    rows = []
    try:
        for row in reader:
            rows.append(row)
            if limit and len(rows) >= limit:
                break
    except csv.Error:
        pass  # a broken quote late in the sample: keep what was read
    return rows


def delimiter_consistency(text, delimiter):
    """(share of non-blank lines with the most common field count, that count)."""
    counts = [len(row) for row in parse_rows(text, delimiter, limit=60) if row]
    if not counts:
        return 0.0, 0
    common = max(set(counts), key=lambda n: (counts.count(n), n))
    return counts.count(common) / len(counts), common


def detect_dialect(text):
    """Returns (delimiter or None for a single column, quotechar, skipinitialspace, how)."""
    sniffed = None
    try:
        sniffed = csv.Sniffer().sniff(text[:32 * 1024], delimiters="".join(CSV_DELIMITERS))
    except csv.Error:
        pass
    scores = {d: delimiter_consistency(text, d) for d in CSV_DELIMITERS}
    usable = {d: s for d, s in scores.items() if s[1] > 1}
    if not usable:
        return None, '"', False, "no delimiter found: the file has one column"

    # The most consistent delimiter wins; ties go to the one that splits lines into more
    # fields, then to ";" over "," (decimal commas make "," look consistent in ";" files).
    def rank(d):
        share, fields = usable[d]
        return (round(share, 2), fields, d == ";", d == "\t")

    best = max(usable, key=rank)
    quotechar = '"'
    skipinitialspace = False
    if sniffed is not None and sniffed.delimiter in usable and rank(sniffed.delimiter) >= rank(best):
        best = sniffed.delimiter
        how = "csv.Sniffer, confirmed by consistent field counts"
    else:
        how = "consistent field counts per line"
    if sniffed is not None and sniffed.delimiter == best:
        quotechar = sniffed.quotechar or '"'
        # The Sniffer says so on slim evidence; ask for most lines to have a space after
        # every delimiter before adding skipinitialspace=True to the load call.
        lines = [line for line in text.splitlines() if best in line]
        spaced = sum(1 for line in lines if line.count(best) == line.count(best + " "))
        skipinitialspace = bool(sniffed.skipinitialspace) and spaced >= 0.8 * len(lines)
    share, fields = usable[best]
    how += f": {fields} fields on {share:.0%} of the first lines"
    return best, quotechar, skipinitialspace, how


def describe_quoting(text, delimiter, quotechar):
    if quotechar not in text:
        return "no quoted fields in the first lines"
    return f"fields quoted with {quotechar} where needed (pandas handles this)"


def inspect_csv(path, name, size):
    if size == 0:
        raise InputProblem("The file is empty: it has no rows. Upload a file with data.")
    check_binary(path)
    encoding, encoding_reason = detect_encoding(path)
    text = read_sample(path, encoding)
    if not text.strip():
        raise InputProblem(
            "The file has no data: it holds only blank lines. Upload a file with data."
        )
    delimiter, quotechar, skipinitialspace, delimiter_how = detect_dialect(text)
    # With no delimiter, split on a character that never occurs: one field per line.
    rows = parse_rows(text, delimiter or "\x1f", quotechar, limit=HEADER_SCAN_ROWS)
    header, data_start, header_note = find_header(rows)
    above = title_rows(rows, data_start)

    kwargs = {}
    if encoding:
        kwargs["encoding"] = encoding
    if delimiter and delimiter != ",":
        kwargs["sep"] = delimiter
    if quotechar != '"':
        kwargs["quotechar"] = quotechar
    if skipinitialspace:
        kwargs["skipinitialspace"] = True
    if above:
        # skiprows counts lines of the file from the top, blank ones included.
        kwargs["skiprows"] = data_start
    if header is None:
        kwargs["header"] = None

    df, kwargs, read_notes = read_csv_checked(path, kwargs)
    df, kwargs, number_notes = apply_number_format(path, df, kwargs)
    df, kwargs, index_notes = apply_index_column(path, df, kwargs)

    lines = [f"# Input file: {name} (delimited text, {human_size(size)})", ""]
    lines.append(f"- Encoding: {encoding or 'utf-8'} — {encoding_reason}.")
    non_ascii = sorted({ch for ch in text if ord(ch) > 127 and ch.isprintable()})
    if non_ascii:
        shown = " ".join(non_ascii[:12]) + (" …" if len(non_ascii) > 12 else "")
        lines.append(f"  Non-ASCII characters seen: {shown}")
    if delimiter:
        lines.append(
            f"- Delimiter: {py_literal(delimiter)} ({DELIMITER_NAMES[delimiter]}), "
            f"found by {delimiter_how}."
        )
    else:
        lines.append(f"- Delimiter: none ({delimiter_how}).")
    lines.append(f"- Quoting: {describe_quoting(text, delimiter or ',', quotechar)}.")
    skip_arg = f"skiprows={data_start}" if "skiprows" in kwargs else None
    lines.append(header_line("line", header, data_start, header_note, skip_arg, above))
    table = {
        "title": None,
        "load": load_call("read_csv", kwargs),
        "df": df,
        "notes": read_notes + number_notes + index_notes,
        "header_cells": rows[header] if header is not None else None,
        "partial": None,
    }
    return "\n".join(lines), [table]


def header_line(unit, header, data_start, note, pandas_arg, above, shown_rows=6):
    """One bullet saying where the header is (pandas_arg: the argument that gets there, or
    None when pandas' default does), then up to ``shown_rows`` title rows above the table."""
    where = f" ({pandas_arg})" if pandas_arg else ""
    if header is None:
        text = (f"- Header: none detected ({note}); read with header=None, so columns are "
                f"numbered 0, 1, 2, ...")
        if data_start:
            text += f"; the table starts at {unit} {data_start + 1}{where}"
    else:
        text = f"- Header: {unit} {header + 1}{where}"
        if above:
            text += f", below {len(above)} title/preamble row(s) that are not part of the table"
        elif not pandas_arg:
            text += f" (the first non-blank {unit}, pandas' default)"
        if note:
            text += f"; {note}"
    lines = [text + "."]
    for index, content in above[:shown_rows]:
        lines.append(f"  {unit} {index + 1}: {content}")
    if len(above) > shown_rows:
        lines.append(f"  ... and {len(above) - shown_rows} more {unit}s above the table")
    return "\n".join(lines)


def read_csv_checked(path, kwargs):
    """Reads the whole CSV with kwargs; retries with the fixes a real failure calls for."""
    notes = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            df = pd.read_csv(path, **kwargs)
        except pd.errors.EmptyDataError:
            raise InputProblem("The file has no data: no columns could be read from it. "
                               "Upload a file with data.") from None
        except pd.errors.ParserError as error:
            # Some lines have more fields than the header: say which, and skip them.
            kwargs = dict(kwargs, on_bad_lines="skip")
            try:
                df = pd.read_csv(path, **kwargs)
            except pd.errors.ParserError as again:
                raise InputProblem(f"The file could not be parsed as a delimited table "
                                   f"({cut(again, 160)}); check that it is a CSV export.") from None
            notes.append(
                f"Some lines have more fields than the header ({cut(error, 140)}); "
                'the load line skips them with on_bad_lines="skip" — check whether they matter.'
            )
    if any(issubclass(w.category, pd.errors.DtypeWarning) for w in caught):
        # Mixed types within a column: low_memory=False gives one consistent dtype per column.
        kwargs = dict(kwargs, low_memory=False)
        df = pd.read_csv(path, **kwargs)
        notes.append("Some columns mix numbers and text; low_memory=False reads each as one dtype.")
    return df, kwargs, notes


# ---------------------------------------------------------------------------------------------
# Numbers and dates stored as text


def text_values(series):
    """Up to TEXT_SAMPLE_VALUES of the column's text values (not its numbers or dates),
    spread over the whole column."""
    values = spread_sample(series, TEXT_SAMPLE_VALUES)
    return [v.strip() for v in values if isinstance(v, str) and v.strip()]


def spread_sample(series, count):
    """About ``count`` non-null values spread over the column, plus its last few (where
    totals and notes sit), so that a long column costs no more than a short one."""
    values = series.dropna()
    if len(values) <= count:
        return list(values)
    step = max(1, len(values) // count)
    return list(values.iloc[::step]) + list(values.iloc[-10:])


def mixed_type_notes(df):
    """Text columns that also hold numbers or dates: usually a stray label ("Total", "n/a")
    that turned the whole column into text."""
    notes = []
    for column in object_columns(df):
        values = spread_sample(df[column], 2000)
        texts = [v for v in values if isinstance(v, str)]
        others = [v for v in values if not isinstance(v, str)]
        if texts and others and len(others) >= len(texts):
            kinds = sorted({"dates" if hasattr(v, "year") else "numbers" for v in others})
            example = cut(texts[0], 30)
            notes.append(f"{show_name(column, 30)} mixes {' and '.join(kinds)} with text "
                         f"(e.g. {example!r}), so its dtype is object; clean or drop those rows.")
        if len(notes) >= 4:
            break
    return notes


def number_style(values):
    """How a text column writes numbers, or None if it does not hold numbers.

    "decimal comma" (1.234,56 / 12,5), "comma thousands" (1,234.56 / 1,234,567), "ambiguous
    comma" (only values like 1,234, which read either way), "mixed" (both styles), or
    "decorated" (currency signs, percent). Thousands groups must have exactly three digits.
    """
    patterns = (PLAIN_NUMBER, DECIMAL_COMMA, COMMA_THOUSANDS, DOT_THOUSANDS_ONLY)
    numeric = [v for v in values if any(p.match(v) for p in patterns)]
    if len(values) >= 2 and len(numeric) >= 0.95 * len(values):
        decimal_comma = any(
            (DECIMAL_COMMA.match(v) and not COMMA_THOUSANDS.match(v)) or DOT_THOUSANDS_ONLY.match(v)
            for v in numeric
        )
        comma_thousands = any(COMMA_THOUSANDS.match(v) and not DECIMAL_COMMA.match(v)
                              for v in numeric)
        if decimal_comma and comma_thousands:
            return "mixed"
        if decimal_comma:
            return "decimal comma"
        if comma_thousands:
            return "comma thousands"
        if any("," in v for v in numeric):
            return "ambiguous comma"
        return None  # plain numbers mixed with something pandas could not parse
    symbols = ("%", "$", "€", "£", "¥", "EUR", "USD", "GBP")
    decorated = [v for v in values if DECORATED_NUMBER.match(v)]
    if len(values) >= 2 and len(decorated) >= 0.95 * len(values) and any(
        symbol in v for v in decorated for symbol in symbols
    ):
        return "decorated"
    return None


def number_styles(df):
    """{column: style} for the text columns that hold numbers (see number_style)."""
    styles = {}
    for column in object_columns(df):
        style = number_style(text_values(df[column]))
        if style:
            styles[column] = style
    return styles


def numeric_columns(df):
    return [c for c, dtype in zip(df.columns, df.dtypes) if dtype.kind in "iuf"]


def object_columns(df):
    dtypes = df.dtypes.iloc[:200]
    return [c for c, dtype in zip(dtypes.index, dtypes) if dtype == object]


def number_format_candidates(styles, df):
    """The decimal=/thousands= arguments worth trying, most specific first."""
    kinds = set(styles.values())
    if "decimal comma" in kinds and "comma thousands" not in kinds:
        dotted = any(
            DOT_THOUSANDS_ONLY.match(v) or re.match(r"^[-+]?\d{1,3}(\.\d{3})+,", v)
            for column, style in styles.items() if style == "decimal comma"
            for v in text_values(df[column])
        )
        if dotted:
            return [{"decimal": ",", "thousands": "."}, {"decimal": ","}]
        return [{"decimal": ","}, {"decimal": ",", "thousands": "."}]
    if "comma thousands" in kinds and "decimal comma" not in kinds:
        return [{"thousands": ","}]
    return []


def same_numbers(before, after):
    """True when a numeric column reads the same both ways (a thousands="." would silently
    turn 1.5 into 15, so every column that was already numeric must be unchanged)."""
    if after.dtype.kind not in "iuf" or len(before) != len(after):
        return False
    left, right = before.to_numpy(dtype=float), after.to_numpy(dtype=float)
    both_nan = (left != left) & (right != right)
    return bool(((left == right) | both_nan).all())


def apply_number_format(path, df, kwargs):
    """Adds decimal=/thousands= to the load call when text columns show them, keeping them
    only if the re-read makes those columns numeric and changes no other column.

    pandas strips a thousands separator wherever it stands, so thousands="." also turns dates
    like 01.02.2024 into the number 1022024; such columns are pinned as text with dtype=.
    """
    styles = number_styles(df)
    notes = []
    fixed = []
    for extra in number_format_candidates(styles, df):
        trial_kwargs = dict(kwargs, **extra)
        trial = try_read_csv(path, trial_kwargs, df)
        if trial is None:
            continue
        collateral = [c for c, before, after in zip(df.columns, df.dtypes, trial.dtypes)
                      if c not in styles and before == object and after != object]
        if collateral:
            trial_kwargs["dtype"] = {c: str for c in collateral}
            trial = try_read_csv(path, trial_kwargs, df)
            if trial is None:
                continue
        numeric_before = numeric_columns(df)
        if not all(same_numbers(df[c], trial[c]) for c in numeric_before):
            continue
        fixed = [c for c in styles if trial[c].dtype.kind in "iuf"]
        if fixed:
            df, kwargs = trial, trial_kwargs
            shown = ", ".join(show_name(c, 30) for c in fixed[:8])
            arguments = ", ".join(f"{k}={py_literal(v)}" for k, v in extra.items())
            if "decimal" in extra:
                example = "1.234,56" if "thousands" in extra else "12,5"
                notes.append(f"Numbers use a decimal comma (e.g. {example}): the load line passes "
                             f"{arguments}, which makes these columns numeric: {shown}.")
            else:
                notes.append("Numbers use commas for thousands (e.g. 1,234.56): the load line "
                             f"passes {arguments}, which makes these columns numeric: {shown}.")
            if collateral:
                pinned = ", ".join(show_name(c, 30) for c in collateral[:8])
                notes.append(f"{arguments} would also mangle {pinned} (e.g. dates like "
                             "01.02.2024), so the load line keeps them as text with dtype=.")
            break
    notes += text_number_notes({c: s for c, s in styles.items() if c not in fixed})
    return df, kwargs, notes


def try_read_csv(path, kwargs, like):
    """The CSV read with kwargs, or None if that fails or gives other columns than ``like``."""
    try:
        trial = pd.read_csv(path, **kwargs)
    except (ValueError, pd.errors.ParserError):
        return None
    return trial if list(trial.columns) == list(like.columns) else None


def text_number_notes(styles):
    if not styles:
        return []
    shown = ", ".join(f"{show_name(c, 30)} ({s})" for c, s in list(styles.items())[:8])
    more = f" and {len(styles) - 8} more" if len(styles) > 8 else ""
    return [f"Numbers stored as text in: {shown}{more}. Convert with pd.to_numeric after "
            "removing the thousands separators and symbols (and turning a decimal comma into "
            "a dot), e.g. pd.to_numeric(df[col].str.replace(\".\", \"\").str.replace(\",\", "
            "\".\"), errors=\"coerce\") for 1.234,56."]


def date_text_notes(df):
    notes = []
    for column in object_columns(df):
        values = text_values(df[column])
        matches = [DATE_TEXT.match(v) for v in values]
        if len(values) < 2 or sum(1 for m in matches if m) < 0.9 * len(values):
            continue
        firsts = [int(m.group(1)) for m in matches if m]
        seconds = [int(m.group(2)) for m in matches if m]
        if max(firsts) > 31:
            hint = 'pd.to_datetime(df[col])'  # year first, ISO-like
        elif max(firsts) > 12:
            hint = "pd.to_datetime(df[col], dayfirst=True)"
        elif max(seconds) > 12:
            hint = "pd.to_datetime(df[col], dayfirst=False)"
        else:
            hint = "pd.to_datetime(df[col], dayfirst=...) (day/month order is ambiguous here)"
        notes.append(f"{show_name(column, 30)} holds dates as text, e.g. {values[0]!r}: {hint}.")
        if len(notes) >= 4:
            break
    return notes


def apply_index_column(path, df, kwargs):
    """A nameless first column counting 0, 1, 2, ... (or from 1) is the index that
    DataFrame.to_csv writes: index_col=0 reads it as the index instead of as data."""
    if len(df) == 0 or len(df.columns) < 2 or df.columns[0] != "Unnamed: 0":
        return df, kwargs, []
    first = df.iloc[:, 0]
    if first.dtype.kind == "i" and first.iloc[0] in (0, 1) and (first.diff().iloc[1:] == 1).all():
        kwargs = dict(kwargs, index_col=0)
        note = ("The first column has no name and counts 0, 1, 2, ...: it is a saved index, so "
                "the load line reads it with index_col=0.")
        return pd.read_csv(path, **kwargs), kwargs, [note]
    return df, kwargs, []


# ---------------------------------------------------------------------------------------------
# Excel


def inspect_excel(path, name, size, kind):
    if size == 0:
        raise InputProblem("The file is empty: it has no bytes. Upload the workbook again.")
    label = "Excel workbook (.xlsx)" if kind == "xlsx" else "legacy Excel workbook (.xls)"
    try:
        workbook = pd.ExcelFile(path)
        sheet_names = list(workbook.sheet_names)
    except Exception as error:  # corrupt zip, bad OLE, encryption, wrong format: all one answer
        raise InputProblem(excel_open_problem(kind, error)) from None
    if not sheet_names:
        raise InputProblem("The workbook has no sheets. Upload a workbook with data.")

    described = sheet_names[:MAX_SHEETS_DESCRIBED]
    cell_budget = EXCEL_CELL_BUDGET // len(described)
    tables = []
    summaries = {}
    for sheet in described:
        table, summary = inspect_sheet(workbook, path, sheet, kind, cell_budget)
        summaries[sheet] = summary
        if table is not None:
            tables.append(table)
    if not tables:
        if any("could not be read" in s for s in summaries.values()):
            reasons = "; ".join(f'"{k}": {v}' for k, v in summaries.items())
            raise InputProblem(f"No sheet of the workbook could be read ({cut(reasons, 300)}).")
        raise InputProblem("The workbook has no data: every sheet is empty. "
                           "Upload a workbook with data.")

    lines = [f"# Input file: {name} ({label}, {human_size(size)})", ""]
    lines.append(f"Sheets ({len(sheet_names)}):")
    for sheet in sheet_names[:40]:
        summary = summaries.get(sheet) or declared_dimensions(workbook, sheet)
        lines.append(f"- {py_literal(sheet)}: {summary}")
    if len(sheet_names) > 40:
        lines.append(f"- ... and {len(sheet_names) - 40} more sheets")
    if len(sheet_names) > MAX_SHEETS_DESCRIBED:
        lines.append(
            f"Only the first {MAX_SHEETS_DESCRIBED} sheets are described below; read the others "
            'the same way, with sheet_name="...".'
        )
    if len(tables) > 1:
        lines.append('To read every sheet at once: sheets = pd.read_excel(input_file_path, '
                     'sheet_name=None) gives a dict of DataFrames (header rows may differ per sheet).')
    return "\n".join(lines), tables


def excel_open_problem(kind, error):
    reason = cut(f"{type(error).__name__}: {error}", 160)
    if isinstance(error, ImportError):
        # Not the file's fault: pandas needs xlrd >= 2.0.1 for .xls, and the image lacks it.
        return (f"This sandbox cannot read .{kind} workbooks ({reason}); open the file in Excel "
                "or LibreOffice, save it as .xlsx or CSV, and upload that.")
    if kind == "xls":
        return (f"The file could not be opened as a legacy Excel workbook (.xls) ({reason}); "
                "open it in Excel or LibreOffice and save it as .xlsx or CSV, then upload that.")
    return (f"The file could not be opened as an Excel workbook (.xlsx) ({reason}); it may be "
            "damaged or password-protected: re-save it as .xlsx (without a password) or as CSV.")


def declared_dimensions(workbook, sheet):
    """A sheet's size without parsing its cells, for sheets not described."""
    try:
        book = workbook.book
        if hasattr(book, "sheet_by_name"):  # xlrd
            handle = book.sheet_by_name(sheet)
            return f"{handle.nrows} rows x {handle.ncols} columns (not described)"
        rows = sheet_row_count(workbook, sheet)
        columns = book[sheet].max_column
        if rows and columns:
            return f"about {rows} rows x {columns} columns (not described)"
    except Exception:
        pass
    return "size unknown (not described)"


def sheet_row_count(workbook, sheet):
    """The number of the sheet's last row (1-based), read cheaply; None when unknown.

    xlrd knows it. openpyxl knows it when the sheet declares its dimension (Excel always
    writes one); otherwise the last <row r="N"> of the sheet's XML gives it, found by
    streaming the XML rather than parsing every cell.
    """
    book = workbook.book
    if hasattr(book, "sheet_by_name"):
        return book.sheet_by_name(sheet).nrows
    handle = book[sheet]
    if handle.max_row:
        return handle.max_row
    last = None
    row_number = re.compile(rb"<(?:\w+:)?row\b[^>]*?\br=\"(\d+)\"")
    source = handle._get_source()  # openpyxl's own opener for the sheet's XML part
    try:
        previous = b""
        while chunk := source.read(1 << 20):
            found = row_number.findall(previous + chunk)
            if found:
                last = int(found[-1])
            previous = chunk[-200:]  # a tag cut between two chunks
    finally:
        source.close()
    return last


def inspect_sheet(workbook, path, sheet, kind, cell_budget):
    """Returns (table or None, one-line summary for the sheet list)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # openpyxl's style and validation warnings
            raw = workbook.parse(sheet, header=None, nrows=HEADER_SCAN_ROWS)
    except Exception as error:
        return None, f"could not be read ({cut(f'{type(error).__name__}: {error}', 120)})"
    rows = [[None if is_empty(v) else v for v in row] for row in raw.itertuples(index=False)]
    if not any(not is_empty(v) for row in rows for v in row):
        return None, "empty"
    header, data_start, header_note = find_header(rows)
    above = title_rows(rows, data_start)

    kwargs = {"sheet_name": sheet}
    if header is None:
        kwargs["header"] = None
        if data_start:
            kwargs["skiprows"] = data_start
    elif header:
        kwargs["header"] = header

    # Read at most cell_budget cells: one row more than that allows tells whether there is more.
    row_cap = max(EXCEL_MIN_PROFILE_ROWS, cell_budget // max(raw.shape[1], 1))
    read_kwargs = {k: v for k, v in kwargs.items() if k != "sheet_name"}
    read_kwargs["nrows"] = row_cap + 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            df = workbook.parse(sheet, **read_kwargs)
    except Exception as error:
        return None, f"could not be read ({cut(f'{type(error).__name__}: {error}', 120)})"
    partial = None
    total_rows = len(df)
    if len(df) > row_cap:
        df = df.iloc[:row_cap]
        try:
            last_row = sheet_row_count(workbook, sheet)
        except Exception:
            last_row = None
        total_rows = last_row - data_start - (header is not None) if last_row else None
        size = f"about {total_rows:,} data rows" if total_rows else "more rows"
        partial = (f"The sheet has {size}: this profile covers the first {row_cap:,} "
                   f"(the load line reads them all, which takes a while for a large sheet)")

    notes = text_number_notes(number_styles(df))
    if kind == "xlsx" and partial is None and formulas_without_values(path, sheet, df):
        notes.append("Some cells are formulas without saved results (the file was written by a "
                     "program, not saved in Excel), so pandas reads them as empty.")
    rows_label = "many" if total_rows is None else f"{total_rows:,}"
    summary = f"{'about ' if partial else ''}{rows_label} data rows x {df.shape[1]} columns"
    if header:
        summary += f", header in row {header + 1}"
    pandas_arg = ", ".join(f"{k}={v}" for k, v in kwargs.items() if k != "sheet_name") or None
    table = {
        "title": f"## Sheet {py_literal(sheet)}",
        "header": ("row", header, data_start, header_note, pandas_arg, above),
        "load": load_call("read_excel", kwargs),
        "df": df,
        "notes": notes,
        "header_cells": rows[header] if header is not None else None,
        "partial": partial,
    }
    return table, summary


def formulas_without_values(path, sheet, df):
    """True when a sheet with an all-empty column holds formulas in its first rows (openpyxl
    keeps no values for formulas that were never calculated). Only asked of sheets read whole,
    since opening the workbook again costs as much as reading the sheet."""
    if len(df) == 0 or df.notna().any().all():
        return False
    try:
        from openpyxl import load_workbook

        book = load_workbook(path, read_only=True, data_only=False)
        try:
            for row in book[sheet].iter_rows(max_row=50, values_only=True):
                if any(isinstance(v, str) and v.startswith("=") for v in row):
                    return True
        finally:
            book.close()
    except Exception:
        return False
    return False


# ---------------------------------------------------------------------------------------------
# Describing one table (shared)


def column_notes(df, nulls, header_cells):
    notes = []
    if header_cells is not None:
        names = [str(c).strip() for c in header_cells if not is_empty(c)]
        seen = {}
        for n in names:
            seen[n] = seen.get(n, 0) + 1
        duplicated = [f"{show_name(n, 30)} (x{k})" for n, k in seen.items() if k > 1]
        if duplicated:
            notes.append("Duplicate column names: " + ", ".join(duplicated[:8]) +
                         '; pandas renames the repeats "name.1", "name.2", ...')
    unnamed = [c for c in df.columns if isinstance(c, str) and c.startswith("Unnamed: ")]
    empty = list(df.columns[(nulls == len(df)).to_numpy()]) if len(df) else []
    if empty:
        shown = ", ".join(show_name(c, 30) for c in empty[:8])
        more = f" and {len(empty) - 8} more" if len(empty) > 8 else ""
        notes.append(f"Fully empty columns: {shown}{more}; drop them with "
                     "df = df.dropna(axis=1, how=\"all\").")
    nameless = [c for c in unnamed if c not in empty]
    if nameless:
        notes.append("Columns without a name in the header (pandas calls them \"Unnamed: N\"): "
                     + ", ".join(nameless[:8]) + ".")
    numbered = [c for c in df.columns if not isinstance(c, str)]
    if header_cells is not None and numbered:
        example = numbered[0]
        access = f"df[{example!r}], not df[\"{example}\"]" if isinstance(example, int) else ""
        notes.append(f"Some column names are numbers or dates, not text (e.g. {example}): write "
                     f"{access + ', or make them text with ' if access else ''}"
                     "df.columns = df.columns.astype(str).")
    padded = [c for c in df.columns if isinstance(c, str) and c != c.strip()]
    if padded:
        notes.append("Some column names have leading/trailing spaces (e.g. "
                     f"{py_literal(padded[0])}); df.columns = df.columns.str.strip() fixes that.")
    return notes


def footer_notes(df):
    """Totals and notes below the data, which would distort sums and counts."""
    if len(df) < 3:
        return []
    notes = []
    totals_rows = 0
    for from_end in (1, 2, 3):
        labels = [v for v in df.iloc[-from_end].values[:3] if isinstance(v, str)]
        if any(TOTAL_LABEL.match(v) for v in labels):
            notes.append(f"The row {from_end} from the end (index {df.index[-from_end]}) looks "
                         f"like a totals row ({cut(labels[0], 30)!r}); drop it before summing.")
            totals_rows = from_end
            break
    width = df.shape[1]
    if width >= 3:
        typical = df.head(50).notna().sum(axis=1).median()
        counts = df.notna().sum(axis=1).iloc[-5:].tolist()
        sparse = 0
        for position, count in enumerate(reversed(counts), start=1):
            if position <= totals_rows:
                continue  # already reported as totals
            if count <= max(1, width // 4) and typical > 2 * count:
                sparse += 1
            else:
                break
        if sparse:
            notes.append(f"The last {sparse} row(s) are nearly empty (footnotes?); "
                         f"consider dropping them.")
    return notes


def profile_table(table):
    """Computes once what every level of detail shows: null counts, numeric ranges, notes."""
    df = table["df"]
    table["nulls"] = df.isna().sum()
    numeric = numeric_columns(df)
    table["numeric_count"] = len(numeric)
    ranges = []
    for column in numeric[:20]:
        values = df[column]
        if values.notna().any():
            ranges.append(f"- {show_name(column)}: {values.min():.6g} / {values.max():.6g} / "
                          f"{values.mean():.6g}")
        else:
            ranges.append(f"- {show_name(column)}: all null")
    table["ranges"] = ranges
    notes = table["notes"] + column_notes(df, table["nulls"], table.get("header_cells"))
    table["all_notes"] = notes + mixed_type_notes(df) + date_text_notes(df) + footer_notes(df)


def columns_block(table, limit):
    df, nulls = table["df"], table["nulls"]
    lines = [f"Columns ({df.shape[1]}; name: dtype, nulls if any):"]
    for column, dtype, count in zip(df.columns[:limit], df.dtypes.iloc[:limit], nulls.iloc[:limit]):
        null_text = f", {count:,} null" if count else ""
        lines.append(f"- {show_name(column)}: {dtype}{null_text}")
    if df.shape[1] > limit:
        rest = df.columns[limit:]
        names = cut(", ".join(show_name(c, 30) for c in rest), 300)
        with_nulls = int((nulls.iloc[limit:] > 0).sum())
        lines.append(f"- ... and {len(rest)} more ({with_nulls} with nulls): {names}")
    return "\n".join(lines)


def numeric_block(table, limit):
    if not table["ranges"]:
        return ""
    lines = ["Numeric columns (min / max / mean):"] + table["ranges"][:limit]
    if table["numeric_count"] > limit:
        lines.append(f"- ... and {table['numeric_count'] - limit} more numeric columns")
    return "\n".join(lines)


def sample_block(df, max_columns):
    if len(df) == 0:
        return "No data rows: the table has column names only."
    sample = df.head(SAMPLE_ROWS).iloc[:, :max_columns].copy()
    sample.columns = [show_name(c, MAX_CELL_CHARS) for c in sample.columns]
    for position in range(sample.shape[1]):
        if sample.dtypes.iloc[position] == object:  # by position: names may repeat
            sample.isetitem(position, sample.iloc[:, position].map(
                lambda v: cut(v, MAX_CELL_CHARS) if isinstance(v, str) else v
            ))
    text = sample.to_string(max_colwidth=MAX_CELL_CHARS, line_width=None)
    lines = [f"First {len(sample)} rows:", "```", text, "```"]
    if df.shape[1] > max_columns:
        lines.insert(1, f"(first {max_columns} of {df.shape[1]} columns)")
    return "\n".join(lines)


def render_table(table, detail):
    """The text for one table at a level of detail: 2 full, 1 compact, 0 minimal."""
    df = table["df"]
    parts = []
    if table.get("title"):
        parts.append(table["title"])
    if table.get("header"):
        parts.append(header_line(*table["header"], shown_rows={2: 6, 1: 3, 0: 1}[detail]))
    parts.append(f"**How to load:** `{table['load']}`")
    if table.get("partial"):
        shape = f"Shape: {df.shape[1]} columns. {table['partial']}."
    else:
        shape = f"Shape: {len(df):,} rows x {df.shape[1]} columns (as loaded above)."
    parts.append(shape)
    parts.append(columns_block(table, {2: MAX_COLUMNS_LISTED, 1: 15, 0: 6}[detail]))
    if detail >= 1:
        block = numeric_block(table, 20 if detail == 2 else 8)
        if block:
            parts.append(block)
        parts.append(sample_block(df, MAX_SAMPLE_COLUMNS if detail == 2 else 6))
    notes = table["all_notes"] if detail == 2 else table["all_notes"][:4]
    if notes:
        parts.append("Notes:\n" + "\n".join(f"- {cut(n, 300)}" for n in notes))
    return "\n\n".join(parts)


def render(intro, tables):
    """Everything, within MAX_OUTPUT_CHARS: each table gets an equal share of the room left
    after the intro, and is shown at the most detailed level that fits its share."""
    room = MAX_OUTPUT_CHARS - len(intro) - 200
    share = max(room // max(len(tables), 1), 600)
    sections = []
    for table in tables:
        profile_table(table)
        for detail in (2, 1, 0):
            text = render_table(table, detail)
            if len(text) <= share:
                break
        sections.append(text if len(text) <= share else cut_lines(text, share) + "\n[... cut]")
    output = intro + "\n\n" + "\n\n".join(sections)
    if len(output) > MAX_OUTPUT_CHARS:
        output = cut_lines(output, MAX_OUTPUT_CHARS - 40) + "\n[... output cut to stay short]"
    return output + "\n"


def cut_lines(text, limit):
    """The whole lines of ``text`` that fit in ``limit`` characters."""
    text = text[:limit]
    return text[: text.rindex("\n")] if "\n" in text else text


# ---------------------------------------------------------------------------------------------
# Entry point


def arguments():
    """KIND, PATH, NAME from the runpy globals, or from the command line for manual runs."""
    given = globals()
    kind, path, name = given.get("KIND"), given.get("PATH"), given.get("NAME")
    if not (kind and path):
        if len(sys.argv) < 3:
            raise InputProblem("usage: inspect_table.py KIND PATH [NAME] (KIND: csv, xlsx, xls)")
        kind, path = sys.argv[1], sys.argv[2]
        name = sys.argv[3] if len(sys.argv) > 3 else None
    return str(kind).lower(), str(path), str(name or os.path.basename(path))


def inspect(kind, path, name):
    try:
        size = os.path.getsize(path)
    except OSError as error:
        raise InputProblem(f"The input file cannot be opened ({error.strerror}).") from None
    if kind == "csv":
        return inspect_csv(path, name, size)
    if kind in ("xlsx", "xls"):
        return inspect_excel(path, name, size, kind)
    raise InputProblem(f"Unknown kind {kind!r}: expected csv, xlsx or xls.")


def main():
    try:
        with warnings.catch_warnings():
            # pandas' and openpyxl's warnings would reach the model as noise on stderr.
            warnings.simplefilter("ignore")
            kind, path, name = arguments()
            intro, tables = inspect(kind, path, name)
            output = render(intro, tables)
    except InputProblem as problem:
        print(problem, file=sys.stderr)
        return 2
    except MemoryError:
        print("The file is too large to inspect within the sandbox's memory; "
              "upload a smaller extract.", file=sys.stderr)
        return 2
    except Exception as error:  # never a traceback: the model sees stderr
        print(f"inspection failed: {type(error).__name__}: {cut(error, 300)}", file=sys.stderr)
        return 2
    sys.stdout.write(output)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
