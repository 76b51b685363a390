#!/usr/bin/env bash
# The CPU serving-stacks venv (torch CPU + transformers serve + the GGUF converter's deps) at
# $STACKS_VENV (default: <repo>/.venv-stacks), from requirements-stacks.txt.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$repo/scripts/setup_venv.sh" "${STACKS_VENV:-$repo/.venv-stacks}" \
  "$repo/requirements-stacks.txt" \
  'import torch, transformers, tokenizers, safetensors, sentencepiece, numpy
print("torch", torch.__version__, "transformers", transformers.__version__)'
