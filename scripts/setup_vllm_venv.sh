#!/usr/bin/env bash
# Creates vLLM's CPU build venv at $VLLM_VENV (default: <repo>/.venv-vllm) from
# requirements-vllm.txt (every package pinned, installed with --no-deps), then checks that the
# OpenAI server module imports. Idempotent: skipped when the stamp records the same file hash.
# Prints the venv's python on its last line.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VLLM_VENV:-$repo/.venv-vllm}"
req="$repo/requirements-vllm.txt"
PYTHON="${PYTHON:-python3}"
hash="$(sha256sum "$req" | cut -d' ' -f1)"
stamp="$venv/.servebench-vllm-stamp"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
  echo "vllm venv up to date: $venv" >&2
  echo "$venv/bin/python"; exit 0
fi
[[ -x "$venv/bin/python" ]] || "$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet --no-deps -r "$req" >&2
# the server's own import chain (transformers' image utilities included): what broke with the
# CUDA-built torchvision
"$venv/bin/python" -c 'import vllm, vllm.entrypoints.openai.api_server
print("vllm", vllm.__version__)' >&2
echo "$hash" > "$stamp"
echo "$venv/bin/python"
