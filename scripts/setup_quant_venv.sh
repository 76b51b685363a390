#!/usr/bin/env bash
# The quantization venv (llm-compressor + CPU torch) at $QUANT_VENV (default:
# <repo>/.venv-quant) from requirements-quant.txt: every package pinned, installed with
# --no-deps; the check imports what servebench/quantize/oneshot.py runs.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$repo/scripts/setup_venv.sh" "${QUANT_VENV:-$repo/.venv-quant}" \
  "$repo/requirements-quant.txt" \
  'import llmcompressor, compressed_tensors, datasets, transformers
from llmcompressor import oneshot
print("llmcompressor", llmcompressor.__version__, "compressed-tensors", compressed_tensors.__version__)' \
  --no-deps
