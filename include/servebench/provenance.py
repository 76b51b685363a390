"""Provenance stamped on every row: hardware, suite git sha, model file hashes."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from servebench.settings import PROJECT_ROOT


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


@lru_cache(maxsize=1)
def hardware() -> str:
    """GPU name/count/driver from nvidia-smi where present, else the CPU model and cores."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=True,
            ).stdout.strip().splitlines()
            if out:
                return f"{len(out)}x {out[0].split(',')[0].strip()} (driver " \
                       f"{out[0].split(',')[1].strip()})"
        except (OSError, subprocess.SubprocessError):
            pass
    cpu = platform.processor() or "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu} x{os.cpu_count()} cores (no GPU)"


@lru_cache(maxsize=1)
def suite_git_sha() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
