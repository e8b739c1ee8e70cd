"""file-agent sandbox runner: runs one model-written script inside the sandbox container.

Invoked as ``python3 -I -B /opt/file-agent/runner.py /work/script.py`` by file-agent. It:

0. receives the script and the inputs: ``FILE_AGENT_UPLOAD_BYTES`` bytes of tar on stdin,
   unpacked into ``/work`` (a size-capped tmpfs): ``script.py`` and ``in/<name>``. Stdin is used
   rather than Docker's archive API because a tmpfs cannot be filled before start and the API
   costs a filesystem mount per call;
1. presets the names the prompts promise the code (``file_path``, ``input_file_path``,
   ``output_dir``, ``input_dir``, ``input_files``) from the container's environment and from
   what is in ``/work/in``;
2. parses the script with Python's own ``ast`` module and renames every store or delete of those
   names to a throw-away name, so the code cannot point its output somewhere else by reassigning
   them (the old server did this with regular expressions, which missed tuples, ``for`` targets,
   ``with ... as`` and the walrus operator);
3. runs the script as ``__main__`` with ``/work/out`` as the working directory;
4. when it is done (whatever its exit status), kills any process it left behind and writes a
   boundary and then a tar stream of ``/work/out`` on the stdout it started with. The boundary
   is the SHA-256 of ``FILE_AGENT_BOUNDARY_SEED``, never the seed itself, so a script that
   prints its environment cannot cut its own stdout by accident.
   ``/work/out`` is a size-capped tmpfs, which Docker's archive API cannot read, hence the stream.
   file-agent splits stdout at the boundary and unpacks the tar as untrusted input: a script can
   forge it, but only to spoil its own result.

It does not enforce any security: the container does (no network, read-only root, dropped
capabilities, limits). A script that imports ``os`` and writes elsewhere only reaches what the
container lets it reach.
"""

import ast
import gc
import hashlib
import io
import os
import shutil
import signal
import sys
import tarfile
import traceback

MATPLOTLIB_SEED = "/opt/file-agent/matplotlib"
WORK_DIR = "/work"
OUTPUT_DIR = "/work/out"
INPUT_DIR = "/work/in"
PROTECTED = ("file_path", "input_file_path", "output_dir", "input_dir", "input_files")
DISCARD_PREFIX = "_file_agent_ignored_"


class _DropReassignments(ast.NodeTransformer):
    """Renames stores and deletes of the protected names, wherever they stand."""

    def __init__(self):
        self.dropped = []

    def visit_Name(self, node):
        if node.id in PROTECTED and isinstance(node.ctx, (ast.Store, ast.Del)):
            self.dropped.append((node.lineno, node.id))
            return ast.copy_location(ast.Name(id=DISCARD_PREFIX + node.id, ctx=node.ctx), node)
        return node


def _input_files():
    try:
        names = sorted(os.listdir(INPUT_DIR))
    except FileNotFoundError:
        return []
    return [os.path.join(INPUT_DIR, name) for name in names]


def _preset_names():
    inputs = _input_files()
    input_file_path = os.environ.get("FILE_AGENT_INPUT_FILE_PATH") or (
        inputs[0] if len(inputs) == 1 else None
    )
    return {
        "file_path": os.environ.get("FILE_AGENT_FILE_PATH") or None,
        "input_file_path": input_file_path,
        "output_dir": OUTPUT_DIR,
        "input_dir": INPUT_DIR,
        "input_files": inputs,
    }


def _receive_upload(size):
    """Reads exactly ``size`` bytes of tar from stdin and unpacks them into /work."""
    remaining = size
    chunks = []
    while remaining > 0:
        chunk = os.read(0, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError(f"stdin ended {remaining} bytes before the end of the upload")
        chunks.append(chunk)
        remaining -= len(chunk)
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r:") as archive:
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
    # Results belong in /work/out. The sandbox user owns this tmpfs and could chmod it back, but
    # it only has room for the upload plus a little slack, so nothing is gained by it.
    for folder in (INPUT_DIR, WORK_DIR):
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, 0o555)


def _seed_matplotlib_cache():
    """Copies the font list built into the image to MPLCONFIGDIR (a fresh tmpfs each attempt),
    so that a chart does not first spend a fraction of a second scanning fonts."""
    target = os.environ.get("MPLCONFIGDIR")
    if not target or not os.path.isdir(MATPLOTLIB_SEED) or os.path.exists(target):
        return
    try:
        shutil.copytree(MATPLOTLIB_SEED, target)
    except OSError:
        pass  # matplotlib rebuilds it; slower, not wrong


def _exit_code(exit):
    """The process exit code Python would give for this SystemExit."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=sys.stderr)
    return 1


def _run(script):
    """Runs the script; returns its exit code."""
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
    namespace.update(_preset_names())
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
        except Exception:
            pass


def _stop_other_processes():
    """As the container's init, kill whatever the script started, so nothing writes after us."""
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _send_outputs(fd, boundary):
    """Writes the boundary, then /work/out as a tar stream, on ``fd``."""
    with os.fdopen(fd, "wb", closefd=False) as raw:
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


def main(argv):
    if len(argv) != 2:
        print("usage: runner.py SCRIPT", file=sys.stderr)
        return 2
    seed = os.environ.pop("FILE_AGENT_BOUNDARY_SEED", None)
    boundary = f"\n--file-agent-outputs-{hashlib.sha256(seed.encode()).hexdigest()}--\n" if seed else None
    upload = os.environ.pop("FILE_AGENT_UPLOAD_BYTES", None)
    if upload:
        try:
            _receive_upload(int(upload))
        except (OSError, ValueError, EOFError, tarfile.TarError) as error:
            print(f"file-agent: could not receive the script and inputs: {error}", file=sys.stderr)
            return 3
    _seed_matplotlib_cache()
    # A private copy of stdout for the output stream: the script may close or replace fd 1.
    out_fd = os.dup(1)
    status = _run(argv[1])
    _flush_standard_streams()
    _stop_other_processes()
    if boundary:
        try:
            _send_outputs(out_fd, boundary)
        except OSError as error:
            print(f"file-agent: could not send the outputs: {error}", file=sys.stderr)
            return status or 1
    return status


if __name__ == "__main__":
    code = main(sys.argv)
    _flush_standard_streams()
    # Skip interpreter finalisation (tearing down pandas and friends takes ~0.1 s): the outputs
    # are sent and the streams flushed, and the container is removed right after.
    os._exit(code & 0xFF)
