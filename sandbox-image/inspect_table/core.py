"""What every kind of table shares: the one-sentence refusal, values read as empty, labels,
numbers or dates, numbers stored as text, and the short texts of the output (sizes, literals,
the load call)."""

import math
import re

import pandas as pd


# Values per text column tested for numbers or dates stored as text.
TEXT_SAMPLE_VALUES = 300
# Numbers written as text. Thousands groups of exactly three digits.
DECIMAL_COMMA = re.compile(r"^[-+]?(\d{1,3}(\.\d{3})+|\d+),\d+$")  # 1.234,56 or 12,5
DOT_THOUSANDS_ONLY = re.compile(r"^[-+]?\d{1,3}(\.\d{3}){2,}$")  # 1.234.567 (12.345 is ambiguous)
COMMA_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d+)?$")  # 1,234 or 1,234.56
PLAIN_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
DECORATED_NUMBER = re.compile(r"^[-+]?[$€£¥]?\s?[-+]?[\d.,' ]*\d\s?(%|[$€£¥]|EUR|USD|GBP)?$")
DATE_TEXT = re.compile(r"^(\d{1,4})[-/.](\d{1,2})[-/.](\d{1,4})([ T]\d{1,2}:\d{2}(:\d{2})?)?$")


class InputProblem(Exception):
    """The file cannot be read as its kind; the message is one sentence for the user."""


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


def text_number_notes(styles):
    if not styles:
        return []
    shown = ", ".join(f"{show_name(c, 30)} ({s})" for c, s in list(styles.items())[:8])
    more = f" and {len(styles) - 8} more" if len(styles) > 8 else ""
    return [f"Numbers stored as text in: {shown}{more}. Convert with pd.to_numeric after "
            "removing the thousands separators and symbols (and turning a decimal comma into "
            "a dot), e.g. pd.to_numeric(df[col].str.replace(\".\", \"\").str.replace(\",\", "
            "\".\"), errors=\"coerce\") for 1.234,56."]
