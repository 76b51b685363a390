"""The llama.cpp build compiles its AMX tile kernels out on every CPU, AMX hosts included.

ggml-cpu/amx is compiled only when the compiler defines __AMX_INT8__ and __AVX512VNNI__;
scripts/build_llama_cpp.sh adds -mno-amx-* to -march=native. This checks, on any build
machine, that those flags remove AMX from what -march=sapphirerapids (a c7i host's
-march=native) turns on, and keep the AVX-512 VNNI kernels llama.cpp then runs instead.
"""

import re
import shutil
import subprocess

import pytest
from servebench.settings import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "build_llama_cpp.sh"


def _arch_flags() -> list[str]:
    match = re.search(r'^ARCH_FLAGS="([^"]*)"', SCRIPT.read_text(), re.MULTILINE)
    assert match, "ARCH_FLAGS not found in build_llama_cpp.sh"
    return match.group(1).split()


def _macros(compiler: str, *flags: str) -> set[str]:
    out = subprocess.run([compiler, *flags, "-dM", "-E", "-x", "c++", "-"], input="",
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith("#define")}


@pytest.mark.parametrize("compiler", ["g++", "clang++"])
def test_amx_is_compiled_out_on_an_amx_target(compiler):
    if not shutil.which(compiler):
        pytest.skip(f"{compiler} not installed")
    native_spr = _macros(compiler, "-march=sapphirerapids")
    assert {"__AMX_INT8__", "__AMX_TILE__", "__AVX512VNNI__"} <= native_spr
    # the flags win whatever their place on the command line (cmake puts them first)
    for flags in (["-march=sapphirerapids", *_arch_flags()],
                  [*_arch_flags(), "-march=sapphirerapids"]):
        built = _macros(compiler, *flags)
        assert not {"__AMX_INT8__", "__AMX_TILE__", "__AMX_BF16__"} & built, flags
        assert {"__AVX512F__", "__AVX512VNNI__"} <= built, flags


def test_the_build_makes_only_the_binaries_the_project_runs():
    """`cmake --build --target ...` names exactly the llama.cpp programs some code runs from the
    bin folder (`llama_bin / "llama-..."`): a cold build compiles nothing else."""
    build = re.search(r"^cmake --build .*--target ((?:llama-[a-z-]+ ?)+)", SCRIPT.read_text(),
                      re.MULTILINE)
    assert build, "no `cmake --build ... --target` line in build_llama_cpp.sh"
    sources = [*(PROJECT_ROOT / "include").rglob("*.py"), *(PROJECT_ROOT / "scripts").glob("*.py"),
               *(PROJECT_ROOT / "benchmarks").rglob("*.py")]
    run = {name for path in sources
           for name in re.findall(r"llama_bin\(?\)?\s*/\s*\"(llama-[a-z-]+)\"", path.read_text())}
    assert set(build.group(1).split()) == run
