"""The inspection of delimited text (KIND csv): encoding, delimiter, quoting and header row found
from the bytes, then the whole file read with pandas as the load line says, retried with the
fixes a real failure calls for (bad lines, decimal commas, thousands separators, a saved
index)."""

import codecs
import csv
import io
import re
import warnings

import pandas as pd

from .core import (
    DOT_THOUSANDS_ONLY,
    InputProblem,
    cut,
    human_size,
    load_call,
    number_styles,
    numeric_columns,
    py_literal,
    show_name,
    text_number_notes,
    text_values,
)
from .header import HEADER_SCAN_ROWS, find_header, header_line, title_rows


# Bytes of a CSV looked at for the delimiter, quoting and header (the encoding check reads all).
CSV_SAMPLE_BYTES = 128 * 1024
CSV_DELIMITERS = [",", ";", "\t", "|"]
DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}


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
