#!/usr/bin/env bash
# Creates (or updates) a serving stack's own venv from its requirements file and checks it.
#   scripts/setup_venv.sh VENV REQUIREMENTS CHECK [PIP_INSTALL_ARG...]
# CHECK is Python the venv must run (the imports the stack needs); PIP_INSTALL_ARG go before
# `-r REQUIREMENTS` (--no-deps for a fully pinned file). Idempotent: pip is skipped when the
# stamp records the same requirements and arguments. Prints the venv's python on its last line.
set -euo pipefail
venv="$1" req="$2" check="$3"
shift 3
PYTHON="${PYTHON:-python3}"
hash="$( (cat "$req"; echo "$*") | sha256sum | cut -d' ' -f1)"
stamp="$venv/.servebench-stamp"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
  echo "venv up to date: $venv" >&2
  echo "$venv/bin/python"; exit 0
fi
[[ -x "$venv/bin/python" ]] || "$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip >&2
"$venv/bin/python" -m pip install "$@" -r "$req" >&2
"$venv/bin/python" -c "$check" >&2
echo "$hash" > "$stamp"
echo "$venv/bin/python"
