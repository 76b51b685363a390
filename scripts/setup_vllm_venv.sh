#!/usr/bin/env bash
# vLLM's CPU build venv at $VLLM_VENV (default: <repo>/.venv-vllm) from requirements-vllm.txt:
# every package pinned, installed with --no-deps; the check imports the OpenAI server module,
# transformers' image utilities included (what broke with PyPI's CUDA-built torchvision).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$repo/scripts/setup_venv.sh" "${VLLM_VENV:-$repo/.venv-vllm}" \
  "$repo/requirements-vllm.txt" \
  'import vllm, vllm.entrypoints.openai.api_server
print("vllm", vllm.__version__)' --no-deps
