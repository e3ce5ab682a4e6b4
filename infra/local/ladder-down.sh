#!/usr/bin/env bash
# Stop what infra/local/ladder-up.sh started.
set -uo pipefail
cd "$(dirname "$0")/../.."
state="${EASY_STATE_DIR:-$PWD/.prefect-local}"
for model in smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b; do
  EASY_STATE_DIR="$state/ladder-$model" infra/local/llama-down.sh
done
