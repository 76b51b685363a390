#!/usr/bin/env bash
# Creates the CPU serving-stacks venv (torch CPU + transformers serve + the GGUF converter deps)
# at $STACKS_VENV (default: <repo>/.venv-stacks) and installs requirements-stacks.txt.
# Idempotent: pip is skipped when the stamp file records the same requirements hash.
# Prints the venv's python on its last line.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${STACKS_VENV:-$repo/.venv-stacks}"
req="$repo/requirements-stacks.txt"
PYTHON="${PYTHON:-python3}"
hash="$(sha256sum "$req" | cut -d' ' -f1)"
stamp="$venv/.servebench-stacks-stamp"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
  echo "stacks venv up to date: $venv" >&2
  echo "$venv/bin/python"; exit 0
fi
[[ -x "$venv/bin/python" ]] || "$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip >&2
"$venv/bin/python" -m pip install -r "$req" >&2
"$venv/bin/python" -c 'import torch, transformers, tokenizers, safetensors, sentencepiece, numpy
print("torch", torch.__version__, "transformers", transformers.__version__)' >&2
echo "$hash" > "$stamp"
echo "$venv/bin/python"
