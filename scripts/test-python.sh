#!/usr/bin/env bash
# The official MCP Python SDK (2.x), for the test that checks file-agent with the client Open
# WebUI uses (tests/sdk/python_client.py): a venv at target/test-python (or
# $FILE_AGENT_TEST_SDK_ENV), never the system's Python. Debian's own python3 refuses
# `pip install` outside a venv (PEP 668, "externally-managed-environment"), and the server
# itself needs no Python at all, so nothing here is for the main job. Needs python3 (3.10 or
# later) with its venv module (Debian: python3-venv). Quick when done: the venv is rebuilt only
# when the requirement below changes.
set -euo pipefail
cd "$(dirname "$0")/.."

requirement='mcp>=2,<3'
env_dir=${FILE_AGENT_TEST_SDK_ENV:-target/test-python}
stamp="$env_dir/requirement"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$requirement" ] && [ -x "$env_dir/bin/python3" ]; then
  exit 0
fi

echo "test-python: installing the MCP Python SDK ('$requirement') into $env_dir" >&2
rm -rf "$env_dir"
python3 -m venv "$env_dir"
"$env_dir/bin/python3" -m pip install --quiet --disable-pip-version-check "$requirement"
"$env_dir/bin/python3" -c 'import mcp.client.streamable_http'
echo "$requirement" >"$stamp"
