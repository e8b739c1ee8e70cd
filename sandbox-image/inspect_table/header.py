"""Header detection, shared by CSV and Excel: which of a table's first rows holds the column
names, what stands above it, and the bullet of the output that says so."""

import math
import re

from .core import InputProblem, cut, is_empty, is_label


# Rows read with header=None to find the header row, and the columns of them looked at.
HEADER_SCAN_ROWS = 30
HEADER_SCAN_COLUMNS = 1000


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
