#!/bin/sh
# Checks the deploy files on a host without a container registry (this project's machines),
# against the real Docker engine. Run from the repository root, as root, on a machine set up the
# README's way (scripts/bootstrap.sh); what else it needs it installs (haproxy, debootstrap,
# docker-compose, python3-venv) or makes (the MCP SDK's venv, scripts/test-python.sh):
#
#   deploy/check.sh
#
# It builds the release binary; DEPLOY_CHECK_BINARY=target/debug/file-agent takes a built one
# instead (docs/DEPLOYING.md says when to run which).
#
# 1. the Docker API proxy: `haproxy -c` on its config; then a local haproxy with it in front of
#    the engine, one real sandbox attempt through it (create, attach, start, wait, remove), and
#    403 for endpoints file-agent must not reach (exec, pulls, builds, volumes, archive, ...);
# 2. compose.yaml: `docker-compose config` (or `docker compose config`);
# 3. the server image: its runtime stage built from a locally made Debian base (debootstrap) and
#    the binary, then run read-only as its non-root user: --version, and `serve` until its own
#    health check (`file-agent health`) passes;
# 4. compose.yaml itself, `up -d --no-build` with local images under the names it uses (the
#    image of 3 as file-agent:local, a Debian haproxy as haproxy:2.8-alpine unless that image is
#    here, this checkout's sandbox image as file-agent-sandbox:compose) and a .env made from
#    .env.example with docs/PRODUCTION.md's settings (a token, published on the host's address
#    with the links on it, a metrics token, Open WebUI's signing secret, gVisor where registered):
#    healthy as 10002 and read-only, 401 without the token, the Host names of .env, run_python
#    through the published port with the token and a signed user, under runsc where registered,
#    its file link opened from another machine (a container on the bridge network), /metrics
#    only with its token, the link still served by a recreated server container (the data is in the
#    volume), and `down` leaving no container, neither compose's nor a sandbox. It says which
#    images stood in, and gives every name it borrowed back what it named before.
#
# Pulling haproxy:2.8-alpine and rust:1-bookworm is what a host with a registry does instead;
# that part cannot run here (a test compiles the Dockerfile's build stage from what it copies).
set -eu

root=$(pwd)
[ -f Dockerfile ] && [ -f compose.yaml ] || { echo "check: run from the repository root" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/file-agent-deploy-check.XXXXXX")
# The compose project and the sandbox instance label of step 4, apart from a real deployment's.
project=file-agent-check
instance=deploy-check-compose
# The sandbox instance label of step 3's server.
image_instance=deploy-check-image
compose() {
  if docker compose version >/dev/null 2>&1; then
    set -- docker compose -p "$project" "$@"
  else
    set -- docker-compose -p "$project" "$@"
  fi
  (cd "$work/compose" && "$@")
}
cleanup() {
  # Every step of the clean-up runs, whatever fails in it.
  set +e
  [ -f "$work/haproxy.pid" ] && kill "$(cat "$work/haproxy.pid")" 2>/dev/null || true
  docker rm -f file-agent-deploy-check >/dev/null 2>&1 || true
  docker ps -aq --filter "label=io.file-agent.instance=$image_instance" | xargs -r docker rm -f >/dev/null 2>&1 || true
  if [ -f "$work/compose/compose.yaml" ]; then
    compose down -v --remove-orphans >/dev/null 2>&1 || true
    docker ps -aq --filter "label=io.file-agent.instance=$instance" | xargs -r docker rm -f >/dev/null 2>&1 || true
  fi
  # Every image name borrowed for compose gets back what it named before (or nothing).
  if [ -f "$work/borrowed" ]; then
    while read -r name before; do
      if [ "$before" = - ]; then docker rmi "$name" >/dev/null 2>&1 || true; else docker tag "$before" "$name" || true; fi
    done <"$work/borrowed"
  fi
  [ -f "$work/created-env" ] && rm -f "$root/.env"
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
step() { echo "check: $*" >&2; }
install_package() { step "installing $*"; DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null; }

command -v haproxy >/dev/null 2>&1 || install_package haproxy
command -v debootstrap >/dev/null 2>&1 || install_package debootstrap
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1 || install_package docker-compose
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || install_package python3-venv
# The official MCP SDK is not in the system's Python: its own venv, made once and then reused.
scripts/test-python.sh
python=$root/${FILE_AGENT_TEST_SDK_ENV:-target/test-python}/bin/python3

if [ -n "${DEPLOY_CHECK_BINARY:-}" ]; then
  binary=$(cd "$(dirname "$DEPLOY_CHECK_BINARY")" && pwd)/$(basename "$DEPLOY_CHECK_BINARY")
  step "the binary: $binary"
else
  step "building the binary"
  cargo build --quiet --release
  binary=$root/target/release/file-agent
fi

step "the sandbox image of this checkout (file-agent image build, once)"
"$binary" image build >"$work/image.log" 2>&1 || { cat "$work/image.log" >&2; exit 1; }

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
# What this step rebuilds on every run, for the images it replaces to be removed afterwards.
replaced=$(docker image inspect -f '{{.Id}}' file-agent-binary:check file-agent:check 2>/dev/null || true)
mkdir -p "$work/binary"
cp "$binary" "$work/binary/file-agent"
# A debug build carries hundreds of MiB of debug information the image does not need.
if command -v strip >/dev/null 2>&1; then strip "$work/binary/file-agent"; fi
tar -C "$work/binary" -c file-agent | docker import - file-agent-binary:check >/dev/null
# The classic builder builds every stage, and the Rust stage needs a registry: build the
# Dockerfile without it (BuildKit would skip it by itself, where buildx is installed).
sed '/^FROM \${RUST_IMAGE} AS build$/,/^# The stage the binary/{/^# The stage the binary/!d}' Dockerfile >"$work/Dockerfile"
grep -q 'RUST_IMAGE} AS build' "$work/Dockerfile" && { echo "check: could not drop the build stage" >&2; exit 1; }
DOCKER_BUILDKIT=0 docker build -q -f "$work/Dockerfile" \
  --build-arg RUNTIME_IMAGE=file-agent-base:bookworm \
  --build-arg BINARY_FROM=file-agent-binary:check \
  -t file-agent:check . >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
current=$(docker image inspect -f '{{.Id}}' file-agent-binary:check file-agent:check)
for id in $replaced; do
  case "$current" in *"$id"*) ;; *) docker rmi "$id" >/dev/null 2>&1 || true ;; esac
done
user=$(docker image inspect -f '{{.Config.User}}' file-agent:check)
[ "$user" = "10002:10002" ] || { echo "check: the image runs as '$user', not 10002:10002" >&2; exit 1; }
docker run --rm --read-only file-agent:check --version
# The server in its image, read-only, reaching the engine only through the proxy above.
docker run -d --name file-agent-deploy-check --read-only --tmpfs /tmp --network host \
  -e FILE_AGENT_LISTEN=127.0.0.1:28123 -e FILE_AGENT_DATA_DIR=/tmp/data \
  -e DOCKER_HOST=tcp://127.0.0.1:23751 -e SANDBOX_INSTANCE="$image_instance" \
  file-agent:check serve >/dev/null
healthy=no
for _ in $(seq 1 30); do
  if docker exec file-agent-deploy-check file-agent health --url http://127.0.0.1:28123 >/dev/null 2>&1; then healthy=yes; break; fi
  sleep 1
done
[ "$healthy" = yes ] || { docker logs file-agent-deploy-check >&2; echo "check: the server image never became healthy" >&2; exit 1; }
"$python" tests/sdk/python_client.py http://127.0.0.1:28123/mcp >"$work/client.txt" 2>&1 || { cat "$work/client.txt" >&2; exit 1; }
grep -q "result: 4" "$work/client.txt" || { cat "$work/client.txt" >&2; echo "check: run_python through the server image failed" >&2; exit 1; }
# Stopped as a deployment stops it (SIGTERM): it removes its warm containers on the way out.
# (`docker rm -f` kills it, and its warm containers would stay behind on the engine.)
docker stop -t 30 file-agent-deploy-check >/dev/null
docker rm file-agent-deploy-check >/dev/null
left=$(docker ps -aq --filter "label=io.file-agent.instance=$image_instance")
if [ -n "$left" ]; then
  docker ps -a --filter "label=io.file-agent.instance=$image_instance" >&2
  echo "check: the server image's SIGTERM left sandbox containers behind" >&2
  exit 1
fi
step "   the server image runs read-only as 10002, is healthy, ran run_python through the proxy, and its SIGTERM left no container"

step "4. compose.yaml itself, with local images under its names"
started=$(date +%s)
# `docker tag IMAGE NAME`, noting what NAME named before, for cleanup to give it back.
borrow() {
  before=$(docker image inspect -f '{{.Id}}' "$2" 2>/dev/null) || before=-
  echo "$2 $before" >>"$work/borrowed"
  docker tag "$1" "$2"
}
# The image a service of compose.yaml names.
service_image() { sed -n "/^  $1:\$/,/^  [a-z-]*:\$/s/^    image: *//p" compose.yaml; }
server_image=$(service_image file-agent)
proxy_image=$(service_image docker-proxy)
[ -n "$server_image" ] && [ -n "$proxy_image" ] || { echo "check: no image names found in compose.yaml" >&2; exit 1; }
borrow file-agent:check "$server_image"
stand_ins="$server_image: the image of step 3 (its runtime stage, the binary built on this host)"
stand_in_label='{{index .Config.Labels "io.file-agent.stand-in"}}'
if docker image inspect "$proxy_image" >/dev/null 2>&1 \
   && [ -z "$(docker image inspect -f "$stand_in_label" "$proxy_image")" ]; then
  step "   $proxy_image is on this engine: the real one is used"
else
  # Kept between runs under a name of its own; named $proxy_image only while the check runs.
  if ! docker image inspect file-agent-stand-in/haproxy:debian >/dev/null 2>&1; then
    mkdir -p "$work/haproxy"
    {
      echo 'FROM file-agent-base:bookworm'
      echo 'RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy && rm -rf /var/lib/apt/lists/* /var/cache/apt/*'
      echo "LABEL io.file-agent.stand-in=\"$proxy_image\""
      echo 'STOPSIGNAL SIGUSR1'
      echo 'CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]'
    } >"$work/haproxy/Dockerfile"
    DOCKER_BUILDKIT=0 docker build -q -t file-agent-stand-in/haproxy:debian "$work/haproxy" >"$work/build.log" 2>&1 \
      || { cat "$work/build.log" >&2; exit 1; }
  fi
  version=$(docker run --rm file-agent-stand-in/haproxy:debian haproxy -v | sed -n 's/^HAProxy version \([0-9.]*\).*/\1/p')
  borrow file-agent-stand-in/haproxy:debian "$proxy_image"
  stand_ins="$stand_ins
  $proxy_image: Debian bookworm's haproxy $version (kept as file-agent-stand-in/haproxy:debian)"
fi

mkdir -p "$work/compose/deploy/docker-proxy"
cp -r compose.yaml Dockerfile sandbox-image "$work/compose/"
cp deploy/docker-proxy/haproxy.cfg "$work/compose/deploy/docker-proxy/"
# docs/DEPLOYING.md's way: .env from .env.example, with a token. And settings compose must pass on
# from .env: another published port (not to meet a real deployment on 8000), the links' URL to
# match it, one more Host name, the instance label leftovers are looked for by.
# On top, docs/PRODUCTION.md's production settings: published on the host's own address with
# the links on it (what a browser on another machine opens), /metrics behind its own token, Open
# WebUI's signed user token, and gVisor where the engine has it registered.
port=28124
token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
metrics_token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
jwt_secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
host_ip=$(ip route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
[ -n "$host_ip" ] || host_ip=$(hostname -I | awk '{print $1}')
[ -n "$host_ip" ] || { echo "check: this host has no address beyond loopback" >&2; exit 1; }
runtime=runc
if docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then runtime=runsc; fi
cp .env.example "$work/compose/.env"
cat >>"$work/compose/.env" <<EOF
FILE_AGENT_ACCESS_TOKENS=$token
FILE_AGENT_PUBLISH=$host_ip:$port
FILE_AGENT_PUBLIC_URL=http://$host_ip:$port
FILE_AGENT_ALLOWED_HOSTS=localhost,127.0.0.1,$host_ip,file-agent,compose-check.invalid
FILE_AGENT_METRICS_TOKEN=$metrics_token
FILE_AGENT_OPENWEBUI_USER_JWT_SECRET=$jwt_secret
SANDBOX_RUNTIME=$runtime
SANDBOX_INSTANCE=$instance
EOF
sandbox_image=$(compose config | sed -n 's/^ *SANDBOX_IMAGE: *//p' | head -n 1)
[ -n "$sandbox_image" ] || { echo "check: compose config names no SANDBOX_IMAGE" >&2; exit 1; }
borrow "$(env -u SANDBOX_IMAGE "$binary" image tag)" "$sandbox_image"
stand_ins="$stand_ins
  $sandbox_image: this checkout's sandbox image, built by build-rootfs.sh (file-agent image build)"

compose up -d --no-build >"$work/compose.log" 2>&1 || { cat "$work/compose.log" >&2; exit 1; }
url=http://$host_ip:$port
wait_healthy() {
  for _ in $(seq 1 60); do
    if curl -fsS "$url/health" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  compose logs >&2
  echo "check: the server under compose never answered $url/health" >&2
  exit 1
}
wait_healthy
server=$(compose ps -q file-agent)
settings=$(docker inspect -f '{{.Config.User}} {{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapDrop}}' "$server")
[ "$settings" = "10002:10002 true [ALL]" ] || { echo "check: the server runs with '$settings'" >&2; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url/mcp")
[ "$code" = 401 ] || { echo "check: /mcp without the token answered $code, not 401" >&2; exit 1; }
host_code() {
  curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $token" -H "Host: $1" \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{}' "$url/mcp"
}
[ "$(host_code compose-check.invalid)" != 403 ] || { echo "check: the Host name added in .env was refused" >&2; exit 1; }
[ "$(host_code elsewhere.invalid)" = 403 ] || { echo "check: a Host name not in .env was accepted" >&2; exit 1; }
script='open(f"{output_dir}/kept.txt", "w").write("kept across a restart")
print(2 + 2)'
"$python" tests/sdk/python_client.py "$url/mcp" --token "$token" --code "$script" \
  --openwebui-jwt-secret "$jwt_secret" --user-id compose-check-user >"$work/compose-client.txt" 2>&1 \
  || { cat "$work/compose-client.txt" >&2; compose logs file-agent >&2; exit 1; }
grep -q "result: 4" "$work/compose-client.txt" || { cat "$work/compose-client.txt" >&2; echo "check: run_python under compose failed" >&2; exit 1; }
link=$(sed -n "s|^link: \($url/files/.*kept.txt\)\$|\1|p" "$work/compose-client.txt")
[ -n "$link" ] || { cat "$work/compose-client.txt" >&2; echo "check: no link to kept.txt on $url" >&2; exit 1; }
[ "$(curl -fsS "$link")" = "kept across a restart" ] || { echo "check: $link does not serve the file" >&2; exit 1; }
# Another machine's browser: a container on the engine's bridge network, which reaches the host
# by its address as a machine on the LAN does, not by loopback.
fetched=$(docker run --rm --network bridge --entrypoint python3 "$sandbox_image" -c \
  'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$link" 2>&1) \
  || { echo "check: $link cannot be opened from another machine: $fetched" >&2; exit 1; }
[ "$fetched" = "kept across a restart" ] || { echo "check: from another machine $link gave: $fetched" >&2; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/metrics")
[ "$code" = 401 ] || { echo "check: /metrics without its token answered $code, not 401" >&2; exit 1; }
curl -fsS -H "Authorization: Bearer $metrics_token" "$url/metrics" >"$work/metrics.txt" \
  || { echo "check: /metrics with its token failed" >&2; exit 1; }
grep -q "^file_agent_sandbox_info{backend=\"docker\",runtime=\"$runtime\"} 1" "$work/metrics.txt" \
  || { grep file_agent_sandbox_info "$work/metrics.txt" >&2; echo "check: the sandbox does not run under $runtime" >&2; exit 1; }
# Docker's own health check (every 30 s, file-agent health) says healthy too.
for _ in $(seq 1 60); do
  [ "$(docker inspect -f '{{.State.Health.Status}}' "$server")" = healthy ] && break
  sleep 1
done
[ "$(docker inspect -f '{{.State.Health.Status}}' "$server")" = healthy ] || { echo "check: docker never saw the server healthy" >&2; exit 1; }
step "   up: healthy as 10002, read-only; 401 without the token; .env's Host names; run_python with the token and a signed Open WebUI user, under $runtime; its file link on $host_ip, opened from another machine; /metrics only with its token"

compose up -d --no-build --force-recreate file-agent >>"$work/compose.log" 2>&1 || { cat "$work/compose.log" >&2; exit 1; }
[ "$(compose ps -q file-agent)" != "$server" ] || { echo "check: the server's container was not recreated" >&2; exit 1; }
wait_healthy
[ "$(curl -fsS "$link")" = "kept across a restart" ] || { echo "check: after a restart $link no longer serves the file" >&2; exit 1; }
step "   a new server container serves the same file (the data is in the volume)"

compose down -v >>"$work/compose.log" 2>&1 || { cat "$work/compose.log" >&2; exit 1; }
left=$(docker ps -aq --filter "label=com.docker.compose.project=$project"; docker ps -aq --filter "label=io.file-agent.instance=$instance")
if [ -n "$left" ]; then
  docker ps -a --filter "label=com.docker.compose.project=$project" >&2
  docker ps -a --filter "label=io.file-agent.instance=$instance" >&2
  echo "check: containers left after down" >&2
  exit 1
fi
step "   down left no container behind (compose's or a sandbox); step 4 took $(( $(date +%s) - started )) s"
step "stand-ins for the registry's images:
  $stand_ins"
step "ok"
