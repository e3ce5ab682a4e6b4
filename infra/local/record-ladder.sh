#!/usr/bin/env bash
# Record the CPU ladder's outcomes of one suite (a `record-*` stage of pipelines/ladder/dvc.yaml):
# start the ladder's llama.cpp servers, run `easy record` on each SPLIT:N given, stop the servers
# (also on failure or interruption). Finished shards are kept, so a re-run goes on where the
# last one stopped.
#   infra/local/record-ladder.sh math train:40 test:60
# RECORD_AT_ONCE executors are called at once (2: the two cores, each server having one thread).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 2 ]; then
  echo "usage: $0 SUITE SPLIT:N [SPLIT:N ...]   (e.g. $0 math train:40 test:60)" >&2
  exit 2
fi
suite="$1"
shift
# EASY_BIN is the directory of the easy executable, as in llama-up.sh (default: easy on PATH)
easy_bin="${EASY_BIN:+$EASY_BIN/}easy"
trap 'infra/local/ladder-down.sh >/dev/null' EXIT
infra/local/ladder-up.sh
for split_n in "$@"; do
  "$easy_bin" record --pool configs/pools/cpu-ladder.yaml --suite "$suite" --split "${split_n%%:*}" \
    --n "${split_n##*:}" --executors-at-once "${RECORD_AT_ONCE:-2}"
done
