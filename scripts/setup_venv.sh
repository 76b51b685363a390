#!/usr/bin/env bash
# Creates (or updates) a serving stack's own venv from its requirements file and checks it.
#   scripts/setup_venv.sh VENV REQUIREMENTS CHECK [PIP_INSTALL_ARG...]
# CHECK is Python the venv must run (the imports the stack needs); PIP_INSTALL_ARG go before
# `-r REQUIREMENTS` (--no-deps for a fully pinned file). Idempotent: pip is skipped when the
# stamp records the same requirements and arguments. Prints the venv's python on its last line.
#
# torch: a requirements file that has torch pins its CPU build, `torch==X+cpu`. PyPI serves no
# such build (it takes no local versions; its `torch` is the multi-GB CUDA one), so that one
# wheel is downloaded first, alone and --no-deps, from TORCH_INDEX_URL (default PyTorch's CPU
# index; set it to a mirror of that index), and the install reads it with --find-links. The
# torch index is asked for torch and nothing else; every other package comes from pip's own
# index (PyPI), and only the wheel from the torch index can meet the `+cpu` pin.
#
# SETUP_VENV_DRY_RUN=REPORT.json runs the same pip commands but only resolves the install
# (--dry-run --ignore-installed --report REPORT.json): no import check, no stamp.
set -euo pipefail
venv="$1" req="$2" check="$3"
shift 3
PYTHON="${PYTHON:-python3}"
TORCH_INDEX_URL="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
dry_run="${SETUP_VENV_DRY_RUN:-}"
torch_line="$(grep -E '^[[:space:]]*torch([[:space:]=<>!~;[#]|$)' "$req" || true)"
torch_pin="${torch_line%%#*}" torch_pin="${torch_pin//[[:space:]]/}"
if [[ -n $torch_pin && ! $torch_pin =~ ^torch==[^,\;]+\+cpu$ ]]; then
  echo "$req: pin torch's CPU build (torch==X+cpu), not: $torch_line" >&2; exit 1
fi
hash="$( (cat "$req"; echo "$*") | sha256sum | cut -d' ' -f1)"
stamp="$venv/.servebench-stamp"
if [[ -z $dry_run && -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
  echo "venv up to date: $venv" >&2
  echo "$venv/bin/python"; exit 0
fi
[[ -x "$venv/bin/python" ]] || "$PYTHON" -m venv "$venv"
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install --quiet --upgrade pip >&2

install=(install "$@" -r "$req")
if [[ -n $torch_pin ]]; then
  wheels="$(mktemp -d)"
  trap 'rm -rf "$wheels"' EXIT
  "${pip[@]}" download --quiet --no-deps --only-binary=:all: --index-url "$TORCH_INDEX_URL" \
    --dest "$wheels" "$torch_pin" >&2
  install+=(--find-links "$wheels")
fi
if [[ -n $dry_run ]]; then
  "${pip[@]}" "${install[@]}" --dry-run --ignore-installed --report "$dry_run" >&2
  exit 0
fi
"${pip[@]}" "${install[@]}" >&2
"$venv/bin/python" -c "$check" >&2
echo "$hash" > "$stamp"
echo "$venv/bin/python"
