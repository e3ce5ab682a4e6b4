#!/usr/bin/env bash
# Start, on loopback, a Prefect server and a process worker for the `local` work pool.
# Usage: infra/local/prefect-up.sh   (PREFECT_PORT, EASY_STATE_DIR optional)
# Prints the PREFECT_API_URL to export. Stop with infra/local/prefect-down.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
port="${PREFECT_PORT:-4200}"
state="${EASY_STATE_DIR:-$PWD/.prefect-local}"
bin="${EASY_BIN:-$PWD/.venv/bin}"
mkdir -p "$state"
export PREFECT_HOME="$state/home"
export PREFECT_API_URL="http://127.0.0.1:$port/api"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export EASY_CHECKOUT="$PWD"

"$bin/prefect" server start --host 127.0.0.1 --port "$port" > "$state/server.log" 2>&1 &
echo $! > "$state/server.pid"
for _ in $(seq 1 120); do
  if "$bin/python" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" "$PREFECT_API_URL" 2>/dev/null; then
    break
  fi
  sleep 1
done
"$bin/python" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" "$PREFECT_API_URL" \
  || { echo "Prefect server did not start; see $state/server.log" >&2; exit 1; }

"$bin/prefect" work-pool create local --type process --overwrite > /dev/null
# The GPU pool runs flow runs as Kubernetes jobs on GPU nodes; locally it only receives
# deployments (no worker), so `prefect deploy --all` works on one machine.
"$bin/prefect" work-pool create gpu --type kubernetes \
  --base-job-template infra/k8s/base-job-template.json --overwrite > /dev/null
"$bin/prefect" worker start --pool local --type process > "$state/worker.log" 2>&1 &
echo $! > "$state/worker.pid"
echo "$PREFECT_API_URL"
