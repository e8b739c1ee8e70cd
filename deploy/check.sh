#!/bin/sh
# Checks the deploy files on a host without a container registry (this project's machines),
# against the real Docker engine. Run from the repository root, as root:
#
#   deploy/check.sh
#
# 1. the Docker API proxy: `haproxy -c` on its config; then a local haproxy with it in front of
#    the engine, one real sandbox attempt through it (create, attach, start, wait, remove), and
#    403 for endpoints file-agent must not reach (exec, pulls, builds, volumes, archive, ...);
# 2. compose.yaml: `docker-compose config` (or `docker compose config`);
# 3. the server image: its runtime stage built from a locally made Debian base (debootstrap) and
#    the binary built here, then run read-only as its non-root user: --version, and `serve` until
#    its own health check (`file-agent health`) passes.
#
# Pulling haproxy:2.8-alpine and rust:1-bookworm is what a host with a registry does instead;
# that part cannot run here.
set -eu

root=$(pwd)
[ -f Dockerfile ] && [ -f compose.yaml ] || { echo "check: run from the repository root" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/file-agent-deploy-check.XXXXXX")
cleanup() {
  [ -f "$work/haproxy.pid" ] && kill "$(cat "$work/haproxy.pid")" 2>/dev/null || true
  docker rm -f file-agent-deploy-check >/dev/null 2>&1 || true
  [ -f "$work/created-env" ] && rm -f "$root/.env"
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
step() { echo "check: $*" >&2; }

command -v haproxy >/dev/null 2>&1 || { step "installing haproxy"; DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy >/dev/null; }
command -v debootstrap >/dev/null 2>&1 || { step "installing debootstrap"; DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; }

step "building the binary"
cargo build --quiet --release
binary=$root/target/release/file-agent

step "1. docker proxy: haproxy -c"
haproxy -c -q -f deploy/docker-proxy/haproxy.cfg
sed 's/bind :2375/bind 127.0.0.1:23751/; s/log stdout/log stderr/' deploy/docker-proxy/haproxy.cfg >"$work/haproxy.cfg"
haproxy -f "$work/haproxy.cfg" -D -p "$work/haproxy.pid" 2>"$work/haproxy.log"
sleep 1
printf 'print("through the proxy")\n' >"$work/hello.py"
DOCKER_HOST=tcp://127.0.0.1:23751 "$binary" run "$work/hello.py" --out "$work/out" >"$work/run.json"
grep -q '"status":"ok"' "$work/run.json" || { cat "$work/run.json" >&2; echo "check: an attempt through the proxy failed" >&2; exit 1; }
for request in "POST /containers/x/exec" "POST /images/create?fromImage=alpine" "POST /build" \
  "GET /volumes" "GET /images/json" "GET /containers/x/archive?path=/" "GET /containers/../secrets" \
  "POST /containers/x/update" "GET /swarm"; do
  set -- $request
  code=$(curl -s -o /dev/null -w '%{http_code}' -X "$1" "http://127.0.0.1:23751$2")
  [ "$code" = 403 ] || { echo "check: $request answered $code through the proxy, not 403" >&2; exit 1; }
done
step "   an attempt ran through the proxy; 9 forbidden endpoints answered 403"

step "2. compose.yaml"
if [ ! -f .env ]; then cp .env.example .env; : >"$work/created-env"; fi
if docker compose version >/dev/null 2>&1; then docker compose config -q; else docker-compose config -q; fi

step "3. server image from a local base"
if ! docker image inspect file-agent-base:bookworm >/dev/null 2>&1; then
  debootstrap --variant=minbase bookworm "$work/base" >"$work/debootstrap.log" 2>&1 || { tail "$work/debootstrap.log" >&2; exit 1; }
  cp /etc/resolv.conf "$work/base/etc/resolv.conf"
  tar --numeric-owner -C "$work/base" -c . | docker import - file-agent-base:bookworm >/dev/null
fi
mkdir -p "$work/binary"
cp "$binary" "$work/binary/file-agent"
tar -C "$work/binary" -c file-agent | docker import - file-agent-binary:check >/dev/null
# The classic builder builds every stage, and the Rust stage needs a registry: build the
# Dockerfile without it (BuildKit would skip it by itself, where buildx is installed).
sed '/^FROM \${RUST_IMAGE} AS build$/,/^# The stage the binary/{/^# The stage the binary/!d}' Dockerfile >"$work/Dockerfile"
grep -q 'RUST_IMAGE} AS build' "$work/Dockerfile" && { echo "check: could not drop the build stage" >&2; exit 1; }
DOCKER_BUILDKIT=0 docker build -q -f "$work/Dockerfile" \
  --build-arg RUNTIME_IMAGE=file-agent-base:bookworm \
  --build-arg BINARY_FROM=file-agent-binary:check \
  -t file-agent:check . >/dev/null
user=$(docker image inspect -f '{{.Config.User}}' file-agent:check)
[ "$user" = "10002:10002" ] || { echo "check: the image runs as '$user', not 10002:10002" >&2; exit 1; }
docker run --rm --read-only file-agent:check --version
# The server in its image, read-only, reaching the engine only through the proxy above.
docker run -d --name file-agent-deploy-check --read-only --tmpfs /tmp --network host \
  -e FILE_AGENT_LISTEN=127.0.0.1:28123 -e FILE_AGENT_DATA_DIR=/tmp/data \
  -e DOCKER_HOST=tcp://127.0.0.1:23751 \
  file-agent:check serve >/dev/null
healthy=no
for _ in $(seq 1 30); do
  if docker exec file-agent-deploy-check file-agent health --url http://127.0.0.1:28123 >/dev/null 2>&1; then healthy=yes; break; fi
  sleep 1
done
[ "$healthy" = yes ] || { docker logs file-agent-deploy-check >&2; echo "check: the server image never became healthy" >&2; exit 1; }
python3 tests/sdk/python_client.py http://127.0.0.1:28123/mcp >"$work/client.txt" 2>&1 || { cat "$work/client.txt" >&2; exit 1; }
grep -q "result: 4" "$work/client.txt" || { cat "$work/client.txt" >&2; echo "check: run_python through the server image failed" >&2; exit 1; }
step "   the server image runs read-only as 10002, is healthy, and ran run_python through the proxy"
step "ok"
