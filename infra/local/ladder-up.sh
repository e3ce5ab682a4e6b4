#!/usr/bin/env bash
# Start the CPU model ladder: one llama.cpp OpenAI-compatible server (llama-cpp-python[server])
# per model, on loopback, each with one thread (llama-cpp-python serves one request at a time
# per model and swaps models when one process serves several, so one process per model is what
# keeps all three warm). Prompt caching: each server reuses the KV state of the longest prefix
# its next prompt shares with the previous one (llama-cpp-python's prefix match, always on);
# its RAM cache of many prompts stays off (LADDER_RAM_CACHE=true): every entry copies the
# logits of the whole context, 2.5 GB per prompt at Qwen's vocabulary and 4096 tokens.
#   SmolLM2-135M-Instruct   on 8088 (smollm2-135m)
#   Qwen2.5-Coder-0.5B      on 8089 (qwen2.5-coder-0.5b)
#   Qwen2.5-Coder-1.5B      on 8090 (qwen2.5-coder-1.5b)
# configs/pools/cpu-ladder.yaml expects these ports (LADDER_PORTS="P1 P2 P3" moves them).
# The servers run at niceness LADDER_NICE (10 by default): on a machine they share with easy's own
# processes (the CLI, `easy serve`, a load driver), a request's few milliseconds of Python then
# do not wait behind three model processes that keep both cores busy; alone, they run as fast.
# Prints each server's base URL. EASY_STATE_DIR holds the logs and pids;
# infra/local/ladder-down.sh stops them.
set -euo pipefail
cd "$(dirname "$0")/../.."
state="${EASY_STATE_DIR:-$PWD/.prefect-local}"
read -r -a ports <<< "${LADDER_PORTS:-8088 8089 8090}"
models=(smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b)
for i in 0 1 2; do
  LLAMA_MODEL="${models[$i]}" LLAMA_PORT="${ports[$i]}" LLAMA_CACHE="${LADDER_RAM_CACHE:-false}" LLAMA_THREADS=1 \
    LLAMA_NICE="${LADDER_NICE:-10}" \
    EASY_STATE_DIR="$state/ladder-${models[$i]}" infra/local/llama-up.sh
done
