"""file-agent model tools: checks and calls a tool that a model (or an MCP caller) wrote.

What it is for
    A tool is Python code that defines ``run(**arguments)``, with a JSON Schema (an object
    schema) for its arguments. This fixed script is the only way file-agent runs that code: the
    check before the tool is saved, and every call after. Both happen in the sandbox.

How it is invoked
    Inside the sandbox container, as ``__main__`` with cwd /work/out (what the tool writes there
    is returned to the user) and its inputs read-only in /work/in:

        import runpy
        runpy.run_path("/opt/file-agent/model_tool.py",
                       init_globals={"MODE": "check", "CODE": "/work/in/tool.py",
                                     "SCHEMA": "/work/in/schema.json",
                                     "ARGUMENTS": "/work/in/arguments.json"},
                       run_name="__main__")

    For manual runs the globals may be left out: ``python3 model_tool.py MODE CODE SCHEMA
    ARGUMENTS``. Only "check" reads SCHEMA (a "call" may pass "-").

MODE "check" (before a tool is saved)
    1. CODE is UTF-8 Python that parses.
    2. Nothing of the tool's runs when the tool is loaded. Its top level holds only imports
       (not ``from m import *``), ``def`` and ``class``, assignments of constants
       (``ast.literal_eval`` accepts the value) to plain names, bare constants (docstrings) and
       ``pass``; no def or class (or method) has a decorator, a default that is not a constant
       or a call in an annotation; class bodies hold only methods, classes, constant
       assignments, bare constants and ``pass``. Creating a class can call code too, so a
       class statement has no keywords (``metaclass=`` or any other: they go to a metaclass or
       to ``__init_subclass__``), and each base is a plain name: a class the tool defined
       above it, or a builtin class (``object``, ``Exception``, ``dict``...) whose name the
       tool never rebinds; never a call, subscript (``__class_getitem__``), attribute or
       imported class (its metaclass, such as Enum's, may call the class's methods). No class
       body defines a hook that class creation calls (``__init_subclass__``, ``__set_name__``,
       ``__class_getitem__``, ``__mro_entries__``, ``__prepare__`` and the like), and no
       top-level or class-level name is ``__builtins__``. Annotations are never evaluated: the
       tool is compiled as under ``from __future__ import annotations``, so ``x: Hook[1] = 1``
       stores a string and calls nothing.
    3. ``run`` is one top-level ``def`` (not async) without ``/``, ``*args`` or ``**kwargs``,
       whose parameters are exactly the schema's ``properties``; a property is ``required``
       exactly when its parameter has no default.
    Every problem of steps 1-3 is reported, not only the first. If there is none, the test
    call follows: exactly a "call" with ARGUMENTS (the example arguments).

MODE "call"
    Loads CODE as the module ``tool`` (in ``sys.modules``, so dataclasses and pickle work) and
    calls ``run(**arguments)`` with ARGUMENTS (a JSON object). Meanwhile stdout goes to stderr,
    both sys.stdout and file descriptor 1 (so programs the tool starts too): nothing the tool
    prints mixes with the result. The value returned is made JSON first: tuples and sets become
    lists (sets sorted when they can be), numpy scalars and arrays Python values and lists,
    DataFrames lists of row dicts, Series dicts, dates and times (numpy's too) ISO text,
    Decimal text, dict keys text, and NaN, infinity, NaT and pandas.NA null. numpy and pandas
    are only looked at when the tool imported them.

Output contract and exit codes
    0  exactly one line on stdout: ``{"ok": true, "result": <the JSON value run returned>}``
       (UTF-8, not ASCII-escaped). Whatever the tool printed is on stderr.
    1  the tool failed. Its exception, while loading or in run: the traceback of the tool's
       frames on stderr (this script's are dropped). Otherwise one sentence on stderr: the
       arguments do not match run(), run() called sys.exit, there is no callable run, or the
       value is not JSON (its type and where, e.g. ``result['rows'][3]``).
    2  "check" only: the code or the schema was refused, one problem per line on stderr (most
       start with "line N: "). No test call was made.
    3  this script was invoked wrongly (unknown MODE, missing path): a bug of file-agent's.
    stdout is empty unless the exit code is 0.
"""

import __future__
import ast
import builtins
import collections
import contextlib
import datetime
import decimal
import inspect
import json
import math
import os
import sys
import traceback
import types
import warnings

EXIT_OK, EXIT_TOOL_FAILED, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2, 3
AT_LOAD = "runs when the tool is loaded"
MOVE_IT = "move it into run() or a helper function"
# Names, in refusals, of the top-level statements that are not allowed.
STATEMENTS = {
    ast.If: "if statement", ast.For: "for loop", ast.AsyncFor: "for loop",
    ast.While: "while loop", ast.With: "with statement", ast.AsyncWith: "with statement",
    ast.Try: "try statement", ast.TryStar: "try statement", ast.Match: "match statement",
    ast.AugAssign: "augmented assignment", ast.Global: "global statement",
    ast.Nonlocal: "nonlocal statement", ast.Delete: "del statement", ast.Assert: "assert",
    ast.Raise: "raise", ast.Return: "return", ast.Expr: "expression",
}

# What creating a class calls (on the class, its bases or the values in its body), beside the
# metaclass: a class body may not define these.
CLASS_HOOKS = frozenset({
    "__init_subclass__", "__set_name__", "__class_getitem__", "__mro_entries__", "__prepare__",
    "__instancecheck__", "__subclasscheck__", "__subclasshook__", "__builtins__",
    "__build_class__", "__metaclass__",
})
# Builtin classes a tool's class may derive from, when the tool does not rebind their names:
# object, the containers and scalars, and every exception. None has a metaclass of its own or
# an __init_subclass__ that calls anything.
BUILTIN_BASES = frozenset(
    name for name, value in vars(builtins).items()
    if isinstance(value, type) and (issubclass(value, BaseException) or name in {
        "object", "dict", "list", "tuple", "set", "frozenset", "str", "int", "float",
        "complex", "bytes", "bytearray"}))
# The tool is compiled with this flag: annotations stay strings, never evaluated at load.
LAZY_ANNOTATIONS = __future__.annotations.compiler_flag


class Failure(Exception):
    """The tool failed; the message is the one sentence for stderr (exit 1)."""


def read_code(path):
    """The code as text (without a UTF-8 byte order mark); ValueError says what is wrong."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise ValueError(f"the code cannot be read ({error.strerror})") from None
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise ValueError(f"the code contains a null byte (line {line})")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ValueError(f"the code is not valid UTF-8 text (line {line})") from None


# ---------------------------------------------------------------------------------------------
# The check (MODE "check", steps 1-3)


def is_constant(node):
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def has_call(node):
    return node is not None and any(isinstance(n, ast.Call) for n in ast.walk(node))


def is_inert(node):
    """``pass``, or a bare constant: a docstring, ``...``."""
    return isinstance(node, ast.Pass) or (
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))


def bindings(tree):
    """How often the code binds each name, anywhere (imports, assignments, defs, classes,
    parameters, targets): a builtin class's name bound at all, or a class's name bound twice,
    may stand for something else when a class derives from it."""
    names = collections.Counter()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] += 1
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names[node.id] += 1
        elif isinstance(node, ast.arg):
            names[node.arg] += 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            names[node.name] += 1
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names[node.rest] += 1
    return names


def check_class(node, what, scope, problems):
    """What creating the class ``node`` calls besides ``type``: its keywords (a metaclass, or
    arguments for __init_subclass__), its bases, and hooks its body defines. ``scope`` has
    the classes defined above it (``classes``) and how often each name is bound
    (``bindings``)."""
    line = f"line {node.lineno}: "
    if node.keywords:
        keyword = node.keywords[0].arg
        shown = f"'{keyword}='" if keyword else "'**'"
        problems.append(f"{line}the class keyword {shown} of {what} {AT_LOAD} (a metaclass or "
                        f"__init_subclass__ receives it); remove it and write a plain class")
    for base in node.bases:
        bound = scope["bindings"][base.id] if isinstance(base, ast.Name) else 0
        if isinstance(base, ast.Name) and (
                (base.id in scope["classes"] and bound == 1)
                or (base.id in BUILTIN_BASES and bound == 0)):
            continue
        shown = ast.unparse(base)
        kind = ("a call" if has_call(base) else
                "a subscript" if isinstance(base, ast.Subscript) else
                "an attribute" if isinstance(base, ast.Attribute) else
                "not a class defined (once) above it" if isinstance(base, ast.Name) else
                "an expression")
        problems.append(f"{line}the base '{shown}' of {what} is {kind}, and creating the class "
                        f"may call its code (a metaclass, __mro_entries__, __class_getitem__); "
                        f"derive only from classes the tool defines above it, or from builtin "
                        f"classes such as object, dict or Exception")
    for statement in node.body:
        names = ([statement.name] if isinstance(statement, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef,
                                                              ast.ClassDef)) else
                 [t.id for t in getattr(statement, "targets", [getattr(statement, "target",
                                                                         None)])
                  if isinstance(t, ast.Name)])
        for name in names:
            if name in CLASS_HOOKS:
                problems.append(f"line {statement.lineno}: {what} defines {name}, which "
                                f"creating a class calls, so it {AT_LOAD}; remove it")


def check_definition(node, what, scope, problems):
    """What a def or class statement evaluates when it runs: decorators, defaults, annotations
    and base classes."""
    line = f"line {node.lineno}: "
    if node.decorator_list:
        problems.append(f"line {node.decorator_list[0].lineno}: the decorator on {what} "
                        f"{AT_LOAD}; remove it (do what it does inside the function instead)")
    if isinstance(node, ast.ClassDef):
        check_class(node, what, scope, problems)
        return
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    defaults += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    for arg, default in defaults:
        if not is_constant(default):
            problems.append(f"{line}the default of parameter '{arg.arg}' of {what} is not a "
                            f"constant; use None and compute the value inside the function")
    for arg in positional + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]:
        if has_call(arg.annotation):
            problems.append(f"{line}the annotation of '{arg.arg}' in {what} contains a call, "
                            f"which {AT_LOAD}; remove the call")
    if has_call(node.returns):
        problems.append(f"{line}the return annotation of {what} contains a call, which "
                        f"{AT_LOAD}; remove the call")


def check_assignment(node, problems):
    """An assignment at top level or in a class body: to plain names, of a constant."""
    line = f"line {node.lineno}: "
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if not all(isinstance(t, ast.Name) for t in targets):
        problems.append(f"{line}an assignment to something other than a plain name {AT_LOAD}; "
                        f"{MOVE_IT}")
        return
    names = ", ".join(f"'{t.id}'" for t in targets)
    if isinstance(node, ast.AnnAssign) and has_call(node.annotation):
        problems.append(f"{line}the annotation of {names} contains a call, which {AT_LOAD}; "
                        f"remove the call")
    if node.value is None:
        problems.append(f"{line}{names} is annotated but not assigned; give it a constant "
                        f"value or remove the line")
    elif not is_constant(node.value):
        problems.append(f"{line}the value of {names} is not a constant, so computing it "
                        f"{AT_LOAD}; write it as a literal, or compute it in run() or a helper "
                        f"function")


def check_body(body, owner, scope, problems):
    """The statements of the module (owner None) or of the class ``owner``; ``scope`` as for
    check_class."""
    for node in body:
        line = f"line {node.lineno}: "
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if owner is None and node.name == "run" and isinstance(node, ast.AsyncFunctionDef):
                problems.append(f"{line}run must be a plain function (def run, not async def run)")
            what = f"method '{owner}.{node.name}'" if owner else f"function '{node.name}'"
            check_definition(node, what, scope, problems)
        elif isinstance(node, ast.ClassDef):
            name = f"{owner}.{node.name}" if owner else node.name
            check_definition(node, f"class '{name}'", scope, problems)
            check_body(node.body, name, scope, problems)
            scope["classes"].add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            check_assignment(node, problems)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if owner is None and isinstance(target, ast.Name) and target.id in CLASS_HOOKS:
                    problems.append(f"{line}assigning {target.id} changes what runs when the "
                                    f"tool is loaded; use another name")
        elif is_inert(node) or (owner is None and isinstance(node, ast.Import)):
            pass
        elif owner is None and isinstance(node, ast.ImportFrom):
            if any(alias.name == "*" for alias in node.names):
                problems.append(f"{line}'from {node.module or '.'} import *' hides which names "
                                f"the tool uses; import the names it needs")
        elif owner is not None:
            problems.append(f"{line}class '{owner}' has a statement that {AT_LOAD}; a class body "
                            f"may hold only methods, docstrings and constant assignments")
        elif (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
              and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
            problems.append(f"{line}an 'if __name__ == \"__main__\":' block is not needed, since "
                            f"file-agent calls run() itself; remove it")
        else:
            value = getattr(node, "value", None)
            kind = ("call" if isinstance(value, ast.Call) and isinstance(node, ast.Expr) else
                    "assignment expression (:=)" if isinstance(value, ast.NamedExpr) else
                    STATEMENTS.get(type(node), type(node).__name__))
            problems.append(f"{line}a top-level {kind} {AT_LOAD}; {MOVE_IT}")


def read_schema(path, problems):
    """(property names, required names) of the schema, or None after adding a problem."""
    try:
        with open(path, encoding="utf-8") as handle:
            schema = json.load(handle)
    except (OSError, ValueError) as error:
        problems.append(f"the schema cannot be read as JSON ({error})")
        return None
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        problems.append("the schema has no 'properties' object")
        return None
    required = schema.get("required", [])
    if not (isinstance(required, list) and all(isinstance(n, str) for n in required)):
        problems.append("the schema's 'required' is not a list of property names")
        return None
    return list(properties), set(required)


def check_run(tree, schema, problems):
    """run is one top-level def whose parameters are the schema's properties."""
    defs = [node for node in tree.body if getattr(node, "name", None) == "run"
            and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        problems.append("the code defines no top-level function run(); define def run(...) "
                        "with one parameter per property of the schema")
        return
    run, args = defs[-1], defs[-1].args  # the last: the one Python keeps
    line = f"line {run.lineno}: "
    if len(defs) > 1:
        problems.append(f"{line}run() is defined more than once (first on line "
                        f"{defs[0].lineno}); keep one definition")
    if args.posonlyargs:
        problems.append(f"{line}run() must not have positional-only parameters (the '/'); "
                        f"file-agent passes every argument by name")
    if args.vararg:
        problems.append(f"{line}run() must not take *{args.vararg.arg}; file-agent passes "
                        f"every argument by name")
    if args.kwarg:
        problems.append(f"{line}run() must not take **{args.kwarg.arg}: its parameters must be "
                        f"the schema's properties, one for one")
    if schema is None:
        return
    properties, required = schema
    positional = args.posonlyargs + args.args
    parameters = [a.arg for a in positional + args.kwonlyargs]
    optional = {a.arg for a in positional[len(positional) - len(args.defaults):]}
    optional |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}
    for name in parameters:
        if name not in properties:
            problems.append(f"run() has parameter '{name}' that the schema does not list")
        elif name in required and name in optional:
            problems.append(f"the schema requires '{name}', but run() gives it a default; "
                            f"remove the default or drop '{name}' from required")
        elif name not in required and name not in optional:
            problems.append(f"run() has no default for '{name}', but the schema does not "
                            f"require it; give it a default or add '{name}' to required")
    problems.extend(f"the schema's property '{name}' is not a parameter of run()"
                    for name in properties if name not in parameters)


def check(code_path, schema_path):
    """Every problem found in the code and the schema (steps 1-3), in order."""
    problems = []
    tree = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a SyntaxWarning would break "one problem a line"
            tree = ast.parse(read_code(code_path), filename=code_path)
    except SyntaxError as error:
        problems.append(f"line {error.lineno or 1}: syntax error: {error.msg}")
    except ValueError as error:  # unreadable, not UTF-8, or a null byte
        problems.append(str(error))
    except (RecursionError, MemoryError):
        problems.append("the code is nested too deeply to be parsed")
    schema = read_schema(schema_path, problems)
    if tree is not None:
        scope = {"classes": set(), "bindings": bindings(tree)}
        check_body(tree.body, None, scope, problems)
        check_run(tree, schema, problems)
    return problems


# ---------------------------------------------------------------------------------------------
# The call (MODE "call", and the test call of MODE "check")


@contextlib.contextmanager
def stdout_to_stderr():
    """sys.stdout and file descriptor 1 both write to stderr, so that nothing the tool (or a
    program it starts) prints can land in the result's line."""
    for stream in (sys.stdout, sys.__stdout__):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        saved = None  # no descriptor 1: redirecting sys.stdout is all there is to do
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for stream in (sys.__stdout__, sys.stderr):  # written by the tool, still buffered
            with contextlib.suppress(Exception):
                stream.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def load(code_path):
    """The tool's run. Raises Failure, or whatever the code raised while loading."""
    try:
        code = compile(read_code(code_path), code_path, "exec", flags=LAZY_ANNOTATIONS,
                       dont_inherit=True)
    except ValueError as error:  # unreadable, not UTF-8, or a null byte
        raise Failure(str(error)) from None
    module = types.ModuleType("tool")
    module.__file__ = code_path
    sys.modules["tool"] = module  # before exec: dataclasses and pickle look the module up
    exec(code, module.__dict__)
    if not callable(getattr(module, "run", None)):
        raise Failure("the code defines no callable run()")
    return module.run


def call(code_path, arguments_path):
    """Loads the tool and calls run; returns the line for stdout."""
    try:
        with open(arguments_path, encoding="utf-8") as handle:
            arguments = json.load(handle)
    except (OSError, ValueError) as error:
        raise Failure(f"the arguments cannot be read as JSON ({error})") from None
    if not isinstance(arguments, dict):
        raise Failure("the arguments are not a JSON object")
    with stdout_to_stderr():  # the conversion too: it may call the tool's __str__ or __lt__
        run = load(code_path)
        try:
            inspect.signature(run).bind(**arguments)
        except TypeError as error:
            raise Failure(f"the arguments do not match run(): {error}") from None
        except ValueError:
            pass  # a callable without a signature: the call itself says what is wrong
        try:
            value = run(**arguments)
        except SystemExit as exit:
            raise Failure(f"run() called sys.exit({exit.code!r}); return a value instead") from None
        try:
            result = plain(value, "result")
        except RecursionError:
            raise Failure("run() returned a value nested too deeply (or containing itself) to "
                          "be JSON-serialisable") from None
    return json.dumps({"ok": True, "result": result}, allow_nan=False, ensure_ascii=False)


def plain(value, path):
    """``value`` as JSON-serialisable Python, converted as the docstring says. ``path`` says
    where it is, for the Failure that anything else raises."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key if isinstance(key, str) else str(key): plain(item, f"{path}[{key!r}]")
                for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        try:
            value = sorted(value)
        except TypeError:
            value = list(value)
    if isinstance(value, (list, tuple)):
        return [plain(item, f"{path}[{i}]") for i, item in enumerate(value)]
    pandas, numpy = sys.modules.get("pandas"), sys.modules.get("numpy")
    if pandas is not None:
        if value is pandas.NaT or value is pandas.NA:  # NaT is a datetime: ask first
            return None
        if isinstance(value, pandas.DataFrame):
            return plain(value.to_dict(orient="records"), path)
        if isinstance(value, pandas.Series):
            return plain(value.to_dict(), path)
    if isinstance(value, (datetime.date, datetime.time)):  # a datetime is a date
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if numpy is not None:
        if isinstance(value, numpy.datetime64):  # its .item() may be nanoseconds, as an int
            return None if numpy.isnat(value) else str(value)
        if isinstance(value, numpy.ndarray):  # dates and objects one by one, for that reason
            return plain(list(value) if value.dtype.kind in "mMO" else value.tolist(), path)
        if isinstance(value, numpy.generic) and not isinstance(value, numpy.timedelta64):
            return plain(value.item(), path)
    raise Failure(f"run() returned a value that is not JSON-serialisable: {type(value).__name__} "
                  f"at {path}; return dicts, lists, strings, numbers, booleans or None")


# ---------------------------------------------------------------------------------------------
# Entry point


def tool_frames(tb):
    """The traceback from the first frame that is not this script's: the tool's own."""
    own = tool_frames.__code__.co_filename
    while tb is not None and tb.tb_frame.f_code.co_filename == own:
        tb = tb.tb_next
    return tb


def arguments():
    """MODE, CODE, SCHEMA, ARGUMENTS from the runpy globals, or from the command line."""
    given = globals()
    values = [given.get(name) for name in ("MODE", "CODE", "SCHEMA", "ARGUMENTS")]
    if values[0] is None:
        values = (sys.argv[1:] + [None] * 4)[:4]
    mode, code, schema, args = (None if v is None else str(v) for v in values)
    if mode not in ("check", "call") or not code or not args or (mode == "check" and not schema):
        raise ValueError("usage: model_tool.py MODE CODE SCHEMA ARGUMENTS "
                         "(MODE: check or call; a call may pass - as SCHEMA)")
    return mode, code, schema, args


def main():
    try:
        mode, code, schema, args = arguments()
    except ValueError as error:
        print(error, file=sys.stderr)
        return EXIT_USAGE
    if mode == "check":
        problems = check(code, schema)
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return EXIT_REFUSED
    try:
        line = call(code, args)
    except Failure as failure:
        print(failure, file=sys.stderr)
        return EXIT_TOOL_FAILED
    except BaseException as error:  # noqa: BLE001 - the tool's own error: its traceback
        traceback.print_exception(type(error), error, tool_frames(error.__traceback__))
        return EXIT_TOOL_FAILED
    # A lone surrogate (from an undecodable file name) has no UTF-8: "?" stands in for it.
    sys.stdout.flush()
    sys.stdout.buffer.write((line + "\n").encode("utf-8", "replace"))
    sys.stdout.flush()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
