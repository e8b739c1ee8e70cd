#!/usr/bin/env bash
# The sandbox image's Python libraries on this host, for the fast test tier (no Docker): a venv
# at target/sandbox-python (or $FILE_AGENT_TEST_PYTHON_ENV) holding exactly the wheels of
# sandbox-image/wheels.txt, checked against their hashes as the image build does. The tests'
# local runner runs sandbox-image/runner.py, inspect_table/ and change_report/ with it.
# Needs python3 (3.11, the image's version) with the venv module. Quick when done: the venv is
# rebuilt only when wheels.txt changes.
set -euo pipefail
cd "$(dirname "$0")/.."

env_dir=${FILE_AGENT_TEST_PYTHON_ENV:-target/sandbox-python}
wheels=sandbox-image/wheels.txt
stamp="$env_dir/wheels.sha256"
want=$(sha256sum "$wheels" | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$env_dir/bin/python3" ]; then
  exit 0
fi

version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$version" = 3.11 ] || echo "sandbox-python: python3 is $version, the image has 3.11; the wheels of $wheels are for 3.11" >&2

echo "sandbox-python: installing the image's wheels into $env_dir" >&2
rm -rf "$env_dir"
python3 -m venv "$env_dir"
"$env_dir/bin/python3" -m pip install --quiet --disable-pip-version-check --require-hashes \
  --no-deps --only-binary=:all: -r "$wheels"
echo "$want" >"$stamp"
