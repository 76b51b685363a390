"""Provenance stamped on every row: hardware, suite git sha, model file hashes."""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from servebench.settings import PROJECT_ROOT

log = logging.getLogger(__name__)


@lru_cache(maxsize=64)
def file_sha256(path: Path) -> str | None:
    """sha256 of a model file; of a checkpoint folder, over its weight and config files."""
    path = Path(path)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(
            p for p in path.iterdir()
            if p.suffix in {".safetensors", ".bin", ".json", ".gguf", ".model"}
        )
    else:
        return None
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


# CPU features that pick llama.cpp's (and torch's) CPU kernels: two hosts that differ in any
# of these run different code, so their numbers are not comparable.
ISA_FLAGS = (
    "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "sve", "i8mm",
)


def cpu_isa(cpuinfo: str) -> list[str]:
    """The ISA_FLAGS present in a /proc/cpuinfo text (x86 ``flags``, Arm ``Features``)."""
    present: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in {"flags", "Features"}:
            present.update(value.split())
    return [flag for flag in ISA_FLAGS if flag in present]


def _cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


@lru_cache(maxsize=1)
def hardware() -> str:
    """GPU name/count/driver from nvidia-smi where present, else the CPU model and cores;
    always followed by the CPU's kernel-relevant ISA features, e.g.
    ``Intel(R) Xeon(R) Platinum 8488C x2 cores (no GPU); isa avx2 ... amx_int8``."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    isa = "isa " + (" ".join(cpu_isa(cpuinfo)) or "unknown")
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=True,
            ).stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError):
            log.warning("nvidia-smi failed; recording the CPU only", exc_info=True)
            out = []
        if out:
            name, driver = (part.strip() for part in out[0].split(",")[:2])
            return f"{len(out)}x {name} (driver {driver}); {isa}"
    return f"{_cpu_model(cpuinfo)} x{os.cpu_count()} cores (no GPU); {isa}"


@lru_cache(maxsize=1)
def suite_git_sha() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
