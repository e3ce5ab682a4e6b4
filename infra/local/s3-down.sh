#!/usr/bin/env bash
# Stop the S3-compatible server started by infra/local/s3-up.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
state="${EASY_STATE_DIR:-$PWD/.prefect-local}"
[ -f "$state/s3.pid" ] || exit 0
kill "$(cat "$state/s3.pid")" 2>/dev/null
rm -f "$state/s3.pid"
