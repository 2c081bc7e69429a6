#!/usr/bin/env bash
# Writes the Compose stack's secrets once: NATS role passwords in .env (which
# Compose reads for ${...} in compose.yaml) and the PostgreSQL and Grafana
# passwords in secrets/. Existing files are kept, so running it again changes
# nothing. None of these files is committed (.gitignore).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

random() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

umask 077
if [ ! -e .env ]; then
  {
    for role in SCHEDULER SCHEDULER_REPLIES ADMIN VIEWER SUBMITTER WORKER_DEFAULT_1 WORKERS_DEFAULT; do
      echo "CHIME_NATS_${role}_PASSWORD=$(random)"
    done
  } >.env
  echo "wrote $(pwd)/.env"
fi

mkdir -p secrets
for name in postgres-password grafana-admin-password; do
  if [ ! -e "secrets/$name" ]; then
    random >"secrets/$name"
    # Read inside the containers by users other than yours (postgres,
    # grafana, the scheduler's 65532); the directory stays private.
    chmod 0644 "secrets/$name"
    echo "wrote $(pwd)/secrets/$name"
  fi
done
