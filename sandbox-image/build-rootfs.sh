#!/bin/sh
# Registry-free build of the sandbox image, for hosts that cannot pull a base image (air-gapped
# ones, and the machines file-agent is developed on). Called by `file-agent image build`, which
# passes the tag derived from the content of this folder; it can be run by hand the same way:
#
#   sudo sandbox-image/build-rootfs.sh sandbox-image file-agent-sandbox:<hash>
#
# The operator's extra packages (SANDBOX_EXTRA_PACKAGES) come in the context as
# extra-packages.txt and its wheels beside it (*.whl, which `file-agent image build` downloaded
# and checked on this host); EXTRA_LIST_NAME is the list's path as the operator named it, for the
# manifest. Without them the image has the base set only.
#
# Needs root, debootstrap, python3 with pip (only to download and unpack wheels on this host) and
# a Docker engine. Set DEBIAN_MIRROR to use a mirror other than debootstrap's default.
#
# Steps: debootstrap a minimal Debian bookworm, apt-get the packages of packages.txt in it (the
# interpreter, the C++ runtime, fonts); download the wheels of wheels.txt, checked against their
# hashes, and unpack them into /usr/local/lib/python3.11/dist-packages; add the sandbox user
# (10001), /work and the runner; compile the byte-code with the image's own interpreter; build
# matplotlib's font list; strip what the code never needs (apt, docs, man pages, locales,
# caches); `docker import` the tree with the same user, working directory and environment as the
# Dockerfile gives. The Dockerfile does the same steps in the same order of effect.
set -eu

context=${1:?usage: build-rootfs.sh CONTEXT_DIR TAG}
tag=${2:?usage: build-rootfs.sh CONTEXT_DIR TAG}
suite=bookworm
pyver=3.11

for tool in debootstrap docker python3 chroot; do
  command -v "$tool" >/dev/null 2>&1 || { echo "build-rootfs: '$tool' is missing (apt-get install debootstrap docker.io python3-pip)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "build-rootfs: debootstrap needs root" >&2; exit 2; }

scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/file-agent-rootfs.XXXXXX")
trap 'rm -rf "$scratch"' EXIT INT TERM
root=$scratch/rootfs

packages=$(grep -v '^[[:space:]]*#' "$context/packages.txt" | grep -v '^[[:space:]]*$' | tr '\n' ' ')
log=$scratch/build.log
fail() { tail -n 30 "$log" >&2; echo "build-rootfs: $1 failed (log above)" >&2; exit 1; }

# A bare minbase first, then apt inside it: debootstrap's own resolver would take every
# alternative and drag in compilers; apt with --no-install-recommends takes only what is needed.
echo "build-rootfs: debootstrap $suite" >&2
# shellcheck disable=SC2086
debootstrap --variant=minbase "$suite" "$root" ${DEBIAN_MIRROR:-} >"$log" 2>&1 || fail debootstrap
cp /etc/resolv.conf "$root/etc/resolv.conf"
echo "build-rootfs: apt-get install $packages" >&2
# shellcheck disable=SC2086
{
  chroot "$root" /usr/bin/apt-get update -q &&
  DEBIAN_FRONTEND=noninteractive chroot "$root" /usr/bin/apt-get install -y -q --no-install-recommends $packages &&
  chroot "$root" /usr/bin/apt-get clean
} >>"$log" 2>&1 || fail "apt-get install"
: >"$root/etc/resolv.conf"

# Wheels: every Python library. pip runs on this host only, for the image's interpreter (CPython
# 3.11 on manylinux x86_64, whatever this host's Python is): it downloads the files of
# wheels.txt, refuses any whose hash differs, and unpacks them into a staging folder, from which
# they are copied into the tree. pip never enters the image.
site=/usr/local/lib/python$pyver/dist-packages
wheels=$scratch/wheels
staging=$scratch/site
# pip has no "glibc at most 2.X" flag: name every manylinux tag bookworm's glibc 2.36 accepts.
target="--python-version $pyver --implementation cp --abi cp$(echo "$pyver" | tr -d .)"
target="$target --platform manylinux2014_x86_64"
for minor in $(seq 17 36); do target="$target --platform manylinux_2_${minor}_x86_64"; done
echo "build-rootfs: wheels of wheels.txt" >&2
# shellcheck disable=SC2086
{
  python3 -m pip download --disable-pip-version-check --require-hashes --no-deps \
    --only-binary=:all: $target -d "$wheels" -r "$context/wheels.txt" &&
  python3 -m pip install --disable-pip-version-check --no-deps --no-index --no-compile \
    --only-binary=:all: $target --target "$staging" "$wheels"/*.whl
} >>"$log" 2>&1 || fail "pip download/install of the wheels"
# What --target adds beside the packages: console scripts in bin/ (f2py, ttx, ...; their
# shebang names this host's Python, and the sandbox runs none of them), data files in share/
# (a man page) and direct_url.json (this host's download folder). Test suites (pandas' alone is
# tens of MB) are never imported.
# The operator's extra packages: the wheels already downloaded and checked on this host,
# installed from that folder only (no index), each checked against its hash again.
if [ -f "$context/extra-packages.txt" ]; then
  echo "build-rootfs: wheels of the extra list (${EXTRA_LIST_NAME:-extra-packages.txt})" >&2
  # shellcheck disable=SC2086
  python3 -m pip install --disable-pip-version-check --no-deps --no-index --no-compile \
    --only-binary=:all: --require-hashes $target --find-links "$context" \
    --target "$scratch/extra-site" -r "$context/extra-packages.txt" >>"$log" 2>&1 ||
    fail "pip install of the extra list's wheels"
  cp -a "$scratch/extra-site/." "$staging/"
fi
rm -rf "$staging/bin" "$staging/share" "$staging"/*.dist-info/direct_url.json
find "$staging" -depth -type d -name tests -exec rm -rf {} +
mkdir -p "$root$site"
cp -a "$staging/." "$root$site/"

# The sandbox user, its folders, the runner, the saved tools' script, the table inspection and
# the change report.
echo "sandbox:x:10001:10001:file-agent sandbox:/tmp:/usr/sbin/nologin" >>"$root/etc/passwd"
echo "sandbox:x:10001:" >>"$root/etc/group"
# /work and /work/in belong to root: inputs are read-only to the script. /work/out, where a tmpfs
# is mounted at run time, belongs to the sandbox user.
mkdir -p "$root/work/in" "$root/work/out" "$root/opt/file-agent"
chown 10001:10001 "$root/work/out"
install -m 0644 "$context/runner.py" "$root/opt/file-agent/runner.py"
install -m 0644 "$context/model_tool.py" "$root/opt/file-agent/model_tool.py"
install -m 0644 "$context/manifest.py" "$root/opt/file-agent/manifest.py"
if [ -f "$context/extra-packages.txt" ]; then
  install -m 0644 "$context/extra-packages.txt" "$root/opt/file-agent/extra-packages.txt"
fi
# The table inspection and the change report are packages (a module per file type), run with
# runpy.run_module once their jobs have appended /opt/file-agent to sys.path.
install -d -m 0755 "$root/opt/file-agent/inspect_table" "$root/opt/file-agent/change_report"
install -m 0644 "$context"/inspect_table/*.py "$root/opt/file-agent/inspect_table/"
install -m 0644 "$context"/change_report/*.py "$root/opt/file-agent/change_report/"
# Byte-code for the wheels, the standard library and the runner, compiled by the image's own
# interpreter: attempts run with -B on a read-only root, so a missing or stale .pyc would mean
# compiling that module again in every attempt. unchecked-hash .pyc files are used whatever the
# sources' timestamps say (an importer or a registry that resets mtimes cannot make them stale);
# measured here, they load no faster than timestamp ones, and no slower.
chroot "$root" /usr/bin/python3 -m compileall -q -f --invalidation-mode unchecked-hash \
  "$site" "/usr/lib/python$pyver" /opt/file-agent >>"$log" 2>&1 || fail compileall
# The manifest: every distribution an attempt can import, the extra list's marked, written by
# the image's own interpreter (file-agent tells the model from it what it can import).
extra_in_image=""
[ -f "$root/opt/file-agent/extra-packages.txt" ] && extra_in_image=/opt/file-agent/extra-packages.txt
chroot "$root" /usr/bin/python3 -I /opt/file-agent/manifest.py "$site" "$extra_in_image" \
  "${EXTRA_LIST_NAME:-}" >"$root/opt/file-agent/packages.json" 2>>"$log" || fail manifest
# matplotlib's font list, built once here instead of in every attempt; the runner copies it.
chroot "$root" /usr/bin/env MPLCONFIGDIR=/opt/file-agent/matplotlib HOME=/tmp \
  /usr/bin/python3 -c "import matplotlib.font_manager" >/dev/null

# Strip what model code never uses: the package manager first, then files.
chroot "$root" /usr/bin/dpkg --purge apt libapt-pkg6.0 >>"$log" 2>&1 || fail "dpkg --purge apt"
# Strip what model code never uses. Python, its libraries and their byte-code stay.
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/var/log/* \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
  "$root"/usr/share/lintian "$root"/usr/share/locale/* \
  "$root"/usr/bin/apt* "$root"/usr/lib/apt "$root"/etc/apt "$root"/var/lib/apt "$root"/usr/share/bug \
  "$root"/usr/share/X11/locale
# A build stamp for `file-agent doctor`: the tag, or the one IMAGE_STAMP names (`image build`
# builds under a tag of its own until the image is labelled).
echo "${IMAGE_STAMP:-$tag}" >"$root/opt/file-agent/IMAGE"

# The manifest as a label too, readable with an image inspect (a Dockerfile build gets it from
# `file-agent image build`): one JSON string, quoted for the Dockerfile syntax of --change.
manifest_label=$(python3 -c 'import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
    text = json.dumps(json.load(f), separators=(",", ":"), ensure_ascii=False)
print(json.dumps(text, ensure_ascii=False))' "$root/opt/file-agent/packages.json") || fail "reading the manifest"

echo "build-rootfs: importing $tag" >&2
tar --numeric-owner -C "$root" -c . | docker import \
  --change "LABEL io.file-agent.manifest=$manifest_label" \
  --change 'USER 10001:10001' \
  --change 'WORKDIR /work' \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin MPLBACKEND=Agg MPLCONFIGDIR=/tmp/matplotlib HOME=/tmp LANG=C.UTF-8' \
  --change 'LABEL io.file-agent.sandbox-image=true' \
  --change 'CMD ["python3", "-I", "-B", "/opt/file-agent/runner.py", "/work/script.py"]' \
  - "$tag" >/dev/null
