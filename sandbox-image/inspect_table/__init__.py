"""file-agent table inspection: a fixed (not model-written) look at one tabular input file.

What it is for
    Its stdout opens the language model's first message in a data-analysis loop. It tells the
    model how the file must be loaded (encoding, delimiter, header row, sheet) and what the
    table holds, so the model's first script reads the data correctly instead of guessing.

How it is invoked
    Inside the sandbox container, with the input read-only at /work/in/<name>:

        import runpy, sys
        sys.path.append("/opt/file-agent/")
        runpy.run_module("inspect_table",
                         init_globals={"KIND": "csv", "PATH": "/work/in/data.csv",
                                       "NAME": "data.csv"},
                         run_name="__main__")

    The image's scripts folder is not on the path of ``python3 -I`` (the container's Python), so
    the job appends it; the package's own modules import each other relatively. KIND is "csv"
    (any delimited text), "xlsx" or "xls", decided by the server from the bytes. For manual runs
    the globals may be left out: ``python3 -m inspect_table KIND PATH [NAME]`` in sandbox-image/.

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

The modules
    core.py       what every kind shares: cells and values read as empty, labels, numbers or
                  dates; numbers stored as text; the load call and other short texts.
    header.py     the header row found among the first rows, and the bullet that tells it.
    delimited.py  csv: encoding, delimiter and quoting, then pandas' read checked and corrected.
    excel.py      xlsx and xls: the sheets through pandas.ExcelFile, within a cell budget.
    describe.py   each table described (columns, numbers, sample rows, notes) within the
                  output's bound.
    __main__.py   the arguments, the inspection of the kind asked for, the exit codes.
    Named by what they read, not csv.py: a file named like the standard library's module
    would hide it from any run that puts this folder itself on sys.path.

Only the standard library and pandas (with openpyxl/xlrd for Excel) are used.
"""
