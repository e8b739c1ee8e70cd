#!/usr/bin/env bash
# What the tests need on top of the server's set-up (what CI runs before `cargo nextest run`),
# idempotent and quick when done:
#   1. scripts/bootstrap.sh --no-image: the engine and gVisor (the sandbox tests run under it too);
#   2. poppler-utils (pdftotext, pdfinfo), with which tests read back the PDFs file-agent makes;
#   3. the venv module (Debian's python3-venv), for the two venvs below, and Debian's glewlwyd,
#      a real OAuth 2.1 issuer the identity tests run (tests/issuer/glewlwyd.sh); its system
#      service is never started;
#   4. docker-compose (Debian's), unless the engine's `docker compose` plugin is there: one test
#      runs `docker compose config` on compose.yaml;
#   5. cargo-nextest;
#   6. the tests' build (`cargo nextest run --cargo-profile bench --no-run`, on top of the
#      release build when scripts/bootstrap.sh made one: Cargo.toml's [profile.bench] says why),
#      which the README's `cargo nextest run --cargo-profile bench` then finds done;
#   7. beside that compile (it keeps both cores busy; these mostly wait on downloads): the
#      sandbox image (start_image_build in scripts/lib.sh), and three venvs:
#      - the image's Python libraries, for the tests' local runner (the fast tier,
#        scripts/sandbox-python.sh);
#      - the official MCP Python SDK, for one test (scripts/test-python.sh);
#      - Open WebUI 0.12.4's own MCP client, for the long-call tests (scripts/test-openwebui.sh);
#   8. the image checked, or built if it could not be beside the compile, by the file-agent
#      binary of the tests' build (a `cargo run --release` here would compile file-agent again).
# Nothing here is pip-installed into the system's Python.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

scripts/bootstrap.sh --no-image

if ! command -v pdftotext >/dev/null 2>&1 || ! command -v pdfinfo >/dev/null 2>&1; then
  echo "test-setup: installing poppler-utils (tests read PDFs back with pdftotext)" >&2
  apt_install poppler-utils
fi

if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  echo "test-setup: installing python3-venv (the tests' Python libraries live in venvs)" >&2
  apt_install python3-venv
fi

if [ ! -x /usr/bin/glewlwyd ] || ! command -v sqlite3 >/dev/null 2>&1 \
   || ! command -v openssl >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  echo "test-setup: installing glewlwyd (a real OAuth issuer for the identity tests; its service stays off)" >&2
  # "No configuration": its postinst would otherwise run dbconfig-common, which fails without a
  # database server. A policy-rc.d that says "no" keeps the postinst from starting the service.
  echo "glewlwyd glewlwyd/config_type select No configuration" | as_root debconf-set-selections
  own_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
    as_root chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  apt_install glewlwyd dbconfig-no-thanks sqlite3 openssl curl
  [ -z "$own_policy" ] || as_root rm -f /usr/sbin/policy-rc.d
  as_root deb-systemd-helper disable glewlwyd.service >/dev/null 2>&1 || true
  as_root update-rc.d glewlwyd disable >/dev/null 2>&1 || true
fi

if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  echo "test-setup: installing docker-compose (a test reads compose.yaml through \`docker-compose config\`)" >&2
  apt_install docker-compose
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test-setup: installing cargo-nextest" >&2
  cargo install --locked cargo-nextest
fi

start_image_build
# The three venvs one after another, beside the compile.
start_beside sh -c 'scripts/sandbox-python.sh && scripts/test-python.sh && scripts/test-openwebui.sh'
venvs=$!
cargo nextest run --cargo-profile bench --no-run
finish_image_build
finish_beside "$venvs" "test-setup: making the venvs"
target_dir=$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
"$target_dir/release/file-agent" image build
