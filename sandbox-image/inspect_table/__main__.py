"""The table inspection's entry point: KIND, PATH and NAME from the job's globals (or the command
line), the inspection of that kind as text on stdout, or one sentence on stderr and exit code 2.
See the package's docstring for the contract."""

import os
import sys
import warnings

from .core import InputProblem, cut
from .delimited import inspect_csv
from .describe import render
from .excel import inspect_excel


def arguments():
    """KIND, PATH, NAME from the runpy globals, or from the command line for manual runs."""
    given = globals()
    kind, path, name = given.get("KIND"), given.get("PATH"), given.get("NAME")
    if not (kind and path):
        if len(sys.argv) < 3:
            raise InputProblem(
                "usage: python3 -m inspect_table KIND PATH [NAME] (KIND: csv, xlsx, xls)")
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
