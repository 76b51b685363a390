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
# index (PyPI), and only the wheel from the torch index can meet the `+cpu` pin. The index is
# probed once first (`<index>/torch/`, TORCH_INDEX_PROBE_S seconds, default 5): where it does
# not answer, one line says so and torch comes from what pip itself is configured with (its
# --find-links or index: PIP_FIND_LINKS, pip.conf), with no retries of the unreachable index.
#
# pip's install is not --quiet: `make setup` keeps its output in build/logs/<step>.log and
# shows the packages collected and installed from it (scripts/steps.py).
#
# SETUP_VENV_DRY_RUN=REPORT.json runs the same pip commands but only resolves the install
# (--dry-run --ignore-installed --report REPORT.json): no import check, no stamp.
set -euo pipefail
venv="$1" req="$2" check="$3"
shift 3
PYTHON="${PYTHON:-python3}"
TORCH_INDEX_URL="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
TORCH_INDEX_PROBE_S="${TORCH_INDEX_PROBE_S:-5}"
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

# Why the torch index cannot serve torch (one line), or nothing when `<index>/torch/` answers.
torch_index_unreachable() {
  "$venv/bin/python" - "${TORCH_INDEX_URL%/}/torch/" "$TORCH_INDEX_PROBE_S" <<'EOF' || true
import os, ssl, sys, urllib.request
url, timeout = sys.argv[1], float(sys.argv[2])
context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
try:
    urllib.request.urlopen(url, timeout=timeout, context=context).close()
except Exception as e:  # no answer: DNS, refused, timed out, TLS, an HTTP error status
    print(getattr(e, "reason", None) or e)
EOF
}

install=(install "$@" -r "$req")
if [[ -n $torch_pin ]]; then
  wheels="$(mktemp -d)"
  trap 'rm -rf "$wheels"' EXIT
  from=(--index-url "$TORCH_INDEX_URL")
  why="$(torch_index_unreachable)"
  if [[ -n $why ]]; then
    echo "torch index $TORCH_INDEX_URL not reachable ($why): $torch_pin from pip's own configuration" >&2
    from=()
  fi
  if ! "${pip[@]}" download --quiet --no-deps --only-binary=:all: "${from[@]}" \
      --dest "$wheels" "$torch_pin" >&2; then
    [[ -z $why ]] || echo "$req: no $torch_pin in pip's own configuration either: set" \
      "TORCH_INDEX_URL to a mirror of PyTorch's CPU index, or PIP_FIND_LINKS to a folder with its wheel" >&2
    exit 1
  fi
  install+=(--find-links "$wheels")
fi
if [[ -n $dry_run ]]; then
  "${pip[@]}" "${install[@]}" --quiet --dry-run --ignore-installed --report "$dry_run" >&2
  exit 0
fi
"${pip[@]}" "${install[@]}" --progress-bar off >&2
"$venv/bin/python" -c "$check" >&2
echo "$hash" > "$stamp"
echo "$venv/bin/python"
