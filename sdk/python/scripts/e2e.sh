#!/usr/bin/env bash
# End-to-end check of the Python SDK: runs sdk/python/README.md's example worker (its first
# ```python block, as written) against a real nats-server and a real chime-scheduler on SQLite,
# puts the README's job with chimectl, and waits for a firing of it to succeed with the
# example's output; then stops the worker with SIGTERM and checks it exits 0 and deregisters.
#
#   sdk/python/scripts/e2e.sh
#
# Settings (environment):
#   CHIME_NATS_SERVER   nats-server 2.11+ (default: nats-server on PATH)
#   CHIME_BIN_DIR       where chime-scheduler and chimectl are (default: target/debug)
#   CHIME_E2E_PYTHON    the Python that runs the example (default: python3); without
#                       chime_worker installed, sdk/python/src is put on its PYTHONPATH
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
sdk="$root/sdk/python"
bin="${CHIME_BIN_DIR:-$root/target/debug}"
nats="${CHIME_NATS_SERVER:-$(command -v nats-server || true)}"
python="${CHIME_E2E_PYTHON:-python3}"

die() { printf 'e2e: %s\n' "$*" >&2; exit 1; }
[ -x "$nats" ] || die "no nats-server: set CHIME_NATS_SERVER to a nats-server 2.11+ binary"
for program in chime-scheduler chimectl; do
  [ -x "$bin/$program" ] || die "no $bin/$program: build it (cargo build --bin $program) or set CHIME_BIN_DIR"
done
if ! "$python" -c 'import chime_worker' 2>/dev/null; then
  export PYTHONPATH="$sdk/src${PYTHONPATH:+:$PYTHONPATH}"
  "$python" -c 'import chime_worker' || die "chime_worker is not importable by $python"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/chime-sdk-python-e2e.XXXXXX")"
pids=()
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$status" -ne 0 ]; then
    for log in "$work"/*.log; do printf '\n--- %s\n' "$log" >&2; tail -n 30 "$log" >&2; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

wait_for() { # file, text, seconds
  for _ in $(seq 1 $(($3 * 10))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  die "timed out waiting for '$2' in $1"
}

port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export CHIME_NATS_URL="nats://127.0.0.1:$port"
"$nats" -js -a 127.0.0.1 -p "$port" -sd "$work/nats" >"$work/nats.log" 2>&1 &
pids+=($!)
wait_for "$work/nats.log" "Server is ready" 20

CHIME_DATABASE_URL="sqlite://$work/chime.db" "$bin/chime-scheduler" --metrics-addr 127.0.0.1:0 \
  >"$work/scheduler.log" 2>&1 &
pids=("$!" "${pids[@]}")
wait_for "$work/scheduler.log" "chime-scheduler ready" 60

awk '/^```python$/ {inside = 1; next} /^```$/ && inside {exit} inside {print}' "$sdk/README.md" >"$work/hello.py"
grep -q '@worker.handler("hello")' "$work/hello.py" || die "no example worker found in $sdk/README.md"
"$python" "$work/hello.py" >"$work/worker.log" 2>&1 &
worker=$!
pids=("$worker" "${pids[@]}")
wait_for "$work/worker.log" "worker .* of group python ready" 30

echo '{"id": "hello-python", "group": "python", "schedule": {"every": "10s"},
       "handler": "hello", "payload": {"name": "Ada"}}' | "$bin/chimectl" put - >/dev/null
"$bin/chimectl" trigger hello-python >/dev/null

succeeded=""
for _ in $(seq 1 60); do
  succeeded="$("$bin/chimectl" --json history hello-python | "$python" -c '
import json, sys
for firing in json.load(sys.stdin)["firings"]:
    if firing["state"] == "succeeded" and firing.get("output", "").startswith("hello, Ada, from hello-python@"):
        print(firing["id"], firing.get("worker"), firing["output"])
        break
')"
  [ -n "$succeeded" ] && break
  sleep 1
done
[ -n "$succeeded" ] || die "no firing of hello-python succeeded within 60 s"
printf 'e2e: succeeded: %s\n' "$succeeded"

kill -TERM "$worker"
for _ in $(seq 1 400); do kill -0 "$worker" 2>/dev/null || break; sleep 0.1; done
kill -0 "$worker" 2>/dev/null && die "the worker did not exit within 40 s of SIGTERM"
wait "$worker" || die "the worker exited with status $? after SIGTERM"
workers="$("$bin/chimectl" --json workers)"
case "$workers" in *'"group": "python"'*) die "the worker is still registered: $workers" ;; esac
printf 'e2e: the README example ran a job and stopped cleanly\n'
