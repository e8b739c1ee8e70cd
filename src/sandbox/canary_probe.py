"""The network canary's probes (src/sandbox/canary.rs embeds this file).

Run in a sandbox pod by a fresh interpreter (`python -I`, without the runner's audit hook, which
would refuse every connection before a packet left). argv[1] is JSON: `targets` (host:port,
[v6]:port), `name` (a public DNS name) and `wait` (seconds). Every probe runs at once, in a thread
of its own, and waits at most `wait` for an answer, so the whole run ends after about `wait`
seconds whatever the network does. It prints one JSON list: for each probe its kind (`tcp`,
`udp`, `dns`), its target and how it ended. Which endings count as reached is decided by the
server (canary.rs, `Probe::reached`), not here.
"""

import json
import os
import socket
import sys
import threading
import time

ASKED = json.loads(sys.argv[1])
WAIT = float(ASKED["wait"])


def address(target):
    host, _, port = target.rpartition(":")
    return host.strip("[]"), int(port)


def query(name):
    """A DNS query for `name` (type A, class IN, recursion desired): what a resolver answers."""
    labels = b"".join(
        bytes([len(label)]) + label.encode("ascii") for label in name.strip(".").split(".")
    )
    return b"\x46\x41\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + labels + b"\x00\x00\x01\x00\x01"


def tcp(target):
    with socket.create_connection(address(target), timeout=WAIT):
        return "connected"


def udp(target):
    host, port = address(target)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(WAIT)
        sock.connect((host, port))
        sock.send(query(ASKED["name"]))
        sock.recv(4096)
        return "answered"


def dns(name):
    # Through the pod's own resolver (/etc/resolv.conf), as any library in the sandbox would.
    socket.getaddrinfo(name, None)
    return "resolved"


PROBES = (
    [("tcp", tcp, target) for target in ASKED["targets"]]
    + [("udp", udp, target) for target in ASKED["targets"]]
    + [("dns", dns, ASKED["name"])]
)
# A probe still waiting at the deadline keeps this.
RESULTS = ["timeout"] * len(PROBES)


def run(index):
    _, probe, target = PROBES[index]
    try:
        RESULTS[index] = probe(target)
    except socket.gaierror as error:
        RESULTS[index] = "no such name" if error.errno == socket.EAI_NONAME else "failed"
    except socket.timeout:
        RESULTS[index] = "timeout"
    except ConnectionRefusedError:
        RESULTS[index] = "refused"
    except (OSError, ValueError, UnicodeError):
        RESULTS[index] = "failed"


threads = [threading.Thread(target=run, args=(index,), daemon=True) for index in range(len(PROBES))]
for thread in threads:
    thread.start()
# getaddrinfo cannot be given a timeout: a lookup still waiting is left behind, not waited for.
deadline = time.monotonic() + WAIT + 1
for thread in threads:
    thread.join(max(0.0, deadline - time.monotonic()))
answer = [
    {"probe": kind, "target": target, "result": RESULTS[index]}
    for index, (kind, _, target) in enumerate(PROBES)
]
sys.stdout.write(json.dumps(answer) + "\n")
sys.stdout.flush()
os._exit(0)
