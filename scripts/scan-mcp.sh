#!/usr/bin/env bash
# scripts/scan-mcp.sh [BINARY [OUTDIR]]: runs four MCP scanners that others wrote (from PyPI)
# against a file-agent server this script starts, in each mode a scanner can reach, and prints
# one line of figures per scanner and mode. A check of the protocol surface after a change to
# it (docs/DEVELOPMENT.md, "Third-party MCP scanners"): not part of CI, no test depends on it.
#
#   BINARY  default target/release/file-agent (the sandbox image of its tag must be built)
#   OUTDIR  default target/mcp-scan/<UTC time>; each scanner's whole report is a file there
#
# Modes: `token` (FILE_AGENT_ACCESS_TOKENS), `open` (loopback, no credential), `stdio`
# (`serve --stdio`), `oauth` (FILE_AGENT_OAUTH_ISSUER at Debian's glewlwyd, run by
# tests/issuer/glewlwyd.sh; scripts/test-setup.sh installs it). The scanners live in a venv
# at target/mcp-scanners (made on first use; never committed). Ports: 18763 (server) and
# 18764 (issuer) on 127.0.0.1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "${1:-$ROOT/target/release/file-agent}")
OUT=${2:-$ROOT/target/mcp-scan/$(date -u +%Y%m%dT%H%M%SZ)}
VENV=$ROOT/target/mcp-scanners
SCANNERS="jbt-mcpcheck==0.1.1 mcp-authlab==0.2.2 mcp-conform==0.1.0 mcp-audit-cli==0.1.0"
PORT=18763
ISSUER_PORT=18764
URL=http://127.0.0.1:$PORT/mcp
TOKEN=scan-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

if [ ! -x "$BIN" ]; then echo "scan-mcp: no binary at $BIN (cargo build --release)" >&2; exit 1; fi
if [ "$(cat "$VENV/requirement" 2>/dev/null)" != "$SCANNERS" ]; then
  echo "scan-mcp: installing the scanners into $VENV" >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  # shellcheck disable=SC2086 # the list is words on purpose
  "$VENV/bin/pip" install -q $SCANNERS
  echo "$SCANNERS" >"$VENV/requirement"
fi
mkdir -p "$OUT"
WORK=$(mktemp -d)
SERVER=
ISSUER=
cleanup() {
  [ -z "$SERVER" ] || { kill -TERM "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; }
  [ -z "$ISSUER" ] || { kill -TERM "$ISSUER" 2>/dev/null; wait "$ISSUER" 2>/dev/null || true; }
  rm -rf "$WORK"
}
trap cleanup EXIT

# The server in the background with the settings in "$@", once /health answers.
start() {
  local data
  data=$(mktemp -d "$WORK/data.XXXX")
  # Each mode's credentials are the ones given here, whatever this shell has set.
  env -u FILE_AGENT_ACCESS_TOKENS -u FILE_AGENT_OAUTH_ISSUER -u FILE_AGENT_OAUTH_AUDIENCE \
    FILE_AGENT_DATA_DIR="$data" FILE_AGENT_LISTEN="127.0.0.1:$PORT" \
    FILE_AGENT_PUBLIC_URL="http://127.0.0.1:$PORT" SANDBOX_WARM=0 "$@" \
    "$BIN" serve >"$data/log" 2>&1 &
  SERVER=$!
  for _ in $(seq 150); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then return; fi
    sleep 0.2
  done
  echo "scan-mcp: the server did not start:" >&2; cat "$data/log" >&2; exit 1
}
stop() { kill -TERM "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=; }

# One scanner run: its report in $OUT/NAME.json (a scanner's findings make no failure here).
scan() {
  local name=$1; shift
  "$@" >"$OUT/$name.json" 2>"$OUT/$name.err" || true
}

start FILE_AGENT_ACCESS_TOKENS="$TOKEN"
scan token-mcpcheck "$VENV/bin/mcpcheck" --token "$TOKEN" --json "$URL"
scan token-authlab "$VENV/bin/mcp-authlab" scan --no-login --token "$TOKEN" --format json "$URL"
stop

start
scan open-mcpcheck "$VENV/bin/mcpcheck" --json "$URL"
scan open-conform "$VENV/bin/mcp-conform" server --transport http --url "$URL" --format json
scan open-audit "$VENV/bin/mcp-audit" scan --format json "$URL"
stop

stdio_data=$(mktemp -d "$WORK/data.XXXX")
scan stdio-conform "$VENV/bin/mcp-conform" server --transport stdio --format json \
  --command "env FILE_AGENT_DATA_DIR=$stdio_data $BIN serve --stdio"

# OAuth: glewlwyd issues tokens for this server's /mcp, and for another resource (the
# "foreign" token authlab must see refused).
FOREIGN=http://127.0.0.1:9/other
ISSUER_RESOURCES="$URL $FOREIGN" ISSUER_FOREGROUND=1 \
  bash "$ROOT/tests/issuer/glewlwyd.sh" "$WORK/issuer" "$ISSUER_PORT" >"$WORK/issuer.url" \
  2>"$WORK/issuer.log" &
ISSUER=$!
for _ in $(seq 150); do [ -s "$WORK/issuer.url" ] && break; sleep 0.2; done
issuer=$(head -1 "$WORK/issuer.url")
if [ -z "$issuer" ]; then echo "scan-mcp: glewlwyd did not start:" >&2; cat "$WORK/issuer.log" >&2; exit 1; fi
token_for() {
  curl -sf -u test-client:test-secret -d grant_type=client_credentials \
    -d "scope=file-agent.run file-agent.saved-tools" -d "resource=$1" "$issuer/token" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])'
}
good=$(token_for "$URL")
foreign=$(token_for "$FOREIGN")
start FILE_AGENT_OAUTH_ISSUER="$issuer"
scan oauth-mcpcheck "$VENV/bin/mcpcheck" --token "$good" --json "$URL"
scan oauth-authlab "$VENV/bin/mcp-authlab" scan --no-login --token "$good" \
  --foreign-token "$foreign" --format json "$URL"
stop

# The figures, one line per scanner and mode.
python3 - "$OUT" <<'EOF'
import json, pathlib, sys

out = pathlib.Path(sys.argv[1])
for path in sorted(out.glob("*.json")):
    try:
        report = json.loads(path.read_text())
    except ValueError:
        print(f"{path.stem}: no report (see {path.with_suffix('.err')})")
        continue
    if "summary" in report and "checks" in report:  # mcpcheck
        s = report["summary"]
        warned = [w["code"] for c in report["checks"] for w in c.get("warnings", [])]
        print(f"{path.stem}: {s['passed']}/{s['total']} passed, {s['warned']} warned, "
              f"{s['failed']} failed, {s['inconclusive']} inconclusive; warnings {warned}")
    elif "conformance" in report:  # authlab
        c = report["counts"]
        print(f"{path.stem}: grade {report['grade']} {report['score']}/100, {c['pass']} pass, "
              f"{c['fail']} fail, {c['warn']} warn, {c['skip']} skipped; "
              f"warnings {report['warnings']}; MUST failures {report['must_failures']}")
    elif "passed" in report and "total" in report:  # mcp-conform
        failed = [c["name"] for c in report["checks"] if not c["passed"]]
        print(f"{path.stem}: {report['passed']}/{report['total']} passed; failed {failed}")
    elif "grade" in report:  # mcp-audit
        rules = [f"{f['rule_id']} ({f['evidence']})" for f in report["findings"]]
        print(f"{path.stem}: grade {report['grade']}, score {report['score']}; {rules}")
EOF
echo "scan-mcp: reports in $OUT" >&2
