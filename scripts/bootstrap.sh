#!/usr/bin/env bash
# What the server needs on a fresh Debian/Ubuntu host, idempotent and quick when done:
#   1. a Docker engine that answers (starts dockerd, installing docker.io if missing);
#   2. debootstrap and pip, for the registry-free image build (pip only downloads and unpacks
#      the image's wheels with --target, which Debian's externally-managed Python allows);
#   3. gVisor (Debian's runsc), registered with the engine as the runtime `runsc`, for
#      SANDBOX_RUNTIME=runsc;
#   4. the release binary, and beside its compile the sandbox image this checkout expects
#      (built only if its tag is missing): the main job's `cargo run --release` then finds both
#      built and compiles nothing more.
# Usage: scripts/bootstrap.sh [--no-image]. What only the tests need (nextest, the Python venvs,
# poppler-utils) is in scripts/test-setup.sh, which runs this with --no-image and builds the
# image with the tests' own build of file-agent, so that nothing is compiled twice.
# Needs root (or sudo) for steps 1 to 3 on a fresh machine; later runs change nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

image=yes
case "${1:-}" in
  "") ;;
  --no-image) image=no ;;
  *) echo "bootstrap: unknown argument $1 (usage: scripts/bootstrap.sh [--no-image])" >&2; exit 2 ;;
esac

if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "bootstrap: installing docker.io" >&2
    apt_install docker.io
  fi
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    # Under systemd the engine is a service: started now, and again after a reboot.
    echo "bootstrap: enabling and starting the docker service" >&2
    as_root systemctl enable --now docker >&2 || true
  fi
  if ! docker info >/dev/null 2>&1; then
    # No service manager (a container, a minimal VM): started by hand, gone after a reboot
    # (run this script again then).
    echo "bootstrap: starting dockerd" >&2
    as_root sh -c 'nohup dockerd >/var/log/file-agent-dockerd.log 2>&1 &'
  fi
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { as_root tail -n 40 /var/log/file-agent-dockerd.log >&2; echo "bootstrap: dockerd did not come up" >&2; exit 1; }
fi

if ! command -v debootstrap >/dev/null 2>&1 && ! [ -x /usr/sbin/debootstrap ]; then
  echo "bootstrap: installing debootstrap" >&2
  apt_install debootstrap
fi

if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "bootstrap: installing python3-pip (downloads the image's pinned wheels)" >&2
  apt_install python3-pip
fi

# gVisor for SANDBOX_RUNTIME=runsc. ptrace works on any host, KVM or not; --network=none
# because attempts never have a network anyway, so gVisor's network stack is not even started.
# The engine reads `runtimes` again on SIGHUP, no restart.
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

# The release binary, and the image beside it (start_image_build in scripts/lib.sh); then the
# binary checks the image's tag and builds it itself if the one beside the compile could not be.
# cargo run (not ./target/...) so a CARGO_TARGET_DIR elsewhere works too.
if [ "$image" = yes ]; then
  start_image_build
  cargo build --release
  finish_image_build
  cargo run --quiet --release -- image build
fi
