#!/usr/bin/env bash
# Builds llama-server and llama-quantize from the llama.cpp source vendored in the
# llama-cpp-python sdist on PyPI (GitHub is not reachable from build machines).
# The build is cached under $SERVEBENCH_CACHE keyed by the sdist version, so a second
# run costs nothing; a cold build takes ~4 min on 2 cores.
# Prints the bin directory on its last line.
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${SERVEBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/servebench}"
PYTHON="${PYTHON:-python3}"
root="$CACHE/llama.cpp-$VERSION"
bin="$root/build/bin"
if [[ -x "$bin/llama-server" && -x "$bin/llama-quantize" && -f "$bin/SOURCE" && -f "$root/src/convert_hf_to_gguf.py" ]]; then
  echo "llama.cpp $VERSION already built" >&2
  echo "$bin"; exit 0
fi
mkdir -p "$root"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m pip download --quiet --no-binary :all: --no-deps \
  -d "$tmp" "llama-cpp-python==$VERSION" >&2
tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
rm -rf "$root/src"
mv "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$root/src"
cmake -S "$root/src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$root/build" --config Release -j "$(nproc)" --target llama-server llama-quantize >&2
# provenance: llama-server --version says "build 0, commit unknown" for a source tarball
echo "llama-cpp-python==$VERSION sdist" > "$root/build/bin/SOURCE"
echo "$bin"
