#!/usr/bin/env bash
# Start an S3-compatible server (moto) on loopback for the DVC remote and result storage.
# Usage: infra/local/s3-up.sh   (S3_PORT, EASY_STATE_DIR optional). Prints the endpoint URL.
set -euo pipefail
cd "$(dirname "$0")/../.."
port="${S3_PORT:-5555}"
state="${EASY_STATE_DIR:-$PWD/.prefect-local}"
bin="${EASY_BIN:-$PWD/.venv/bin}"
mkdir -p "$state"
"$bin/moto_server" -H 127.0.0.1 -p "$port" > "$state/s3.log" 2>&1 &
echo $! > "$state/s3.pid"
for _ in $(seq 1 60); do
  if "$bin/python" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "http://127.0.0.1:$port/moto-api/" 2>/dev/null; then
    echo "http://127.0.0.1:$port"
    exit 0
  fi
  sleep 0.5
done
echo "moto_server did not start; see $state/s3.log" >&2
exit 1
