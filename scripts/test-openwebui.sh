#!/usr/bin/env bash
# Open WebUI's own MCP client (`open_webui.utils.mcp.client`, Open WebUI 0.12.4), for the tests
# that drive file-agent exactly as a real Open WebUI chat does (tests/sdk/openwebui_client.py):
# a venv at target/test-openwebui (or $FILE_AGENT_TEST_OPENWEBUI_ENV) holding the open-webui
# wheel without its dependencies (the whole application is about 7 GB) and only what that
# module imports: the MCP Python SDK and httpx2 it is built on, jsonschema and referencing,
# and what `open_webui/__init__.py`, `open_webui.env` and `open_webui.utils.json_codec` import
# at load time (typer, uvicorn, markdown, beautifulsoup4, cryptography, aiohttp,
# python-engineio, orjson), at the versions open-webui pins. Importing it touches no network; the
# client script points its DATA_DIR at a temporary folder. Needs python3 (3.11 or later) with its venv module. Quick when done: the
# venv is rebuilt only when the requirements below change.
set -euo pipefail
cd "$(dirname "$0")/.."

# The versions open-webui 0.12.4 pins, where it pins them.
requirements=('open-webui==0.12.4' 'mcp==2.3.0' 'httpx2==2.16.0' 'pydantic==2.13.4'
  'jsonschema>=4.18,<5' 'referencing>=0.30,<1' 'typer>=0.12,<1' 'uvicorn==0.54.0'
  'markdown==3.10.2' 'beautifulsoup4==4.14.3' 'cryptography==48.0.1' 'aiohttp==3.14.5'
  'python-engineio>=4.9,<5' 'orjson==3.11.9')
requirement="${requirements[*]}"
env_dir=${FILE_AGENT_TEST_OPENWEBUI_ENV:-target/test-openwebui}
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
venv_current "$env_dir" "$requirement" && exit 0

echo "test-openwebui: installing Open WebUI's MCP client ('$requirement') into $env_dir" >&2
fresh_venv "$env_dir"
pip=("$env_dir/bin/python3" -m pip install --quiet --disable-pip-version-check)
# Only what its MCP client imports, then the application without its own dependencies.
"${pip[@]}" "${requirements[@]:1}"
"${pip[@]}" --no-deps "${requirements[0]}"
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
# env.py stops without a secret key (it signs nothing here) and writes under DATA_DIR.
DATA_DIR="$data" WEBUI_SECRET_KEY=unused "$env_dir/bin/python3" -c 'import open_webui.utils.mcp.client'
venv_stamp "$env_dir" "$requirement"
