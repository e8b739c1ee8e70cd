"""file-agent change report: a fixed (not model-written) comparison of an original office file
with the copy a model-written script made of it.

What it is for
    modify_file answers with what changed, computed by file-agent from the two files rather than
    taken from the model's word, and refuses a copy in which nothing changed. So "changed" must be
    false for a byte-identical copy and for a plain load-and-save with the same library (openpyxl,
    python-docx, python-pptx), and true for any difference found, formatting included.

How it is invoked
    Inside the sandbox container, with both files read-only under /work/in:

        import runpy, sys
        sys.path.append("/opt/file-agent/")
        runpy.run_module("change_report",
                         init_globals={"KIND": "xlsx", "BEFORE": "/work/in/original.xlsx",
                                       "AFTER": "/work/in/result.xlsx"},
                         run_name="__main__")

    The image's scripts folder is not on the path of ``python3 -I`` (the container's Python), so
    the job appends it; the package's own modules import each other relatively. KIND is "xlsx",
    "docx" or "pptx", decided by the server from the bytes. For manual runs the globals may be
    left out: ``python3 -m change_report KIND BEFORE AFTER`` in sandbox-image/.

The modules
    core.py       what every kind shares: the bounds, strings cleaned and cut, one-sentence
                  refusals naming the file, XML elements and package parts as comparable values.
    sequences.py  paragraphs, tables and slides matched in order, within MATCH_SECONDS.
    workbook.py   xlsx: sheets, cells, their styles and settings, workbook-level items.
    document.py   docx: paragraphs, headings, tables, sections and the parts that differ.
    deck.py       pptx: slides and what changed on each.
    __main__.py   the arguments, the report of the kind asked for, the exit codes.
    Named by what they read, not xlsx.py, docx.py, pptx.py: a file named like the library it
    imports would hide that library from any run that puts this folder itself on sys.path.

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
