#!/usr/bin/env bash
# Everything file-agent needs on a fresh Debian/Ubuntu host, idempotent and quick when done:
#   1. a Docker engine that answers (starts dockerd, installing docker.io if missing);
#   2. debootstrap and pip, for the registry-free image build;
#   3. the official MCP Python SDK (2.x), which a test uses to check compatibility, and
#      poppler-utils (pdftotext, pdfinfo), with which tests read back the PDFs file-agent makes;
#   4. gVisor (Debian's runsc), registered with the engine as the runtime `runsc`;
#   5. the image's Python libraries in a venv on this host, for the tests' local runner
#      (scripts/sandbox-python.sh: the fast tier, which needs no Docker);
#   6. the sandbox image this checkout expects (built only if its tag is missing).
# Needs root (or sudo) for steps 1, 2 and 4 on a fresh machine; later runs change nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=
apt_install() {
  [ -n "$apt_updated" ] || { as_root apt-get update -qq; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "bootstrap: installing docker.io" >&2
    apt_install docker.io
  fi
  echo "bootstrap: starting dockerd" >&2
  as_root sh -c 'nohup dockerd >/var/log/file-agent-dockerd.log 2>&1 &'
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { as_root tail -n 40 /var/log/file-agent-dockerd.log >&2; echo "bootstrap: dockerd did not come up" >&2; exit 1; }
fi

if ! command -v debootstrap >/dev/null 2>&1 && ! [ -x /usr/sbin/debootstrap ]; then
  echo "bootstrap: installing debootstrap" >&2
  apt_install debootstrap
fi

if ! command -v pdftotext >/dev/null 2>&1 || ! command -v pdfinfo >/dev/null 2>&1; then
  echo "bootstrap: installing poppler-utils (tests read PDFs back with pdftotext)" >&2
  apt_install poppler-utils
fi

if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "bootstrap: installing python3-pip (downloads the image's pinned wheels)" >&2
  apt_install python3-pip
fi

if ! python3 -c 'import mcp.client.streamable_http' >/dev/null 2>&1; then
  echo "bootstrap: installing the MCP Python SDK (pip install 'mcp>=2,<3')" >&2
  python3 -m pip install --quiet --disable-pip-version-check 'mcp>=2,<3'
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "bootstrap: installing cargo-nextest" >&2
  cargo install --locked cargo-nextest
fi

# gVisor for SANDBOX_RUNTIME=runsc (the sandbox tests run under it too). ptrace works on any
# host, KVM or not; --network=none because attempts never have a network anyway, so gVisor's
# network stack is not even started. The engine reads `runtimes` again on SIGHUP, no restart.
if ! command -v runsc >/dev/null 2>&1; then
  echo "bootstrap: installing gVisor (runsc)" >&2
  apt_install runsc
fi
has_runsc() { docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; }
if ! has_runsc; then
  daemon_json=/etc/docker/daemon.json
  echo "bootstrap: registering runsc in $daemon_json" >&2
  as_root python3 - "$daemon_json" "$(command -v runsc)" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
config = json.load(open(path)) if os.path.exists(path) else {}
config.setdefault("runtimes", {})["runsc"] = {
    "path": runsc, "runtimeArgs": ["--platform=ptrace", "--network=none"]}
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as handle:
    json.dump(config, handle, indent=2)
os.replace(path + ".tmp", path)
PY
  as_root pkill -HUP -x dockerd
  for _ in $(seq 1 30); do has_runsc && break; sleep 1; done
  has_runsc || { echo "bootstrap: the engine did not pick up runsc from $daemon_json (restart dockerd?)" >&2; exit 1; }
fi

scripts/sandbox-python.sh

# cargo run (not ./target/...) so a CARGO_TARGET_DIR elsewhere works too.
cargo run --quiet -- image build
