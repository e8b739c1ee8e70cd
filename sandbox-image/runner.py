"""file-agent sandbox runner: PID 1 of every sandbox container; runs one script, once.

Invoked as ``python3 -I -B /opt/file-agent/runner.py [--warm --max-idle SECONDS] /work/script.py``.
``--work DIR`` moves ``/work`` elsewhere: file-agent's tests run this runner with the host's Python
in a temporary folder (their local runner); containers always use ``/work``.

Two processes, forked before any request arrives:

- **PID 1** (this process; the standard library only) speaks to file-agent. It alone reads the
  container's stdin and writes the container's stdout and stderr.
- **The worker**, forked at start, runs the script. Its stdin is ``/dev/null``; its stdout and
  stderr are pipes that PID 1 reads. It never sees the request, and PID 1 keeps no secret it
  could find: nothing that PID 1 writes can be written by the script.

A container is either *cold* (created for an attempt that is already waiting) or *warm* (created
ahead by file-agent's pool: ``--warm``). A warm worker first imports what nearly every attempt
needs (``PRELOAD``) and primes it (writes a small workbook in memory, so that the lazy imports and
first-use caches of a script's first ``to_excel`` are paid already), then tells PID 1, which
writes ``READY`` on stdout; file-agent reads that line and keeps the container until an attempt
takes it. While it waits untaken for ``IDLE_PRELOAD_AFTER_S``, the worker also imports and primes
what many attempts need (``IDLE_PRELOAD``: a workbook read back, a Word document, a presentation,
a chart, a PDF, each in memory), one library at a time, looking between them for the script: on
a quiet server every warm container has them, while under load (containers taken as soon as they
are ready) no CPU goes to work an attempt may not use. Once all of it is done the worker puts up
``IDLE_PRIMED_MARK``, an empty file in ``/tmp``, and takes it down when its job arrives. Priming
is file-agent's code in a process that has run no script yet, and leaves nothing a script can see
(no file, no folder change, no setting). A cold worker imports nothing ahead. Either way the container serves exactly one
attempt and is then removed: nothing here loops.

When the script has ended, the worker writes its exit code on its status pipe before exiting:
PID 1 sends the result while the kernel tears down the worker's memory (tens of milliseconds
with pandas loaded) instead of after.

Everything that belongs to the attempt arrives on stdin, never through the container's
environment or labels (so a warm container was created knowing nothing of the attempt):

1. one line of JSON, at most ``HEADER_MAX_BYTES``: ``key`` (fresh for each attempt),
   ``upload_bytes``, ``timeout_s``, ``stdio_max_bytes``, ``file_path`` and ``input_file_path``;
2. ``upload_bytes`` bytes of tar, which PID 1 unpacks into ``/work`` (a size-capped tmpfs):
   ``script.py`` and ``in/<name>``, read-only;
3. nothing more: file-agent keeps stdin open for the whole attempt, and end of file means the
   server is gone (Docker closes a container's stdin when its one attached client goes away).

PID 1 then hands the worker the script's path and its preset names (the worker drops the
script's reassignments of them, with Python's own ``ast``, and runs it as ``__main__`` in
``/work/out``, with the preloaded modules already in ``sys.modules``), and relays what the worker
writes. Everything PID 1 writes on stdout after ``READY`` is a *frame*: one byte of kind, four
bytes of length (big-endian), that many bytes of payload (at most ``FRAME_MAX_BYTES``), then
``MAC_BYTES`` of HMAC-SHA256 under ``key`` over the frame's sequence number (eight bytes,
big-endian, from 0), its kind, length and payload. The payload is encrypted: XORed with the first
bytes of SHAKE256 over ``CIPHER_CONTEXT``, ``key`` and the sequence number, so a copy of the
container's stdout (a Kubernetes node logs every byte a container writes there, and log agents
ship it) holds no byte of what the script printed or made, only the kinds and lengths; the key
came on stdin, which nothing logs. The script's bytes only ever travel inside a payload, so none
of them can end a frame or add one; and the MAC holds even where the script can reach PID 1's stdout
itself (gVisor lets a process open ``/proc/1/fd/1`` whatever PID 1's dumpable flag says): the
key exists only in PID 1's memory and file-agent's, so bytes the script writes there make the
stream fail to parse, which file-agent counts as a failed attempt. The kinds, in order:

- ``o`` and ``e``: the script's stdout and stderr (and PID 1's own words about the attempt, on
  ``e``), each cut at ``stdio_max_bytes``: PID 1 reads the rest and counts it as dropped;
- ``x``: how the script ended, one JSON object: ``ended`` (``exited``, ``deadline``, or
  ``bad_request`` when the request could not be read), ``exit_code`` (from PID 1's ``waitpid``;
  128 + the signal when a signal ended it), ``signal``, ``oom_killed`` (from the cgroup's counter
  of out-of-memory kills, ``null`` when it cannot be read), ``duration_s`` (PID 1's clock, from
  handing over the script to its end), ``stdout_dropped``/``stderr_dropped`` and
  ``resources``: what the attempt used (see *What an attempt costs* below);
- ``a``: a tar of ``/work/out`` (file-agent unpacks it as untrusted input: the script chose its
  content);
- ``z``: the end; nothing follows.

PID 1 waits for whichever comes first:

- the worker exits: PID 1 kills whatever the script left behind, relays the last of its output,
  and writes ``x``, ``a`` and ``z``, so that file-agent has the whole result without waiting for
  the container to be reported gone;
- ``timeout_s`` + ``DEADLINE_GRACE_S`` pass: file-agent kills the container at ``timeout_s``; this
  is the runner's own backstop, which also holds when no server is watching any more;
- stdin ends: the server crashed or was killed; nobody will read a result, so everything stops.

PID 1 is not dumpable (no ptrace of it, and no reading of its memory, nor under runc of its
descriptors, through ``/proc/1``, by the script, which runs as the same user). It ignores the
signals a script could send it to end it (``SIGINT``, ``SIGTERM``, ``SIGHUP``, ``SIGQUIT`` and
the like); the kernel
delivers no other signal from inside the container to a PID 1, and file-agent's own stop is a
``SIGKILL`` from outside, which always works. The worker has the highest OOM score, so the
kernel's out-of-memory killer takes it rather than PID 1.

What an attempt costs (``resources`` in the ``x`` frame; each figure ``null`` when unknown):

- ``cpu_user_s``/``cpu_system_s``: CPU time of the worker since it took its job, and of every
  process it waited for (``subprocess.run`` and the like). A warm worker's imports and priming
  came before the job and are not counted: the worker writes its own ``getrusage`` at the job's
  start into memory it shares with PID 1 (``_Usage``), and PID 1 subtracts it. The figures are
  the worker's own ``getrusage`` (itself and its waited-for children) when it reports its end,
  else PID 1's ``wait4`` of it (a worker killed by a signal or for its memory).
- ``peak_memory_bytes``: the largest resident set any one of those processes had
  (``ru_maxrss``), not their sum; for a warm worker it includes the libraries imported ahead,
  which the script's process holds too.
- ``output_bytes``: the size of the regular files in ``/work/out`` when the script ended.
- ``processes``: how many PIDs were taken in the container from the job's start to its end,
  plus the worker: processes and threads, as the pids limit counts them (``_last_pid``; ``null``
  outside a container).

Processes the script left running, which PID 1 kills at its end, are not counted. The script
can write the memory PID 1 reads, and so misstate its own figures: they are an account, not a
limit, and file-agent bounds what it reads.

It does not enforce the sandbox: the container does (no network, read-only root, dropped
capabilities, limits). A script that imports ``os`` and writes elsewhere only reaches what the
container lets it reach.
"""

import hashlib
import hmac
import io
import json
import math
import mmap
import os
import resource
import select
import shutil
import signal
import stat
import struct
import sys
import tarfile
import time
import traceback

MATPLOTLIB_SEED = "/opt/file-agent/matplotlib"
WORK_DIR = "/work"
OUTPUT_DIR = "/work/out"
INPUT_DIR = "/work/in"
PROTECTED = ("file_path", "input_file_path", "output_dir", "input_dir", "input_files")
DISCARD_PREFIX = "_file_agent_ignored_"
# What a warm worker imports before it says READY: what nearly every attempt needs (pandas'
# Excel formatting is imported on the first to_excel, by most attempts).
PRELOAD = ("numpy", "pandas", "pandas.io.formats.excel", "xlsxwriter")
# What it imports while it waits untaken, and primes (see ``_PRIMERS``): what many attempts need
# (reading and changing workbooks, Word and PowerPoint documents, PDFs, charts).
IDLE_PRELOAD = ("openpyxl", "docx", "pptx", "matplotlib.pyplot", "reportlab.platypus")
IDLE_PRELOAD_AFTER_S = 3.0
# Present while a warm worker has done its whole idle preload and waits for a job: the runner's
# word that it is primed, for whoever looks into the container (``docker exec <id> test -e``;
# file-agent's tests wait for it instead of guessing how long the imports take). The worker
# removes it when its job arrives, before the script runs, so no script ever sees it.
IDLE_PRIMED_MARK = "/tmp/.file-agent-idle-primed"
READY = b"--file-agent-ready--\n"
# What the worker writes on its status pipe once the script has ended, before its exit code.
DONE = b"done "
# The longest report PID 1 reads there (``DONE``, three digits and a line break fit).
DONE_MAX_BYTES = 64
HEADER_MAX_BYTES = 64 * 1024
# The largest payload of one frame; file-agent refuses a longer one.
FRAME_MAX_BYTES = 64 * 1024
FRAME_STDOUT = b"o"
FRAME_STDERR = b"e"
FRAME_EXIT = b"x"
FRAME_ARCHIVE = b"a"
FRAME_END = b"z"
# The most frames the runner gathers before writing them, once the script has ended.
BATCH_MAX_BYTES = 1 << 20
# Bytes of HMAC-SHA256 that close every frame.
MAC_BYTES = 16
# What the payload cipher's SHAKE256 starts with, before the key and the sequence number.
CIPHER_CONTEXT = b"file-agent frame payload\0"
# The cap on each of stdout and stderr when the request names none.
STDIO_MAX_BYTES = 1 << 20
# The runner's own deadline comes this long after file-agent's, which normally acts first.
DEADLINE_GRACE_S = 5.0
# Once the worker has ended, the longest PID 1 waits for the end of its pipes (everything
# that could hold them has been killed; outside a container, an escaped process may not be).
DRAIN_S = 2.0
# Exit codes of the runner itself (a script's own code passes through).
EXIT_BAD_REQUEST = 3
EXIT_WORKER_LOST = 4
EXIT_DEADLINE = 124
EXIT_SERVER_GONE = 125
PR_SET_DUMPABLE = 4
# Signals a script could send PID 1 to end it: PID 1 ignores them (see the module's comment).
IGNORED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")


# ---------------------------------------------------------------------------------------------
# Shared by both processes (defined before the fork).


def _readable(fds, timeout):
    """Which of ``fds`` can be read (or have ended) within ``timeout`` seconds (None: no
    limit). poll, not select: gVisor refuses select."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    milliseconds = None if timeout is None else max(0, int(timeout * 1000))
    while True:
        try:
            return {fd for fd, _ in poller.poll(milliseconds)}
        except InterruptedError:
            continue


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _flush_standard_streams():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or replaced stream is not our problem
            pass


def _set_dumpable(dumpable):
    """PR_SET_DUMPABLE: a process that is not dumpable cannot be traced by another process of
    the same user, and its /proc files (memory, descriptors, environment) belong to root."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, int(dumpable), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # defence in depth only; the container's boundary does not depend on it


class _Usage:
    """Memory the worker and PID 1 share (mapped before the fork), where the worker writes its
    ``getrusage`` at its job's start and at the script's end: (user s, system s, peak KiB) of
    itself, then (user s, system s, peak KiB) of the children it waited for."""

    LAYOUT = struct.Struct("<6d")

    def __init__(self):
        self.start = mmap.mmap(-1, self.LAYOUT.size)
        self.end = mmap.mmap(-1, self.LAYOUT.size)
        # No figures yet: NaN, which the end report leaves out.
        for area in (self.start, self.end):
            self.LAYOUT.pack_into(area, 0, *[float("nan")] * 6)

    @staticmethod
    def _now():
        own = resource.getrusage(resource.RUSAGE_SELF)
        waited = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (
            *(own.ru_utime, own.ru_stime, own.ru_maxrss),
            *(waited.ru_utime, waited.ru_stime, waited.ru_maxrss),
        )

    def mark(self, area):
        """The worker's figures now, into ``start`` or ``end``."""
        try:
            self.LAYOUT.pack_into(area, 0, *self._now())
        except (OSError, ValueError):
            pass

    def read(self, area):
        return self.LAYOUT.unpack_from(area, 0)


def _last_pid(at_end=False):
    """The last PID the container's PID namespace handed out (processes and threads take them
    in turn): ``/proc/sys/kernel/ns_last_pid`` where the kernel shows it, else (gVisor) the
    thread id of a thread PID 1 starts for the purpose; ``at_end``, that probe's own id is not
    the attempt's. None outside a container, where the namespace is the host's."""
    if os.getpid() != 1:
        return None
    try:
        with open("/proc/sys/kernel/ns_last_pid") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        pass
    import threading

    taken = []
    try:
        probe = threading.Thread(target=lambda: taken.append(threading.get_native_id()))
        probe.start()
        probe.join()
    except RuntimeError:
        return None
    if not taken:
        return None
    return taken[0] - 1 if at_end else taken[0]


def _output_bytes():
    """The size of the regular files under /work/out."""
    total = 0
    for folder, _, files in os.walk(OUTPUT_DIR):
        for name in files:
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


# ---------------------------------------------------------------------------------------------
# The worker: imports, waits for its job, runs the script, exits. It never returns.


def _import(name):
    """Imports ``name``; a failure is reported and skipped: the script's own import will say
    what is wrong."""
    try:
        __import__(name)
    except Exception as error:  # noqa: BLE001 - any import failure is only reported
        print(f"file-agent: preloading {name} failed: {error}", file=sys.stderr, flush=True)


def _freeze():
    """Objects that exist now are never collected, so the script's garbage collections do not
    walk the libraries' objects."""
    import gc

    gc.collect()
    gc.freeze()


# Priming: each function below is file-agent's own small workload for one library, run by a
# warm worker after importing it, in memory only (no file, no change of folder, environment or
# global setting a script could see). A fresh interpreter's first use of a library pays for
# modules imported lazily and caches filled on first use; priming pays that before the request.


def _prime_excel_writing():
    """A small DataFrame written with xlsxwriter, as most attempts do (before READY)."""
    import pandas

    frame = pandas.DataFrame({"number": [1, 2], "text": ["a", "b"], "share": [0.5, 1.5]})
    with pandas.ExcelWriter(io.BytesIO(), engine="xlsxwriter") as writer:
        frame.to_excel(writer, sheet_name="warm-up", index=False)


def _prime_openpyxl():
    """A workbook written and read back with openpyxl, and read by pandas."""
    import openpyxl
    import pandas

    book = openpyxl.Workbook()
    book.active.append(["number", "text"])
    book.active.append([1, "a"])
    data = io.BytesIO()
    book.save(data)
    openpyxl.load_workbook(io.BytesIO(data.getvalue()))
    pandas.read_excel(io.BytesIO(data.getvalue()))


def _prime_docx():
    """A Word document with a heading, a paragraph and a table, saved and opened again."""
    import docx

    document = docx.Document()
    document.add_heading("warm-up", level=1)
    document.add_paragraph("text")
    document.add_table(rows=1, cols=2).cell(0, 0).text = "cell"
    data = io.BytesIO()
    document.save(data)
    docx.Document(io.BytesIO(data.getvalue()))


def _prime_pptx():
    """A presentation with a title slide, saved and opened again."""
    import pptx

    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[1]).shapes.title.text = "warm-up"
    data = io.BytesIO()
    deck.save(data)
    pptx.Presentation(io.BytesIO(data.getvalue()))


def _prime_pyplot():
    """A bar chart rendered to PNG, then closed: no figure is left open."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    axes.bar(["a", "b"], [1, 2])
    axes.set_title("warm-up")
    figure.savefig(io.BytesIO(), format="png")
    plt.close("all")
    # The text drawn opened a font file, which matplotlib's font cache keeps open: emptied, so
    # that the script finds no descriptor it did not open itself.
    from matplotlib import font_manager

    font_manager._get_font.cache_clear()


def _prime_pdf():
    """A PDF with a paragraph and a table, built with reportlab's Platypus."""
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table

    story = [Paragraph("warm-up", getSampleStyleSheet()["Title"]), Table([["a", "b"]])]
    SimpleDocTemplate(io.BytesIO()).build(story)


_PRIMERS = {
    "openpyxl": _prime_openpyxl,
    "docx": _prime_docx,
    "pptx": _prime_pptx,
    "matplotlib.pyplot": _prime_pyplot,
    "reportlab.platypus": _prime_pdf,
}


def _prime(primer):
    """Runs one primer; a failure is reported and skipped (priming only saves time)."""
    try:
        primer()
    except Exception as error:  # noqa: BLE001 - only an optimisation
        print(f"file-agent: priming ({primer.__name__}) failed: {error}", file=sys.stderr, flush=True)


def _preload_while_idle(control):
    """The idle preload: only while no job has arrived on ``control``; returns as soon as one
    has (or PID 1 is gone), at the latest after the module being imported."""
    if _readable([control], IDLE_PRELOAD_AFTER_S):
        return
    for name in IDLE_PRELOAD:
        _import(name)
        if _readable([control], 0):
            break
        _prime(_PRIMERS[name])
        if _readable([control], 0):
            break
    else:
        _freeze()
        _mark_idle_primed(True)
        return
    _freeze()


def _mark_idle_primed(primed):
    """Puts up (``primed``) or takes down ``IDLE_PRIMED_MARK``; only a signal, so a failure is
    ignored."""
    try:
        if primed:
            os.close(os.open(IDLE_PRIMED_MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        else:
            os.unlink(IDLE_PRIMED_MARK)
    except OSError:
        pass


def _read_job(control):
    """The job PID 1 sends: one line of JSON (the script's path and its preset names); None
    when PID 1 closed the pipe first."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(control, 1 << 16)
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def _exit_code(exit):
    """The process exit code Python would give for this SystemExit."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=sys.stderr)
    return 1


def _without_reassignments(tree):
    """Renames stores and deletes of the protected names, wherever they stand (tuples, ``for``
    targets, ``with ... as``, the walrus operator); returns the tree and what was renamed."""
    import ast

    dropped = []

    class DropReassignments(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in PROTECTED and isinstance(node.ctx, (ast.Store, ast.Del)):
                dropped.append((node.lineno, node.id))
                return ast.copy_location(ast.Name(id=DISCARD_PREFIX + node.id, ctx=node.ctx), node)
            return node

    return ast.fix_missing_locations(DropReassignments().visit(tree)), dropped


# The sandbox has no network (Docker's NetworkMode=none, Kubernetes' deny-all NetworkPolicy):
# that is what blocks it, not this. This only makes a script's network call fail at once, with
# a sentence that says why, where a dropped packet would leave it waiting out its time limit.
# Loopback and Unix sockets stay usable (a library may talk to itself). A process the script
# starts anew has no hook; the block still holds for it.
NO_NETWORK = "the sandbox has no network"
_NETWORK_EVENTS = frozenset(
    (
        "socket.connect",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
    )
)


def _is_local(host):
    """Whether ``host`` (a name or an address) is this container itself."""
    import ipaddress

    if host is None or host in ("", b"", "localhost", b"localhost"):
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _refuse_network(event, args):
    """The audit hook of the worker: a network event towards anything but this container
    raises ``OSError(ENETUNREACH, NO_NETWORK)``."""
    if event not in _NETWORK_EVENTS:
        return
    import errno
    import socket

    if event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        sock, address = args
        if address is None or getattr(sock, "family", None) == getattr(socket, "AF_UNIX", None):
            return
        host = address[0] if isinstance(address, tuple) and address else address
    elif event == "socket.getnameinfo":
        host = args[0][0] if args and isinstance(args[0], tuple) and args[0] else None
    else:
        host = args[0] if args else None
    if not _is_local(host):
        raise OSError(errno.ENETUNREACH, NO_NETWORK)


# ---------------------------------------------------------------------------------------------
# Packages the image lacks. The sandbox's packages are the image's (the base set and the
# operator's hash-pinned list); nothing is installed while an attempt runs, and there is no
# network to install from. A script that runs pip, or imports a module no package of the image
# provides, ends with one sentence that says so (file-agent's tools look for ``NOT_IN_IMAGE``
# and do not spend their retries on installs).

NOT_IN_IMAGE = "the package is not in the sandbox image"
PACKAGES_HELP = (
    "attempts have no network, and the operator adds packages to the image with a hash-pinned "
    'list (SANDBOX_EXTRA_PACKAGES; see docs/SANDBOX.md, "Adding packages")'
)
_INSTALL_EVENTS = frozenset(("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn"))
_installer = None


class PackageInstallError(RuntimeError):
    """Raised where a script starts pip: the sandbox installs nothing."""


def _install_sentence(packages):
    return f"file-agent: installing {packages} failed: {NOT_IN_IMAGE}, {PACKAGES_HELP}."


def _import_sentence(module):
    return f"file-agent: importing {module} failed: {NOT_IN_IMAGE}, {PACKAGES_HELP}."


def _command_words(event, args):
    """The command line an exec-like audit event starts, as one string."""
    if event == "os.system":
        command = args[0] if args else ""
    elif event == "subprocess.Popen":
        command = args[1] if len(args) > 1 else ""
    elif event == "os.spawn":
        command = args[2] if len(args) > 2 else ""
    else:
        command = args[1] if len(args) > 1 else ""
    if isinstance(command, (bytes, bytearray)):
        command = command.decode("utf-8", "replace")
    if isinstance(command, (list, tuple)):
        command = " ".join(
            part.decode("utf-8", "replace") if isinstance(part, (bytes, bytearray)) else str(part)
            for part in command
        )
    return str(command)


def _installed_by(command):
    """What ``command`` asks pip to install (its words after ``install``), or None when it does
    not run pip (``pip``, ``pip3``, ``python -m pip``, any path or version of them)."""
    global _installer
    if _installer is None:
        import re

        _installer = re.compile(
            r"(?:^|[\s;&|(`'\"/])(?:pip(?:3(?:\.\d+)?)?|python(?:3(?:\.\d+)?)?(?:\s+-\S+)*\s+-m\s+pip)"
            r"(?:\s+-\S+)*\s+(?P<verb>\S+)(?P<rest>[^;&|\n]*)"
        )
    match = _installer.search(command)
    if match is None:
        return None
    words = [w.strip("'\"`()") for w in match.group("rest").split() if not w.startswith("-")]
    return " ".join(words[:5]) or "packages"


def _refuse_installs(event, args):
    """The audit hook of the worker: starting pip raises ``PackageInstallError`` at once,
    with the sentence, instead of a wait on a network that is not there."""
    if event not in _INSTALL_EVENTS:
        return
    packages = _installed_by(_command_words(event, args))
    if packages is not None:
        raise PackageInstallError(_install_sentence(packages))


def _missing_module(error):
    """The top-level module a ``ModuleNotFoundError`` in ``error``'s chain could not find, when
    no package of the image provides it; None otherwise (a failed import inside a package that
    is there is that package's own error)."""
    import importlib.util

    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, ModuleNotFoundError) and error.name:
            top = error.name.split(".")[0]
            try:
                found = importlib.util.find_spec(top) is not None
            except (ImportError, ValueError):
                found = False
            return None if found else top
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def _explain_missing_package(error=None, source=b""):
    """After a failed script: the sentence when it failed on a module the image lacks, or
    (``source``, on a syntax error) on a notebook's ``!pip install`` line."""
    if isinstance(error, PackageInstallError):
        print(str(error), file=sys.stderr)
        return
    module = _missing_module(error) if error is not None else None
    if module is not None:
        print(_import_sentence(module), file=sys.stderr)
        return
    for line in source.decode("utf-8", "replace").splitlines():
        stripped = line.strip()
        if stripped[:1] in ("!", "%"):
            packages = _installed_by(stripped[1:].strip())
            if packages is not None:
                print(_install_sentence(packages), file=sys.stderr)
                return


def _run(script, names, session=None):
    """Runs the script in this process; returns its exit code. With ``session`` (see
    ``_session_job``), the kept state is restored before the script and written after it
    succeeded."""
    import ast
    import gc

    with open(script, "rb") as handle:
        source = handle.read()
    try:
        tree = ast.parse(source, filename=script)
    except SyntaxError:
        traceback.print_exc(limit=0)
        _explain_missing_package(source=source)
        return 1

    tree, dropped = _without_reassignments(tree)
    for line, name in dropped:
        print(
            f"file-agent: ignored reassignment of `{name}` on line {line}; "
            f"it is preset and must not be changed",
            file=sys.stderr,
        )

    os.makedirs(OUTPUT_DIR, exist_ok=True)
    os.chdir(OUTPUT_DIR)
    namespace = {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__}
    namespace.update(names)
    if not _restore_session(namespace, session):
        return 1
    code = compile(tree, script, "exec")
    sys.addaudithook(_refuse_network)
    sys.addaudithook(_refuse_installs)
    try:
        exec(code, namespace)
        _save_session(namespace, session)
    except SystemExit as exit:
        return _exit_code(exit)
    except BaseException:
        # Show the user's frames only: the first frame is this runner's exec call.
        etype, value, tb = sys.exc_info()
        traceback.print_exception(etype, value, tb.tb_next if tb is not None else None)
        _explain_missing_package(value)
        return 1
    finally:
        # Drop the script's objects so files it left open are flushed and closed before
        # the worker exits.
        namespace.clear()
        gc.collect()
    return 0


def _worker(warm, fds, usage):
    """The forked worker; ``fds`` are the pipe ends it keeps, by name (``control``: jobs from
    PID 1; ``status``: READY to PID 1; ``stdout``/``stderr``: what PID 1 relays), and ``close``
    the ends that are PID 1's; ``usage`` is where it writes its ``getrusage``. Never returns."""
    code = 1
    try:
        # What every script's run needs (the script's parse, the collection after it), imported
        # while nothing waits for it.
        import ast  # noqa: F401
        import gc  # noqa: F401

        for fd in fds["close"]:
            os.close(fd)
        # Nothing of the container's own streams: stdin is empty, stdout and stderr are pipes.
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(fds["stdout"], 1)
        os.dup2(fds["stderr"], 2)
        os.close(fds["stdout"])
        os.close(fds["stderr"])
        _set_dumpable(True)
        try:
            with open("/proc/self/oom_score_adj", "w") as handle:
                handle.write("1000")
        except OSError:
            pass
        if warm:
            for name in PRELOAD:
                _import(name)
            _prime(_prime_excel_writing)
            _freeze()
            _flush_standard_streams()
            _write_all(fds["status"], b"ready\n")
            _preload_while_idle(fds["control"])
        job = _read_job(fds["control"])
        os.close(fds["control"])
        if warm:
            _mark_idle_primed(False)
        if job is not None:
            usage.mark(usage.start)
            code = _run(job["script"], job["names"], job.get("session"))
            usage.mark(usage.end)
        else:
            code = 0
    except BaseException:  # noqa: BLE001 - whatever happens, the worker must exit here
        traceback.print_exc()
    _flush_standard_streams()
    _report_done(fds["status"], code & 0xFF)
    os._exit(code & 0xFF)


def _report_done(status, code):
    """Tells PID 1 the script's exit code before the worker exits: the kernel's teardown of an
    interpreter with pandas loaded (10 to 50 ms measured, more under gVisor) then overlaps PID
    1's sending of the result instead of preceding it. stdout and stderr are closed first, so
    PID 1 sees them end without waiting for the exit."""
    try:
        os.close(1)
        os.close(2)
        _write_all(status, DONE + str(code).encode() + b"\n")
    except OSError:
        pass  # PID 1 then learns the end from waitpid, as for a worker that died


# ---------------------------------------------------------------------------------------------
# Sessions: the state a conversation keeps between attempts, as data. Each attempt is still a
# fresh container; what the script's top-level names held goes out as one archive beside its
# outputs and comes back in with the next attempt of the session. file-agent never opens it:
# only this worker pickles and unpickles, inside the sandbox.
#
# The archive: ``STATE_MAGIC``, then records, each eight bytes of length (big-endian) and that
# many bytes of pickle: first ``{"modules": {name: module}}`` (modules are imported again, not
# pickled), then for each kept name a record of the name and one of its value, so that a value
# that cannot be restored loses that name only.

# Where the state of the previous attempt arrives (in the upload), under /work.
SESSION_IN = "session/state"
# Where the worker writes the state this attempt leaves, under /work/out (copied out with the
# outputs; file-agent takes it out of them).
SESSION_OUT = ".file-agent-state"
# What the worker writes instead, under /work/out, when the state it would leave is byte for byte
# the state that came in: that state's SHA-256 (hex), so that an unchanged state is not sent back
# (file-agent then keeps the state the attempt started from).
SESSION_UNCHANGED = ".file-agent-state-unchanged"
STATE_MAGIC = b"file-agent state 1\n"
# What the answer shows of one name's reason, at most.
WHY_MAX_CHARS = 200


def _session_job(request):
    """What the worker needs of the request's ``session`` (``restore``: whether a state came;
    ``state_sha256``: its SHA-256, as file-agent names it; ``max_bytes``: the most the kept state
    may be), or None without a session."""
    session = request.get("session")
    if not isinstance(session, dict):
        return None
    limit = session.get("max_bytes")
    restore = session.get("restore") is True
    came = session.get("state_sha256")
    came = came if restore and isinstance(came, str) and len(came) == 64 else None
    return {
        "restore": os.path.join(WORK_DIR, SESSION_IN) if restore else None,
        "came_sha256": came,
        "save": os.path.join(OUTPUT_DIR, SESSION_OUT),
        "unchanged": os.path.join(OUTPUT_DIR, SESSION_UNCHANGED),
        "max_bytes": limit if isinstance(limit, int) and limit > 0 else 0,
    }


class _StateTooLarge(Exception):
    """The state passed its bound while being written."""


class _BoundedWriter:
    """The archive's file, refusing to grow past ``limit`` bytes."""

    def __init__(self, handle, limit):
        self.handle = handle
        self.limit = limit
        self.size = 0

    def write(self, data):
        # Protocol 5 hands large buffers (a DataFrame's columns) over as a PickleBuffer,
        # which has no len().
        self.size += memoryview(data).nbytes
        if self.size > self.limit:
            raise _StateTooLarge()
        return self.handle.write(data)

    def rewind(self, position):
        """Forgets everything written after ``position``."""
        self.handle.flush()
        self.handle.seek(position)
        self.handle.truncate()
        self.size = position


def _keepable_name(name, value):
    """Whether a top-level name is the script's own (not a preset, a dunder or a dropped
    reassignment)."""
    return not (
        name.startswith("__")
        or name in PROTECTED
        or name.startswith(DISCARD_PREFIX)
        or value is __builtins__
    )


def _why_not_kept(value):
    """Why ``value`` cannot be kept, in words, for the kinds pickle cannot take; None to try."""
    import types

    if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType)):
        return "a generator: its paused code cannot be saved; build it again"
    if isinstance(value, io.IOBase):
        return "an open file: open it again in the next call"
    if isinstance(value, types.FunctionType) and value.__name__ == "<lambda>":
        return "a lambda: pickle keeps functions by name; define it again"
    if isinstance(value, (types.FunctionType, type)) and value.__module__ == "__main__":
        return "defined by the script: pickle keeps functions and classes by name; define it again"
    return None


def _record(writer, payload):
    """Writes one record (length, then the pickle of ``payload``); a payload that cannot be
    pickled raises and leaves nothing of itself."""
    import pickle

    start = writer.size
    writer.write(b"\0" * 8)
    try:
        pickle.Pickler(writer, protocol=pickle.HIGHEST_PROTOCOL).dump(payload)
    except BaseException:
        writer.rewind(start)
        raise
    end = writer.size
    writer.handle.flush()
    writer.handle.seek(start)
    writer.handle.write((end - start - 8).to_bytes(8, "big"))
    writer.handle.seek(end)


def _save_session(namespace, session):
    """Writes the names of ``namespace`` that pickle as the session's state, and says on stderr
    which were kept and which not, and why. Never raises: the script succeeded whatever
    happens here, and the state then stays as it was (nothing is written)."""
    if not session:
        return
    path = session["save"]
    try:
        for left in (path, session["unchanged"]):
            if os.path.lexists(left):
                os.unlink(left)
        kept, dropped = _write_state(namespace, path, session["max_bytes"])
        unchanged = _mark_if_unchanged(session)
    except _StateTooLarge:
        _forget(path)
        print(
            f"file-agent: session: the state is larger than {session['max_bytes']} bytes and "
            "was not kept; the previous state stays. Keep fewer or smaller names (del them).",
            file=sys.stderr,
        )
        return
    except Exception as error:  # noqa: BLE001 - the script succeeded; say why, keep nothing
        _forget(path)
        print(f"file-agent: session: the state could not be written: {error}", file=sys.stderr)
        return
    said = "file-agent: session: kept " + (", ".join(kept) if kept else "no names")
    if dropped:
        said += "; not kept: " + "; ".join(f"{name} ({why})" for name, why in dropped)
    if unchanged:
        said += " (unchanged since the call before)"
    print(said, file=sys.stderr)


def _mark_if_unchanged(session):
    """When the state just written is byte for byte the state that came in, replaces it with the
    marker naming that state's SHA-256; True then. Sizes are compared first, so a state that
    grew or shrank is not hashed."""
    came = session.get("came_sha256")
    path = session["save"]
    if not came or os.path.getsize(path) != os.path.getsize(session["restore"]):
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != came:
        return False
    with open(session["unchanged"], "w") as marker:
        marker.write(came + "\n")
    os.unlink(path)
    return True


def _forget(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _write_state(namespace, path, limit):
    """Writes the archive at ``path``: (kept names, [(name, why not)])."""
    import types

    names = [(n, v) for n, v in list(namespace.items()) if _keepable_name(n, v)]
    modules = {n: v.__name__ for n, v in names if isinstance(v, types.ModuleType)}
    kept, dropped = [f"{name} (module {module})" for name, module in modules.items()], []
    with open(path, "wb") as handle:
        writer = _BoundedWriter(handle, limit)
        writer.write(STATE_MAGIC)
        _record(writer, {"modules": modules})
        for name, value in names:
            if name in modules:
                continue
            why = _why_not_kept(value)
            if why is None:
                start = writer.size
                try:
                    _record(writer, name)
                    _record(writer, value)
                    kept.append(name)
                    continue
                except _StateTooLarge:
                    raise
                except Exception as error:  # noqa: BLE001 - anything pickle raises
                    writer.rewind(start)
                    why = f"it cannot be pickled: {type(error).__name__}: {error}"
            dropped.append((name, why[:WHY_MAX_CHARS]))
    return kept, dropped


def _restore_session(namespace, session):
    """Puts the kept state's names into ``namespace``; a name that cannot be restored is
    reported and left out. False (said on stderr) when the archive itself cannot be read."""
    if not session or not session.get("restore"):
        return True
    import importlib

    failed = []
    try:
        modules, values = _read_state(session["restore"])
    except Exception as error:  # noqa: BLE001 - anything a damaged archive raises
        print(
            f"file-agent: session: the kept state could not be read ({error}); "
            "start the session over (reset_session)",
            file=sys.stderr,
        )
        return False
    for name, module in modules.items():
        try:
            namespace[name] = importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - a module gone from the image
            failed.append(f"{name} ({type(error).__name__}: {error})")
    for name, restore in values:
        try:
            namespace[name] = restore()
        except Exception as error:  # noqa: BLE001 - anything unpickling raises
            failed.append(f"{name} ({type(error).__name__}: {error})"[:WHY_MAX_CHARS])
    if failed:
        print("file-agent: session: not restored: " + "; ".join(failed), file=sys.stderr)
    return True


def _read_state(path):
    """The archive's modules, and for each kept name a function that unpickles its value."""
    import pickle

    with open(path, "rb") as handle:
        if handle.read(len(STATE_MAGIC)) != STATE_MAGIC:
            raise ValueError("it is not a file-agent state")
        records = []
        while head := handle.read(8):
            size = int.from_bytes(head, "big")
            data = handle.read(size)
            if len(head) != 8 or len(data) != size:
                raise ValueError("it ends inside a record")
            records.append(data)
    if len(records) % 2 != 1:
        raise ValueError("its records are not a header and pairs of name and value")
    header = pickle.loads(records[0])
    names = [pickle.loads(data) for data in records[1::2]]
    restores = [(lambda data=data: pickle.loads(data)) for data in records[2::2]]
    return header.get("modules", {}), list(zip(names, restores))


# ---------------------------------------------------------------------------------------------
# PID 1.


class _Stdin:
    """Reads of fd 0 that never take more than asked for: the header line, then exactly the
    upload (streamed, never held whole in memory), then nothing: what is left is the wait for
    end of file."""

    def __init__(self):
        self.buffer = b""

    def read_line(self, limit):
        while b"\n" not in self.buffer:
            if len(self.buffer) > limit:
                raise ValueError(f"the request header is longer than {limit} bytes")
            chunk = os.read(0, 4096)
            if not chunk:
                raise EOFError("stdin ended before the request header")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def reader(self, size):
        """A binary file of exactly the next ``size`` bytes."""
        return io.BufferedReader(_Exactly(self, size), buffer_size=1 << 16)


class _Exactly(io.RawIOBase):
    """The next ``size`` bytes of stdin as a raw file; a short stream is an error."""

    def __init__(self, stdin, size):
        self.stdin = stdin
        self.remaining = size

    def readable(self):
        return True

    def readinto(self, target):
        want = min(len(target), self.remaining)
        if want == 0:
            return 0
        if self.stdin.buffer:
            data, self.stdin.buffer = self.stdin.buffer[:want], self.stdin.buffer[want:]
        else:
            data = os.read(0, want)
            if not data:
                raise EOFError(f"stdin ended {self.remaining} bytes before the end of the upload")
        target[: len(data)] = data
        self.remaining -= len(data)
        return len(data)


def _sealed(key, sequence, payload):
    """``payload`` encrypted (and decrypted) as frame ``sequence``: XORed with SHAKE256 over
    ``CIPHER_CONTEXT``, ``key`` and the sequence number (eight bytes, big-endian)."""
    if not payload:
        return payload
    stream = hashlib.shake_256(CIPHER_CONTEXT + key + sequence.to_bytes(8, "big"))
    mask = stream.digest(len(payload))
    return (int.from_bytes(payload, "little") ^ int.from_bytes(mask, "little")).to_bytes(
        len(payload), "little"
    )


class _Frames:
    """PID 1's stdout after READY: frames (see the module's comment), each encrypted and
    closed by its MAC under the request's ``key``, with the script's stdout and stderr each cut
    at ``cap`` bytes and the rest counted."""

    def __init__(self, key, cap):
        self.key = key.encode()
        self.mac = hmac.new(self.key, digestmod=hashlib.sha256)
        self.sequence = 0
        self.cap = cap
        self.kept = {FRAME_STDOUT: 0, FRAME_STDERR: 0}
        self.dropped = {FRAME_STDOUT: 0, FRAME_STDERR: 0}
        # Once the script has ended, frames are gathered here and written together (see
        # ``gather``); None while they go out one by one.
        self.batch = None

    def gather(self):
        """From now on, frames are written together, up to ``BATCH_MAX_BYTES`` at a time and at
        the end frame: the result crosses the container's stdout (and gVisor, and Docker's
        attach stream) in one write instead of one per frame."""
        self.batch = bytearray()

    def _out(self, kind, framed):
        if self.batch is None:
            _write_all(1, framed)
            return
        self.batch += framed
        if kind == FRAME_END or len(self.batch) >= BATCH_MAX_BYTES:
            _write_all(1, bytes(self.batch))
            self.batch.clear()

    def write(self, kind, payload=b""):
        """Writes ``payload`` as frames of ``kind`` (one, empty, when there is nothing)."""
        start = 0
        while True:
            chunk = _sealed(self.key, self.sequence, payload[start : start + FRAME_MAX_BYTES])
            head = kind + len(chunk).to_bytes(4, "big")
            mac = self.mac.copy()
            mac.update(self.sequence.to_bytes(8, "big"))
            mac.update(head)
            mac.update(chunk)
            self._out(kind, head + chunk + mac.digest()[:MAC_BYTES])
            self.sequence += 1
            start += FRAME_MAX_BYTES
            if start >= len(payload):
                return

    def relay(self, kind, data):
        """The script's ``data`` on stdout or stderr, up to the cap."""
        room = max(0, self.cap - self.kept[kind])
        kept = data[:room]
        if kept:
            self.write(kind, kept)
            self.kept[kind] += len(kept)
        self.dropped[kind] += len(data) - len(kept)

    def say(self, text):
        """PID 1's own words about the attempt, on the script's stderr (not counted)."""
        self.write(FRAME_STDERR, f"file-agent: {text}\n".encode())

    def report(self, ended, exit_code=None, signal_number=None, oom_killed=None, duration=0.0, resources=None):
        self.write(
            FRAME_EXIT,
            json.dumps(
                {
                    "ended": ended,
                    "exit_code": exit_code,
                    "signal": signal_number,
                    "oom_killed": oom_killed,
                    "duration_s": round(duration, 6),
                    "stdout_dropped": self.dropped[FRAME_STDOUT],
                    "stderr_dropped": self.dropped[FRAME_STDERR],
                    "resources": resources,
                }
            ).encode(),
        )


class _ArchiveFrames(io.RawIOBase):
    """A write-only file whose bytes go out as ``a`` frames, for tarfile's stream mode."""

    def __init__(self, frames):
        self.frames = frames
        self.pending = bytearray()

    def writable(self):
        return True

    def write(self, data):
        self.pending += data
        while len(self.pending) >= FRAME_MAX_BYTES:
            self.frames.write(FRAME_ARCHIVE, bytes(self.pending[:FRAME_MAX_BYTES]))
            del self.pending[:FRAME_MAX_BYTES]
        return len(data)

    def flush(self):
        if self.pending:
            self.frames.write(FRAME_ARCHIVE, bytes(self.pending))
            self.pending.clear()


class _Worker:
    """PID 1's side of the worker: its pid, the pipes, and its end once reaped."""

    def __init__(self, warm):
        control = os.pipe()
        status = os.pipe()
        stdout = os.pipe()
        stderr = os.pipe()
        self.usage = _Usage()
        _flush_standard_streams()
        self.pid = os.fork()
        if self.pid == 0:
            _worker(
                warm,
                {
                    "control": control[0],
                    "status": status[1],
                    "stdout": stdout[1],
                    "stderr": stderr[1],
                    "close": (control[1], status[0], stdout[0], stderr[0]),
                },
                self.usage,
            )
        for fd in (control[0], status[1], stdout[1], stderr[1]):
            os.close(fd)
        self.control = control[1]
        self.status = status[0]
        self.stdout = stdout[0]
        self.stderr = stderr[0]
        # SIGCHLD wakes PID 1's waits through this pipe (poll returns on it).
        self.wakeup = os.pipe()
        for fd in self.wakeup:
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.wakeup[1])
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.ended = None
        # The worker's rusage from ``wait4`` (itself and the children it waited for), once
        # reaped.
        self.rusage = None
        # How the script ended: (exit code, signal or None), once known.
        self.exit = None

    def reap(self):
        """Reaps every child that has ended (PID 1 inherits the script's orphans); the
        worker's wait status once it has ended, else None."""
        try:
            os.read(self.wakeup[0], 4096)
        except (BlockingIOError, InterruptedError):
            pass
        while self.ended is None:
            try:
                pid, status, rusage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == self.pid:
                self.ended, self.rusage = status, rusage
        return self.ended

    def await_ready(self):
        """Waits for the warm worker's imports; what it writes meanwhile (an import warning)
        goes to the container's stderr, for file-agent's log. False when it died first."""
        line = b""
        while True:
            ready = _readable([self.status, self.stdout, self.stderr, self.wakeup[0]], None)
            for fd in (self.stdout, self.stderr):
                if fd in ready:
                    data = os.read(fd, 1 << 16)
                    if data:
                        _write_all(2, data)
            if self.status in ready:
                chunk = os.read(self.status, 64)
                line += chunk
                if line == b"ready\n":
                    return True
                if not chunk:
                    return False
            if self.reap() is not None:
                return False

    def await_request(self, max_idle):
        """Waits until stdin has something (the request, or its end): "request"; "idle" when
        ``max_idle`` passed first (None: no limit), "worker lost" when the worker died. What
        the worker writes meanwhile is read and dropped: nothing may reach stdout before the
        request."""
        deadline = None if max_idle is None else time.monotonic() + max_idle
        watched = [0, self.stdout, self.stderr, self.wakeup[0]]
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return "idle"
            ready = _readable(watched, remaining)
            if 0 in ready:
                return "request"
            for fd in (self.stdout, self.stderr):
                if fd in ready and not os.read(fd, 1 << 16):
                    watched.remove(fd)
            if self.reap() is not None:
                return "worker lost"

    def start(self, script, names, session=None):
        """Hands the worker its job; False when it is gone."""
        job = json.dumps({"script": script, "names": names, "session": session}).encode() + b"\n"
        try:
            _write_all(self.control, job)
            os.close(self.control)
        except OSError:
            return False
        return True

    def resources(self, first_pid):
        """What the attempt used (the ``resources`` of the ``x`` frame); ``first_pid`` is the
        namespace's last PID when the job was handed over."""
        start = self.usage.read(self.usage.start)
        if self.rusage is not None:
            used = self.rusage
            user, system, peak = used.ru_utime - start[0], used.ru_stime - start[1], used.ru_maxrss
        else:
            end = self.usage.read(self.usage.end)
            user = end[0] - start[0] + end[3] - start[3]
            system = end[1] - start[1] + end[4] - start[4]
            peak = max(end[2], end[5])
        last_pid = _last_pid(at_end=True)
        # NaN: the worker wrote no figures (it died before its job, or before the script's end
        # without being reaped yet); the script may have written anything there.
        known = all(math.isfinite(value) for value in (user, system, peak))
        return {
            "cpu_user_s": round(max(0.0, user), 6) if known else None,
            "cpu_system_s": round(max(0.0, system), 6) if known else None,
            # ru_maxrss is in KiB on Linux.
            "peak_memory_bytes": int(peak) * 1024 if known else None,
            "output_bytes": _output_bytes(),
            "processes": None if None in (first_pid, last_pid) else last_pid - first_pid + 1,
        }

    def relay(self, frames, deadline):
        """Relays the worker's output until the script has ended ("ended": ``exit`` then holds
        its exit code and signal), ``deadline`` passes ("deadline") or stdin ends ("server
        gone"). The end is the worker's own report (``DONE``) or, when it died without one, its
        wait status."""
        watched = {self.stdout: FRAME_STDOUT, self.stderr: FRAME_STDERR}
        # What the worker wrote on its status pipe so far; the pipe is watched until it ends,
        # holds a line that is no report, or more than a report's length.
        said = b""
        status = [self.status]
        while True:
            if self.reap() is not None:
                self.exit = _exit_of(self.ended)
                return "ended"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "deadline"
            ready = _readable([*watched, *status, self.wakeup[0], 0], remaining)
            for fd in [fd for fd in watched if fd in ready]:
                data = os.read(fd, 1 << 16)
                if data:
                    frames.relay(watched[fd], data)
                else:
                    del watched[fd]
            if status and self.status in ready:
                # One read of what is there: the script can write this pipe too, and must not
                # be able to hold PID 1 in a read that waits for a line break.
                chunk = os.read(self.status, DONE_MAX_BYTES)
                said += chunk
                self.exit = _reported_exit(said)
                if self.exit is not None:
                    return "ended"
                if not chunk or said.endswith(b"\n") or len(said) >= DONE_MAX_BYTES:
                    status.clear()
            if 0 in ready and not os.read(0, 4096):
                return "server gone"

    def drain(self, frames):
        """Relays what is left in the pipes, once everything that could write them has been
        killed: until both end, or ``DRAIN_S``."""
        watched = {self.stdout: FRAME_STDOUT, self.stderr: FRAME_STDERR}
        deadline = time.monotonic() + DRAIN_S
        while watched:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            for fd in _readable(list(watched), remaining):
                data = os.read(fd, 1 << 16)
                if data:
                    if frames is not None:
                        frames.relay(watched[fd], data)
                else:
                    del watched[fd]

    def stop_everything(self):
        """Kills the worker and whatever the script started, so nothing writes after this."""
        if os.getpid() == 1:
            # As the container's init: every other process in it.
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif os.getpgrp() == os.getpid():
            # Outside a container (the tests' local runner starts it as the leader of its own
            # process group): every other process of the group.
            for pid in _group_members():
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if self.ended is None and self.exit is None:
            try:
                _, self.ended, self.rusage = os.wait4(self.pid, 0)
            except ChildProcessError:
                pass
        self.reap()


def _reported_exit(said):
    """(exit code, None) when ``said`` is the worker's whole report on its status pipe, else
    None. The script can write there too: it gains nothing, since it could as well have exited
    with the code it writes."""
    number = said[len(DONE) : -1]
    if said.startswith(DONE) and said.endswith(b"\n") and number.isdigit() and int(number) <= 0xFF:
        return int(number), None
    return None


def _exit_of(wait_status):
    """(exit code, signal or None) of a wait status; a signal's code is 128 + its number."""
    code = os.waitstatus_to_exitcode(wait_status)
    if code < 0:
        return 128 - code, -code
    return code, None


def _group_members():
    """Processes of this process group other than this one (from /proc)."""
    group = os.getpgrp()
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == group:
            members.append(int(entry))
    return members


def _ignore_signals_from_inside():
    for name in IGNORED_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, signal.SIG_IGN)


def _cpu_quota():
    """The container's CPU limit, rounded up (cgroup v2 or v1); 1 when unknown."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as handle:
            quota, period = handle.read().split()
        if quota != "max":
            return max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as handle:
            quota = int(handle.read())
        with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as handle:
            period = int(handle.read())
        if quota > 0:
            return max(1, -(-quota // period))
    except (OSError, ValueError):
        pass
    return 1


def _limit_threads():
    """Math libraries start a thread per host CPU by default, which the pids limit and a
    one-CPU quota do not want. Set before the worker is forked, so that it inherits them."""
    threads = str(_cpu_quota())
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)


def _seed_matplotlib_cache():
    """Copies the font list built into the image to MPLCONFIGDIR (a fresh tmpfs each
    container), so that a chart does not first spend a fraction of a second scanning fonts."""
    target = os.environ.get("MPLCONFIGDIR")
    if not target or not os.path.isdir(MATPLOTLIB_SEED) or os.path.exists(target):
        return
    try:
        shutil.copytree(MATPLOTLIB_SEED, target)
    except OSError:
        pass  # matplotlib rebuilds it; slower, not wrong


def _receive_upload(stdin, size):
    """Reads exactly ``size`` bytes of tar from stdin and unpacks them into /work as they come."""
    upload = stdin.reader(size)
    with tarfile.open(fileobj=upload, mode="r|") as archive:
        for member in archive:
            parts = member.name.split("/")
            if member.name.startswith("/") or ".." in parts:
                raise ValueError(f"unsafe path in the upload: {member.name!r}")
            target = os.path.join(WORK_DIR, member.name)
            if member.isdir():
                os.makedirs(target, exist_ok=True)
            elif member.isfile():
                with archive.extractfile(member) as source, open(target, "wb") as sink:
                    while block := source.read(1 << 20):
                        sink.write(block)
                os.chmod(target, 0o444)
            else:
                raise ValueError(f"unexpected entry in the upload: {member.name!r}")
    # Whatever follows the archive's end blocks within the upload.
    while upload.read(1 << 16):
        pass
    # Results belong in /work/out. The sandbox user owns this tmpfs and could chmod it back; it
    # gains nothing a write to /tmp would not give it: both count against the memory limit.
    # Under Kubernetes /work is an emptyDir that root owns (mode 0777): it cannot be made
    # read-only from here, and that too gains a script nothing but a file nobody reads.
    for folder in (INPUT_DIR, WORK_DIR):
        os.makedirs(folder, exist_ok=True)
        try:
            os.chmod(folder, 0o555)
        except PermissionError:
            pass


def _preset_names(request):
    try:
        names = sorted(os.listdir(INPUT_DIR))
    except FileNotFoundError:
        names = []
    inputs = [os.path.join(INPUT_DIR, name) for name in names]
    return {
        "file_path": request.get("file_path") or None,
        "input_file_path": request.get("input_file_path") or (inputs[0] if len(inputs) == 1 else None),
        "output_dir": OUTPUT_DIR,
        "input_dir": INPUT_DIR,
        "input_files": inputs,
    }


def _oom_kills():
    """How many processes the kernel's out-of-memory killer has killed in this container's
    cgroup (v2 or v1), or None when the counter cannot be read (gVisor, old kernels)."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def _parse_args(argv):
    """(warm, max_idle seconds or None, work folder, script path), or None when the arguments
    are wrong."""
    args = argv[1:]
    warm = "--warm" in args
    args = [arg for arg in args if arg != "--warm"]
    options = {"--max-idle": None, "--work": WORK_DIR}
    for flag in options:
        if flag in args:
            at = args.index(flag)
            if at + 1 >= len(args):
                return None
            options[flag] = args[at + 1]
            del args[at : at + 2]
    if len(args) != 1:
        return None
    max_idle = options["--max-idle"]
    if max_idle is not None:
        try:
            max_idle = float(max_idle)
        except ValueError:
            return None
    return warm, max_idle, options["--work"], args[0]


def _use_work_dir(work):
    """Moves /work (and its in/ and out/) to ``work``."""
    global WORK_DIR, OUTPUT_DIR, INPUT_DIR
    WORK_DIR = work
    OUTPUT_DIR = os.path.join(work, "out")
    INPUT_DIR = os.path.join(work, "in")




def _read_request(stdin):
    """The attempt's header, once its upload is unpacked; None when stdin ends first (nobody
    took this container, or its server is gone)."""
    try:
        request = json.loads(stdin.read_line(HEADER_MAX_BYTES))
    except EOFError:
        return None
    if (
        not isinstance(request, dict)
        or not isinstance(request.get("upload_bytes"), int)
        or not isinstance(request.get("key"), str)
    ):
        raise ValueError("the request header is not the JSON object file-agent sends")
    try:
        _receive_upload(stdin, request["upload_bytes"])
    except (OSError, ValueError, EOFError, tarfile.TarError) as error:
        raise _BadUpload(request, error) from error
    return request


class _BadUpload(Exception):
    """An upload that could not be unpacked, under a header that could (so with its key)."""

    def __init__(self, request, error):
        super().__init__(str(error))
        self.request = request


def _send_outputs(frames):
    """Writes /work/out as a tar stream in ``a`` frames."""
    sink = _ArchiveFrames(frames)
    # No owner names in the archive (file-agent ignores owners): looking them up in /etc/passwd
    # and /etc/group cost 10 to 40 ms an attempt under gVisor.
    tarfile.pwd = tarfile.grp = None
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as archive:
        for folder, dirs, files in os.walk(OUTPUT_DIR):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                path = os.path.join(folder, name)
                arcname = os.path.relpath(path, OUTPUT_DIR)
                try:
                    archive.add(path, arcname=arcname, recursive=False)
                except OSError as error:
                    frames.say(f"could not copy out {arcname}: {error}")
    sink.flush()


def _attempt(worker, frames, script, request):
    """Runs the attempt the request describes in the worker and writes its result; returns
    PID 1's exit code."""
    timeout = float(request.get("timeout_s") or 0)
    deadline = time.monotonic() + timeout + DEADLINE_GRACE_S
    oom_kills_before = _oom_kills()
    first_pid = _last_pid()
    started = time.monotonic()
    if not worker.start(script, _preset_names(request), _session_job(request)):
        worker.reap()
    ended = worker.relay(frames, deadline)
    duration = time.monotonic() - started
    worker.stop_everything()
    if ended == "server gone":
        return EXIT_SERVER_GONE
    frames.gather()
    worker.drain(frames)
    if ended == "deadline":
        frames.say("the script ran past its deadline and was stopped by the runner")
        frames.report("deadline", duration=duration, resources=worker.resources(first_pid))
        frames.write(FRAME_END)
        return EXIT_DEADLINE
    code, signal_number = worker.exit
    oom_kills_after = _oom_kills()
    oom_killed = None
    if oom_kills_before is not None and oom_kills_after is not None:
        oom_killed = oom_kills_after > oom_kills_before
    elif signal_number != signal.SIGKILL:
        # No counter (gVisor): a script that was not killed was not killed for its memory;
        # for one that was, file-agent asks Docker.
        oom_killed = False
    frames.report("exited", code, signal_number, oom_killed, duration, worker.resources(first_pid))
    try:
        _send_outputs(frames)
    except (OSError, tarfile.TarError) as error:
        frames.say(f"could not send the outputs: {error}")
    frames.write(FRAME_END)
    return code


def main(argv):
    parsed = _parse_args(argv)
    if parsed is None:
        print("usage: runner.py [--warm] [--max-idle SECONDS] [--work DIR] SCRIPT", file=sys.stderr)
        return 2
    warm, max_idle, work, script = parsed
    _use_work_dir(work)
    _set_dumpable(False)
    _limit_threads()
    _seed_matplotlib_cache()
    worker = _Worker(warm)
    _ignore_signals_from_inside()
    if warm:
        if not worker.await_ready():
            print("file-agent: the warm worker ended before it was ready", file=sys.stderr)
            return EXIT_WORKER_LOST
        _write_all(1, READY)
    waited = worker.await_request(max_idle)
    if waited != "request":
        worker.stop_everything()
        if waited == "worker lost":
            print("file-agent: the worker ended before the request came", file=sys.stderr)
            return EXIT_WORKER_LOST
        return EXIT_SERVER_GONE
    stdin = _Stdin()
    try:
        request = _read_request(stdin)
    except _BadUpload as bad:
        worker.stop_everything()
        frames = _frames_for(bad.request)
        frames.say(f"could not receive the script and inputs: {bad}")
        frames.report("bad_request", EXIT_BAD_REQUEST)
        frames.write(FRAME_END)
        return EXIT_BAD_REQUEST
    except (OSError, ValueError, EOFError) as error:
        # No key to frame with: said on stderr, and file-agent sees no report.
        worker.stop_everything()
        print(f"file-agent: could not read the request: {error}", file=sys.stderr)
        return EXIT_BAD_REQUEST
    if request is None:
        worker.stop_everything()
        return EXIT_SERVER_GONE
    return _attempt(worker, _frames_for(request), script, request)


def _frames_for(request):
    cap = request.get("stdio_max_bytes")
    return _Frames(request["key"], cap if isinstance(cap, int) and cap >= 0 else STDIO_MAX_BYTES)


if __name__ == "__main__":
    code = main(sys.argv)
    _flush_standard_streams()
    # Skip interpreter finalisation: the result is sent and the streams flushed, and the
    # container is removed right after.
    os._exit(code & 0xFF)
