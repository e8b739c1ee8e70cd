"""file-agent sandbox runner: PID 1 of every sandbox container; runs one script, once.

Invoked as ``python3 -I -B /opt/file-agent/runner.py [--warm --max-idle SECONDS] /work/script.py``.
``--work DIR`` moves ``/work`` elsewhere: file-agent's tests run this runner with the host's Python
in a temporary folder (their local runner); containers always use ``/work``.

A container is either *cold* (created for an attempt that is already waiting) or *warm* (created
ahead by file-agent's pool: ``--warm``). A warm runner first imports what nearly every attempt
needs (``PRELOAD``) and writes ``READY`` on stdout; file-agent reads that line and keeps the
container until an attempt takes it. While it waits untaken for ``IDLE_PRELOAD_AFTER_S``, it also
imports what many attempts need (``IDLE_PRELOAD``), one module at a time, looking at stdin in
between: on a quiet server every warm container has them, while under load (containers taken as
soon as they are ready) no CPU goes to imports an attempt may not use. Either way the container
serves exactly one attempt and is then removed: nothing here loops.

Everything that belongs to the attempt arrives on stdin, never through the container's
environment or labels (so a warm container was created knowing nothing of the attempt):

1. one line of JSON, at most ``HEADER_MAX_BYTES``: ``seed`` (the output boundary is its
   SHA-256, so a script that prints what it finds cannot cut its own stdout by accident),
   ``upload_bytes``, ``timeout_s``, ``file_path`` and ``input_file_path``;
2. ``upload_bytes`` bytes of tar, unpacked into ``/work`` (a size-capped tmpfs): ``script.py``
   and ``in/<name>``, read-only;
3. nothing more: file-agent keeps stdin open for the whole attempt, and end of file means the
   server is gone (Docker closes a container's stdin when its one attached client goes away).

Then the runner forks. The child drops the script's reassignments of the preset names (with
Python's own ``ast``: the old server's regular expressions missed tuples, ``for`` targets,
``with ... as`` and the walrus operator) and runs it as ``__main__`` in ``/work/out``, with the
preloaded modules already in ``sys.modules``. The parent (PID 1) waits for whichever comes first:

- the child exits: the parent kills whatever the script left behind and writes the boundary and a
  tar of ``/work/out`` on stdout; file-agent unpacks it as untrusted input (a script can forge
  the stream, but only to spoil its own result). Then one last line on stderr, after an exit
  marker derived from the same seed, says how it ended (``exit_code``, and ``oom_killed`` when
  the cgroup's counter of out-of-memory kills can be read), so that file-agent has the whole
  result without waiting for the container to be reported gone;
- ``timeout_s`` + ``DEADLINE_GRACE_S`` pass: file-agent kills the container at ``timeout_s``; this
  is the runner's own backstop, which also holds when no server is watching any more;
- stdin ends: the server crashed or was killed; nobody will read a result, so everything stops.

The parent is not dumpable (no ptrace of it by the script, which runs as the same user), keeps no
secret, and as PID 1 cannot be killed from inside the container. The script's process has the
highest OOM score, so the kernel's out-of-memory killer takes it rather than the runner.

It does not enforce the sandbox: the container does (no network, read-only root, dropped
capabilities, limits). A script that imports ``os`` and writes elsewhere only reaches what the
container lets it reach.
"""

import ast
import gc
import hashlib
import io
import json
import os
import select
import shutil
import signal
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
# What a warm container imports before it says READY: what nearly every attempt needs (pandas'
# Excel formatting is imported on the first to_excel, by most attempts).
PRELOAD = ("numpy", "pandas", "pandas.io.formats.excel", "xlsxwriter")
# What it imports while it waits untaken: what many attempts need (reading and changing
# workbooks, Word documents, charts).
IDLE_PRELOAD = ("openpyxl", "docx", "matplotlib", "matplotlib.pyplot")
IDLE_PRELOAD_AFTER_S = 3.0
READY = b"--file-agent-ready--\n"
HEADER_MAX_BYTES = 64 * 1024
# The runner's own deadline comes this long after file-agent's, which normally acts first.
DEADLINE_GRACE_S = 5.0
# Exit codes of the runner itself (a script's own code passes through).
EXIT_BAD_REQUEST = 3
EXIT_DEADLINE = 124
EXIT_SERVER_GONE = 125
PR_SET_DUMPABLE = 4


class _DropReassignments(ast.NodeTransformer):
    """Renames stores and deletes of the protected names, wherever they stand."""

    def __init__(self):
        self.dropped = []

    def visit_Name(self, node):
        if node.id in PROTECTED and isinstance(node.ctx, (ast.Store, ast.Del)):
            self.dropped.append((node.lineno, node.id))
            return ast.copy_location(ast.Name(id=DISCARD_PREFIX + node.id, ctx=node.ctx), node)
        return node


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
    one-CPU quota do not want (and which forking would have to restart)."""
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


def _import(name):
    """Imports ``name``; a failure is reported and skipped: the script's own import will say
    what is wrong."""
    try:
        __import__(name)
    except Exception as error:  # noqa: BLE001 - any import failure is only reported
        print(f"file-agent: preloading {name} failed: {error}", file=sys.stderr, flush=True)


def _freeze():
    """Objects that exist now are never collected, so the script's garbage collections do not
    touch (and copy) the pages it shares with this process after the fork."""
    gc.collect()
    gc.freeze()


def _exercise():
    """Writes a small DataFrame to a workbook in memory, once: the lazy imports and caches of
    a script's first ``to_excel`` are then paid before READY, not by the attempt."""
    try:
        import pandas

        frame = pandas.DataFrame({"number": [1, 2], "text": ["a", "b"]})
        with pandas.ExcelWriter(io.BytesIO(), engine="xlsxwriter") as writer:
            frame.to_excel(writer, sheet_name="warm-up", index=False)
    except Exception as error:  # noqa: BLE001 - only an optimisation
        print(f"file-agent: the warm-up failed: {error}", file=sys.stderr, flush=True)


def _readable(fds, timeout):
    """Which of ``fds`` can be read (or have ended) within ``timeout`` seconds (None: no
    limit). poll, not select: gVisor refuses select."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    milliseconds = None if timeout is None else max(0, int(timeout * 1000))
    return {fd for fd, _ in poller.poll(milliseconds)}


def _stdin_ready(timeout):
    return bool(_readable([0], timeout))


def _preload_while_idle():
    """The idle preload: only while nothing has arrived on stdin; returns as soon as something
    has (a request, or the end of stdin), at the latest after the module being imported."""
    if _stdin_ready(IDLE_PRELOAD_AFTER_S):
        return
    for name in IDLE_PRELOAD:
        _import(name)
        if _stdin_ready(0):
            break
    _freeze()


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
    for folder in (INPUT_DIR, WORK_DIR):
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, 0o555)


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


def _exit_code(exit):
    """The process exit code Python would give for this SystemExit."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=sys.stderr)
    return 1


def _run(script, names):
    """Runs the script in this process; returns its exit code."""
    with open(script, "rb") as handle:
        source = handle.read()
    try:
        tree = ast.parse(source, filename=script)
    except SyntaxError:
        traceback.print_exc(limit=0)
        return 1

    transformer = _DropReassignments()
    tree = ast.fix_missing_locations(transformer.visit(tree))
    for line, name in transformer.dropped:
        print(
            f"file-agent: ignored reassignment of `{name}` on line {line}; "
            f"it is preset and must not be changed",
            file=sys.stderr,
        )

    os.makedirs(OUTPUT_DIR, exist_ok=True)
    os.chdir(OUTPUT_DIR)
    namespace = {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__}
    namespace.update(names)
    code = compile(tree, script, "exec")
    try:
        exec(code, namespace)
    except SystemExit as exit:
        return _exit_code(exit)
    except BaseException:
        # Show the user's frames only: the first frame is this runner's exec call.
        etype, value, tb = sys.exc_info()
        traceback.print_exception(etype, value, tb.tb_next if tb is not None else None)
        return 1
    finally:
        # Drop the script's objects so files it left open are flushed and closed before
        # /work/out is sent back.
        namespace.clear()
        gc.collect()
    return 0


def _flush_standard_streams():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or replaced stream is not our problem
            pass


def _set_dumpable(dumpable):
    """PR_SET_DUMPABLE: a process that is not dumpable cannot be traced by another process of
    the same user, and its /proc files belong to root."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, int(dumpable), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # defence in depth only; the container's boundary does not depend on it


def _child(script, names, wakeup, done):
    """The forked child: runs the script, tells the parent its exit code on ``done`` (so the
    parent need not wait for this process to be torn down) and exits; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in wakeup + (done[0],):
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        _set_dumpable(True)
        try:
            with open("/proc/self/oom_score_adj", "w") as handle:
                handle.write("1000")
        except OSError:
            pass
        code = _run(script, names)
    except BaseException:  # noqa: BLE001 - whatever happens, the child must exit here
        traceback.print_exc()
    _flush_standard_streams()
    try:
        os.write(done[1], str(code & 0xFF).encode())
    except OSError:
        pass
    os._exit(code & 0xFF)


def _wait(pid, wakeup, done, deadline):
    """Waits for the child ``pid``: its exit code (told on ``done``, or read from its exit
    status when it died without telling), or "deadline", or "server gone". Reaps every other
    child that ends meanwhile (PID 1 inherits the script's orphans)."""
    read_end = wakeup[0]
    watched = [read_end, done, 0]
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "deadline"
        ready = _readable(watched, remaining)
        if done in ready:
            told = os.read(done, 16)
            if told:
                try:
                    return int(told)
                except ValueError:
                    pass
            watched.remove(done)
        if read_end in ready:
            try:
                os.read(read_end, 4096)
            except BlockingIOError:
                pass
        if 0 in ready and not os.read(0, 4096):
            return "server gone"
        while True:
            try:
                ended, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if ended == 0:
                break
            if ended == pid:
                code = os.waitstatus_to_exitcode(status)
                return code if code >= 0 else 128 - code


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


def _stop_other_processes():
    """As the container's init, kill whatever the script started, so nothing writes after us."""
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _send_outputs(boundary):
    """Writes the boundary, then /work/out as a tar stream, on stdout."""
    with os.fdopen(1, "wb", closefd=False) as raw:
        raw.write(boundary.encode())
        with tarfile.open(fileobj=raw, mode="w|", format=tarfile.PAX_FORMAT) as archive:
            for folder, dirs, files in os.walk(OUTPUT_DIR):
                dirs.sort()
                for name in sorted(dirs) + sorted(files):
                    path = os.path.join(folder, name)
                    arcname = os.path.relpath(path, OUTPUT_DIR)
                    try:
                        archive.add(path, arcname=arcname, recursive=False)
                    except OSError as error:
                        print(f"file-agent: could not copy out {arcname}: {error}", file=sys.stderr)


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


def _read_request(stdin, max_idle):
    """The attempt's header and upload, or None when stdin ends first (nobody took this
    container, or its server is gone). A warm container that waits longer than ``max_idle``
    ends on its own."""
    if max_idle is not None:
        if not _stdin_ready(max_idle):
            return None
    try:
        request = json.loads(stdin.read_line(HEADER_MAX_BYTES))
    except EOFError:
        return None
    if not isinstance(request, dict) or not isinstance(request.get("seed"), str):
        raise ValueError("the request header is not the JSON object file-agent sends")
    _receive_upload(stdin, int(request.get("upload_bytes", 0)))
    return request


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
    if warm:
        for name in PRELOAD:
            _import(name)
        _exercise()
        _freeze()
        os.write(1, READY)
        _preload_while_idle()
    stdin = _Stdin()
    try:
        request = _read_request(stdin, max_idle)
    except (OSError, ValueError, EOFError, tarfile.TarError) as error:
        print(f"file-agent: could not receive the script and inputs: {error}", file=sys.stderr)
        return EXIT_BAD_REQUEST
    if request is None:
        return EXIT_SERVER_GONE
    digest = hashlib.sha256(request["seed"].encode()).hexdigest()
    boundary = f"\n--file-agent-outputs-{digest}--\n"
    exit_marker = f"\n--file-agent-exit-{digest}--\n"
    deadline = time.monotonic() + float(request.get("timeout_s", 0)) + DEADLINE_GRACE_S
    names = _preset_names(request)
    del request

    # SIGCHLD wakes the wait below through this pipe; installed before the fork so that a child
    # that ends at once is not missed.
    wakeup = os.pipe()
    for fd in wakeup:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _flush_standard_streams()
    oom_kills_before = _oom_kills()
    done = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(script, names, wakeup, done)
    os.close(done[1])
    ended = _wait(pid, wakeup, done[0], deadline)
    _stop_other_processes()
    if ended == "server gone":
        return EXIT_SERVER_GONE
    if ended == "deadline":
        print("file-agent: the script ran past its deadline and was stopped by the runner", file=sys.stderr)
        return EXIT_DEADLINE
    try:
        _send_outputs(boundary)
    except OSError as error:
        print(f"file-agent: could not send the outputs: {error}", file=sys.stderr)
        return ended or 1
    oom_kills_after = _oom_kills()
    oom_killed = None
    if oom_kills_before is not None and oom_kills_after is not None:
        oom_killed = oom_kills_after > oom_kills_before
    elif ended != 128 + signal.SIGKILL:
        # No counter (gVisor): a script that was not killed was not killed for its memory;
        # for one that was, file-agent asks Docker.
        oom_killed = False
    trailer = json.dumps({"exit_code": ended, "oom_killed": oom_killed})
    _flush_standard_streams()
    os.write(2, f"{exit_marker}{trailer}\n".encode())
    return ended


if __name__ == "__main__":
    code = main(sys.argv)
    _flush_standard_streams()
    # Skip interpreter finalisation (tearing down pandas and friends takes ~0.1 s): the outputs
    # are sent and the streams flushed, and the container is removed right after.
    os._exit(code & 0xFF)
