# file-agent bench's probe: runs inside one long-lived container of the sandbox image and times,
# from the inside, what the sandbox is measured against:
#   limit        the script's body exec'd in this interpreter, which has already imported what
#                the script imports: no process, no container, nothing left to save;
#   subprocess   a fresh `python3` process running the script: the architecture file-agent
#                replaces (the Python File Agent ran model code as a plain subprocess);
#   throughput N K  N subprocesses, K at a time: wall seconds for all.
# Reads one line `script <JSON string>`, answers `ready`, then one command per line, one float
# (seconds) per answer. Not part of the sandbox: `file-agent bench` starts it with the docker CLI.
import concurrent.futures
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

JOB = "/tmp/bench-job.py"
SCRIPT = "/tmp/bench-script.py"


def fresh_output():
    return tempfile.mkdtemp(dir="/tmp")


def limit(code):
    out = fresh_output()
    namespace = {"__name__": "__main__", "output_dir": out}
    started = time.perf_counter()
    exec(code, namespace)
    took = time.perf_counter() - started
    shutil.rmtree(out)
    return took


def one_subprocess():
    out = fresh_output()
    started = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-B", JOB, out], check=True, stdout=subprocess.DEVNULL)
    took = time.perf_counter() - started
    shutil.rmtree(out)
    return took


def throughput(count, workers):
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: one_subprocess(), range(count)))
    return time.perf_counter() - started


def main():
    line = sys.stdin.readline()
    source = json.loads(line.split(" ", 1)[1])
    with open(SCRIPT, "w") as handle:
        handle.write(source)
    with open(JOB, "w") as handle:
        handle.write(
            "import sys\noutput_dir = sys.argv[1]\n"
            f"exec(compile(open({SCRIPT!r}).read(), {SCRIPT!r}, 'exec'))\n"
        )
    code = compile(source, SCRIPT, "exec")
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        limit(code)  # imports what the script imports, once
    print("ready", flush=True)
    for command in sys.stdin:
        words = command.split()
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            if words[0] == "limit":
                took = limit(code)
            elif words[0] == "subprocess":
                took = one_subprocess()
            else:
                took = throughput(int(words[1]), int(words[2]))
        print(took, flush=True)


main()
