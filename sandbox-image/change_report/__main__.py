"""The change report's entry point: KIND, BEFORE and AFTER from the job's globals (or the command
line), the report of that kind as one line of JSON on stdout, or one sentence on stderr and exit
code 2. See the package's docstring for the contract."""

import json
import os
import sys
import warnings

from .core import InputProblem, KIND_NAMES, clean
from .deck import pptx_report
from .document import docx_report
from .workbook import xlsx_report


def arguments():
    """KIND, BEFORE, AFTER from the runpy globals, or from the command line for manual runs."""
    given = globals()
    kind, before, after = given.get("KIND"), given.get("BEFORE"), given.get("AFTER")
    if not (kind and before and after):
        if len(sys.argv) != 4:
            raise InputProblem(
                "usage: python3 -m change_report KIND BEFORE AFTER (KIND: xlsx, docx, pptx)")
        kind, before, after = sys.argv[1:4]
    kind = str(kind).lower()
    if kind not in KIND_NAMES:
        raise InputProblem(f"Unknown kind {clean(kind, 20)!r}: expected xlsx, docx or pptx.")
    for side, path in (("original", before), ("result", after)):
        if not os.path.isfile(str(path)):
            raise InputProblem(f"The {side} cannot be opened: there is no file at {clean(path)}.")
    return kind, str(before), str(after)


def main():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the libraries' warnings would only be noise
            kind, before, after = arguments()
            report = {"xlsx": xlsx_report, "docx": docx_report, "pptx": pptx_report}[kind](
                before, after)
            output = json.dumps(report, ensure_ascii=True, separators=(",", ":"))
    except InputProblem as problem:
        print(problem, file=sys.stderr)
        return 2
    except MemoryError:
        print("The files are too large to compare within the sandbox's memory.", file=sys.stderr)
        return 2
    except Exception as error:  # never a traceback
        print(f"The comparison failed ({clean(f'{type(error).__name__}: {error}', 200)}).",
              file=sys.stderr)
        return 2
    sys.stdout.write(output + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
