"""Describing the tables, whatever their kind: columns with dtypes and nulls, numeric ranges,
sample rows and notes, each table at the most detailed level that fits its share of the
output's bound."""

import re

from .core import (
    DATE_TEXT,
    cut,
    is_empty,
    numeric_columns,
    object_columns,
    py_literal,
    show_name,
    spread_sample,
    text_values,
)
from .header import header_line


# The output must stay small enough to sit at the top of a prompt.
MAX_OUTPUT_CHARS = 8000
# Columns listed one per line; wider tables get "... and N more".
MAX_COLUMNS_LISTED = 40
# Columns shown in the sample rows, and the width of one shown cell.
MAX_SAMPLE_COLUMNS = 12
MAX_CELL_CHARS = 24
SAMPLE_ROWS = 5
TOTAL_LABEL = re.compile(r"^\s*(grand\s+)?(total|totals|sum|summe|gesamt|totaal|totale)\b", re.I)


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
