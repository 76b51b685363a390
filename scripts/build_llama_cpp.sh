#!/usr/bin/env bash
# Builds llama-server and llama-quantize from the llama.cpp source vendored in the
# llama-cpp-python sdist on PyPI (GitHub is not reachable from build machines).
#
# -march=native, but with llama.cpp's AMX tile kernels compiled out (-mno-amx-*): in this
# llama.cpp, ggml-cpu/amx/mmq.cpp builds its tile config on the stack and GCC drops the
# stores to it as dead before `ldtilecfg` (objdump of mmq.o for -march=sapphirerapids shows
# only the palette byte written), so every batched (M > 1) matmul over a Q4_0/Q4_1/Q8_0/
# Q4_K/Q5_K/Q6_K/IQ4_XS weight faults on AMX CPUs (c7i/m7i/r7i): SIGSEGV at warm-up for
# q8_0 and q4_k_m, under parallel requests for q2_k. Upstream: llama.cpp PR #26954, open.
# On CPUs without AMX the flags change nothing; on AMX CPUs llama.cpp then runs its AVX-512
# VNNI kernels. The flags are recorded in bin/SOURCE, which the engine version carries into
# every row's provenance, beside the CPU's ISA features.
#
# LLAMA_CPP_NATIVE=OFF builds for any x86-64 CPU with AVX2 instead of this one (the Dockerfile:
# an image runs on other machines than the one that built it).
#
# The build is cached under $SERVEBENCH_CACHE keyed by the sdist version and these flags, so
# a second run costs nothing; a cold build takes 4 to 12 min on 2 cores (docs/benchmarks.md).
# Prints the bin directory on its last line.
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
BUILD_TAG="${LLAMA_CPP_BUILD_TAG:-noamx}"
ARCH_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CACHE="${SERVEBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/servebench}"
PYTHON="${PYTHON:-python3}"
NATIVE="${LLAMA_CPP_NATIVE:-ON}"
TARGET_DESC="-march=native"
[[ "$NATIVE" == "ON" ]] || TARGET_DESC="portable (GGML_NATIVE=OFF: AVX2, FMA, F16C)"
root="$CACHE/llama.cpp-$VERSION-$BUILD_TAG"
bin="$root/build/bin"
if [[ -x "$bin/llama-server" && -x "$bin/llama-quantize" && -f "$bin/SOURCE" && -f "$root/src/convert_hf_to_gguf.py" ]]; then
  echo "llama.cpp $VERSION ($BUILD_TAG) already built" >&2
  echo "$bin"; exit 0
fi
mkdir -p "$root"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m pip download --quiet --no-binary :all: --no-deps \
  -d "$tmp" "llama-cpp-python==$VERSION" >&2
tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
rm -rf "$root/src" "$root/build"
mv "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$root/src"
cmake -S "$root/src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="$ARCH_FLAGS" -DCMAKE_CXX_FLAGS="$ARCH_FLAGS" -DGGML_NATIVE="$NATIVE" \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$root/build" --config Release -j "$(nproc)" --target llama-server llama-quantize >&2
# provenance: llama-server --version says "build 0, commit unknown" for a source tarball
echo "llama-cpp-python==$VERSION sdist, $TARGET_DESC $ARCH_FLAGS" > "$root/build/bin/SOURCE"
echo "$bin"
