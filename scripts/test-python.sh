#!/usr/bin/env bash
# The official MCP Python SDK (2.x), for the test that checks file-agent with the client Open
# WebUI uses (tests/sdk/python_client.py): a venv at target/test-python (or
# $FILE_AGENT_TEST_SDK_ENV), never the system's Python. The venv also has `cryptography`
# (Ed25519) for tests/sdk/tlog_verify.py, a verifier of the audit trail's signed checkpoints
# and Merkle proofs written apart from the Rust code, and `opentelemetry-proto` (the official
# OTLP messages) for tests/sdk/otlp_receiver.py, the collector the trace test exports to, and
# `jsonschema` (which the SDK uses too) for tests/sdk/structured_client.py; and two transparency
# tools no one here wrote, for tests/integration/audit_proofs.rs: `proofbundle` (its
# c2sp.org/tlog-proof verifier checks a receipt's tlog_proof) and `aics-witness` with
# `aics-tlog` (a C2SP witness the server submits checkpoints to). aics-witness asks for Python
# 3.12 by its metadata but installs and runs on 3.11, hence pip's --ignore-requires-python
# (the tests run it on 3.11). Debian's own python3 refuses
# `pip install` outside a venv (PEP 668, "externally-managed-environment"), and the server
# itself needs no Python at all, so nothing here is for the main job. Needs python3 (3.10 or
# later) with its venv module (Debian's python3-venv, installed here when missing). Quick when done: the venv is rebuilt only
# when the requirements below change.
set -euo pipefail
cd "$(dirname "$0")/.."

requirements=('mcp>=2,<3' 'cryptography>=42,<51' 'opentelemetry-proto>=1.27,<2' 'jsonschema>=4.18,<5'
  'proofbundle==6.3.1' 'aics-tlog==0.2.1' 'aics-witness==0.1.0')
requirement="${requirements[*]}"
env_dir=${FILE_AGENT_TEST_SDK_ENV:-target/test-python}
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
venv_current "$env_dir" "$requirement" && exit 0

echo "test-python: installing the MCP Python SDK, cryptography, opentelemetry-proto, jsonschema, proofbundle and aics-witness ('$requirement') into $env_dir" >&2
fresh_venv "$env_dir"
"$env_dir/bin/python3" -m pip install --quiet --disable-pip-version-check --ignore-requires-python "${requirements[@]}"
"$env_dir/bin/python3" -c 'import mcp.client.streamable_http, cryptography.hazmat.primitives.asymmetric.ed25519, opentelemetry.proto.collector.trace.v1.trace_service_pb2, proofbundle.tlogproof, aics_witness'
venv_stamp "$env_dir" "$requirement"
