#!/usr/bin/env bash
# The README's promise as a newcomer meets it: `pip install ./sdk/python` into a fresh
# virtual environment, then the README's example run end to end by scripts/e2e.sh with that
# environment's Python and nothing else on PYTHONPATH. Same settings as e2e.sh.
set -euo pipefail
# Nothing from outside the environment: with the caller's PYTHONPATH, pip
# would take a nats-py found there as installed and leave it out.
unset PYTHONPATH

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
venv="$(mktemp -d "${TMPDIR:-/tmp}/chime-sdk-venv.XXXXXX")"
trap 'rm -rf "$venv"' EXIT

python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "$root/sdk/python"
CHIME_E2E_PYTHON="$venv/bin/python" "$root/sdk/python/scripts/e2e.sh"
