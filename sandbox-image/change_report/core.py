"""What every kind of the change report shares: the bounds of what it prints, strings taken
from a file made safe to show, a file that cannot be read told in one sentence, and XML
elements and package parts as comparable values."""

import collections
import hashlib
import re
import time
import zipfile


KIND_NAMES = {"xlsx": "an Excel workbook", "docx": "a Word document", "pptx": "a PowerPoint deck"}
MAX_TEXT = 80  # characters of one string taken from a file
MAX_EXAMPLES = 5
MAX_LISTED = 20  # sheets, slides
STARTED = time.monotonic()
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
