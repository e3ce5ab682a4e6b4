#!/usr/bin/env bash
# Record the CPU ladder's outcomes (the `record-ladder` stage of pipelines/ladder/dvc.yaml):
# start the ladder's llama.cpp servers, run `easy record` on each split, stop the servers
# (also on failure or interruption). Finished shards are kept, so a re-run goes on where the
# last one stopped. RECORD_SUITES (default: math code) names the suites, RECORD_TRAIN_N and
# RECORD_TEST_N size the splits; RECORD_AT_ONCE executors
# are called at once (2: the two cores, each server having one thread).
set -euo pipefail
cd "$(dirname "$0")/../.."
# EASY_BIN is the directory of the easy executable, as in llama-up.sh (default: easy on PATH)
easy_bin="${EASY_BIN:+$EASY_BIN/}easy"
trap 'infra/local/ladder-down.sh >/dev/null' EXIT
infra/local/ladder-up.sh
for suite in ${RECORD_SUITES:-math code}; do
  "$easy_bin" record --pool configs/pools/cpu-ladder.yaml --suite "$suite" --split train --n "${RECORD_TRAIN_N:-40}" --executors-at-once "${RECORD_AT_ONCE:-2}"
  "$easy_bin" record --pool configs/pools/cpu-ladder.yaml --suite "$suite" --split test --n "${RECORD_TEST_N:-20}" --executors-at-once "${RECORD_AT_ONCE:-2}"
done
