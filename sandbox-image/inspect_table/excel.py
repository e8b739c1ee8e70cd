"""The inspection of an Excel workbook (KIND xlsx, or xls for the legacy format): its sheets
through pandas.ExcelFile (openpyxl or xlrd), each profiled within a share of the cell budget."""

import re
import warnings

import pandas as pd

from .core import (
    InputProblem,
    cut,
    human_size,
    is_empty,
    load_call,
    number_styles,
    py_literal,
    text_number_notes,
)
from .header import HEADER_SCAN_ROWS, find_header, title_rows


# Excel sheets described in full; the rest are listed by name and size.
MAX_SHEETS_DESCRIBED = 10
# Cells of Excel data read in all, shared by the described sheets: openpyxl reads only about
# 100,000 cells a second, so a larger sheet is profiled from its first rows, and its row count
# is taken from the sheet's XML instead.
EXCEL_CELL_BUDGET = 120_000
EXCEL_MIN_PROFILE_ROWS = 500


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
