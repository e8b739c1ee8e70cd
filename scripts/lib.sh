# Helpers sourced by scripts/bootstrap.sh and scripts/test-setup.sh (not run on its own).

# Runs a command as root: directly when we are root, else through sudo.
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Installs Debian packages quietly, running `apt-get update` once per script.
apt_updated=
apt_install() {
  [ -n "$apt_updated" ] || { as_root apt-get update -qq; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Whether the venv at $1 was made for exactly the requirements $2 (their words, stamped in
# $1/requirement by venv_stamp once it was filled) and its python3 runs.
venv_current() {
  [ -f "$1/requirement" ] && [ "$(cat "$1/requirement")" = "$2" ] && [ -x "$1/bin/python3" ]
}

# Makes the venv at $1 afresh, installing Debian's python3-venv first when it is missing.
fresh_venv() {
  if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    echo "installing python3-venv (the tests' Python libraries live in venvs)" >&2
    apt_install python3-venv
  fi
  rm -rf "$1"
  python3 -m venv "$1"
}

# Stamps the venv at $1 as made for the requirements $2 (see venv_current).
venv_stamp() { echo "$2" >"$1/requirement"; }

# Work done beside the compile, which keeps both cores busy for minutes while this work mostly
# waits on downloads. `start_beside CMD...` starts CMD in the background, in a session of its
# own so that an early exit of the script stops it and its children (debootstrap, docker
# import, pip) too; `finish_beside PID WHAT` waits for it and says WHAT failed if it did.
beside=()
stop_beside() {
  local job
  for job in "${beside[@]}"; do
    # The group, or the process itself if it has not made its session yet.
    kill -TERM -- "-$job" 2>/dev/null || kill -TERM "$job" 2>/dev/null || true
  done
}
start_beside() {
  setsid "$@" &
  beside+=("$!")
  trap stop_beside EXIT
}
finish_beside() {
  local status=0 job kept=()
  wait "$1" || status=$?
  for job in "${beside[@]}"; do [ "$job" = "$1" ] || kept+=("$job"); done
  beside=("${kept[@]}")
  [ "$status" = 0 ] || echo "$2 failed (its output is above)" >&2
  return "$status"
}

# The sandbox image beside the compile: `start_image_build` starts sandbox-image/build-rootfs.sh
# under the tag scripts/image_tag.py computes, when that tag is not on the engine and this host
# builds images that way (root and debootstrap, as `file-agent image build` chooses);
# `finish_image_build` waits for it. The binary's `image build` afterwards then finds the image
# built, or builds it itself if anything differed.
image_job=
start_image_build() {
  local tag
  tag=$(python3 scripts/image_tag.py)
  if docker image inspect "$tag" >/dev/null 2>&1 || [ "$(id -u)" != 0 ] \
     || ! { [ -x /usr/sbin/debootstrap ] || command -v debootstrap >/dev/null 2>&1; }; then
    return 0
  fi
  echo "building the sandbox image $tag beside the compile" >&2
  start_beside sh sandbox-image/build-rootfs.sh sandbox-image "$tag"
  image_job=$!
}
finish_image_build() {
  [ -n "$image_job" ] || return 0
  finish_beside "$image_job" "the sandbox image's build"
}
