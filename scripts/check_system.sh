#!/usr/bin/env bash
# The system (Debian/Ubuntu) packages servebench needs, checked before anything is built.
#   scripts/check_system.sh [--missing] GROUP...
# GROUP: `build` (`make setup` and so `make run`: the llama.cpp build, vLLM's CPU kernels) and
# `test` (what `make test` needs on top). Names every missing package of those groups with what
# needs it and the one apt-get line that installs them all, and exits 1; exits 0 when none is
# missing. With --missing it prints only the missing packages' names, one a line, and exits 0:
# .ci/run installs what it prints, so this table is the one list of what the machine needs.
# Commands are looked up on PATH, libraries in `ldconfig -p` (ldconfig from PATH, else /sbin).
set -euo pipefail

# group  package   probe (cmd:NAME[,NAME...] on PATH | lib:SONAME in ldconfig's cache)  needed by
PACKAGES=(
  "build cmake    cmd:cmake                    llama-server's build (scripts/build_llama_cpp.sh)"
  "build g++      cmd:g++                      llama-server's build; torch.compile in vLLM's warm-up"
  "build make     cmd:make                     llama-server's build"
  "build libnuma1 lib:libnuma.so.1             vLLM's CPU kernels link it"
  "test  chromium cmd:chromium,chromium-browser the browser tests (the Benchmarks view, a report)"
  "test  iproute2 cmd:ip                       network namespaces: the ec2 tests' stand-in hosts"
)

names_only=0
if [[ ${1:-} == --missing ]]; then names_only=1; shift; fi
(($#)) || { echo "usage: $0 [--missing] build|test..." >&2; exit 2; }
groups=" $* "
for group in "$@"; do
  [[ $group == build || $group == test ]] || { echo "$0: unknown group $group" >&2; exit 2; }
done

ldconfig_cache=""
have_lib() {
  if [[ -z $ldconfig_cache ]]; then
    local ldconfig
    ldconfig="$(command -v ldconfig || echo /sbin/ldconfig)"
    ldconfig_cache="$("$ldconfig" -p 2>/dev/null || true)"
  fi
  [[ $ldconfig_cache == *[[:space:]]"$1 "* ]]
}

have_cmd() {
  local name
  for name in ${1//,/ }; do
    command -v "$name" >/dev/null && return 0
  done
  return 1
}

missing=() why=()
for row in "${PACKAGES[@]}"; do
  read -r group package probe needed_by <<<"$row"
  [[ $groups == *" $group "* ]] || continue
  case $probe in
    cmd:*) have_cmd "${probe#cmd:}" && continue ;;
    lib:*) have_lib "${probe#lib:}" && continue ;;
  esac
  missing+=("$package")
  why+=("$(printf '  %-9s %s' "$package" "$needed_by")")
done

if ((names_only)); then
  ((${#missing[@]} == 0)) || printf '%s\n' "${missing[@]}"
  exit 0
fi
((${#missing[@]} == 0)) && exit 0
sudo=""
((EUID == 0)) || sudo="sudo "
{
  echo "Missing system packages (Debian/Ubuntu names):"
  printf '%s\n' "${why[@]}"
  echo "Install them with:"
  echo "  ${sudo}apt-get update && ${sudo}apt-get install -y ${missing[*]}"
} >&2
exit 1
