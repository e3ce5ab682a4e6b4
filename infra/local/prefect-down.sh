#!/usr/bin/env bash
# Stop what infra/local/prefect-up.sh started. A process worker ignores the first SIGTERM
# (it begins a graceful shutdown), so it gets a second one.
set -uo pipefail
cd "$(dirname "$0")/../.."
state="${EASY_STATE_DIR:-$PWD/.prefect-local}"

stop() {
  local pidfile="$1" pid
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  for signal in TERM TERM KILL; do
    kill -0 "$pid" 2>/dev/null || break
    kill "-$signal" "$pid" 2>/dev/null
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  done
  rm -f "$pidfile"
}

stop "$state/worker.pid"
stop "$state/server.pid"
