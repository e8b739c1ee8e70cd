#!/usr/bin/env bash
# What the tests need on top of the server's set-up (what CI runs before `cargo nextest run`),
# idempotent and quick when done:
#   1. scripts/bootstrap.sh --no-image: the engine and gVisor (the sandbox tests run under it too);
#   2. poppler-utils (pdftotext, pdfinfo), with which tests read back the PDFs file-agent makes;
#   3. the venv module (Debian's python3-venv), for the two venvs below;
#   4. cargo-nextest;
#   5. the tests' build (`cargo nextest run --no-run`), which `cargo nextest run` then finds done,
#      and the sandbox image, built by the file-agent binary of that same build: a separate
#      `cargo run` would compile file-agent and every crate whose features the tests' dependencies
#      change (axum's `ws`, ...) a second time;
#   6. the image's Python libraries in a venv, for the tests' local runner (the fast tier,
#      scripts/sandbox-python.sh);
#   7. the official MCP Python SDK in a venv of its own, for one test (scripts/test-python.sh).
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

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test-setup: installing cargo-nextest" >&2
  cargo install --locked cargo-nextest
fi

cargo nextest run --no-run
target_dir=$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
"$target_dir/debug/file-agent" image build

scripts/sandbox-python.sh
scripts/test-python.sh
