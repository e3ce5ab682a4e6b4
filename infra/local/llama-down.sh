#!/usr/bin/env bash
# Stop what infra/local/llama-up.sh started.
set -uo pipefail
cd "$(dirname "$0")/../.."
state="${EASY_STATE_DIR:-$PWD/.prefect-local}"
pidfile="$state/llama.pid"
[ -f "$pidfile" ] || exit 0
pid="$(cat "$pidfile")"
for signal in TERM KILL; do
  kill -0 "$pid" 2>/dev/null || break
  kill "-$signal" "$pid" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
done
rm -f "$pidfile"
