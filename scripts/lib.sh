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
