#!/bin/sh
# Registry-free build of the sandbox image, for hosts that cannot pull a base image (air-gapped
# ones, and the machines file-agent is developed on). Called by `file-agent image build`, which
# passes the tag derived from the content of this folder; it can be run by hand the same way:
#
#   sudo sandbox-image/build-rootfs.sh sandbox-image file-agent-sandbox:<hash>
#
# Needs root, debootstrap, python3 with pip (only to download wheels on this host) and a Docker
# engine. Set DEBIAN_MIRROR to use a mirror other than debootstrap's default.
#
# Steps: debootstrap a minimal Debian bookworm, apt-get the packages of packages.txt in it; unpack the
# pinned wheels of wheels.txt; add the sandbox user (10001), /work and the runner; strip what the
# code never needs (apt, docs, man pages, locales, caches); `docker import` the tree with the same
# user, working directory and environment as the Dockerfile gives.
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

# Wheels: downloaded here, unpacked into the tree; their dependencies are Debian packages.
wheels=$(grep -v '^[[:space:]]*#' "$context/wheels.txt" | grep -v '^[[:space:]]*$' || true)
if [ -n "$wheels" ]; then
  mkdir -p "$scratch/wheels"
  # shellcheck disable=SC2086
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" \
    -d "$scratch/wheels" $wheels
  site=$root/usr/local/lib/python$pyver/dist-packages
  mkdir -p "$site"
  for wheel in "$scratch"/wheels/*.whl; do
    python3 -m zipfile -e "$wheel" "$site"
  done
  chroot "$root" /usr/bin/python3 -m compileall -q "/usr/local/lib/python$pyver/dist-packages" >/dev/null
fi

# The sandbox user, its folders, the runner and the table inspection script.
echo "sandbox:x:10001:10001:file-agent sandbox:/tmp:/usr/sbin/nologin" >>"$root/etc/passwd"
echo "sandbox:x:10001:" >>"$root/etc/group"
# /work and /work/in belong to root: inputs are read-only to the script. /work/out, where a tmpfs
# is mounted at run time, belongs to the sandbox user.
mkdir -p "$root/work/in" "$root/work/out" "$root/opt/file-agent"
chown 10001:10001 "$root/work/out"
install -m 0644 "$context/runner.py" "$root/opt/file-agent/runner.py"
install -m 0644 "$context/inspect_table.py" "$root/opt/file-agent/inspect_table.py"
chroot "$root" /usr/bin/python3 -m compileall -q /opt/file-agent >/dev/null
# matplotlib's font list, built once here instead of in every attempt; the runner copies it.
chroot "$root" /usr/bin/env MPLCONFIGDIR=/opt/file-agent/matplotlib HOME=/tmp \
  /usr/bin/python3 -c "import matplotlib.font_manager" >/dev/null

# Strip what model code never uses: the package manager first, then files.
chroot "$root" /usr/bin/dpkg --purge apt libapt-pkg6.0 >>"$log" 2>&1 || fail "dpkg --purge apt"
# Strip what model code never uses. Python, its libraries and their byte-code stay.
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/var/log/* \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
  "$root"/usr/share/lintian "$root"/usr/share/locale/* "$root"/usr/lib/python3/dist-packages/*/tests \
  "$root"/usr/bin/apt* "$root"/usr/lib/apt "$root"/etc/apt "$root"/var/lib/apt "$root"/usr/share/bug \
  "$root"/usr/share/X11/locale
# A build stamp for `file-agent doctor`.
echo "$tag" >"$root/opt/file-agent/IMAGE"

echo "build-rootfs: importing $tag" >&2
tar --numeric-owner -C "$root" -c . | docker import \
  --change 'USER 10001:10001' \
  --change 'WORKDIR /work' \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin MPLBACKEND=Agg MPLCONFIGDIR=/tmp/matplotlib HOME=/tmp LANG=C.UTF-8' \
  --change 'LABEL io.file-agent.sandbox-image=true' \
  --change 'CMD ["python3", "-I", "-B", "/opt/file-agent/runner.py", "/work/script.py"]' \
  - "$tag" >/dev/null
