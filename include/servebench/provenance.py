"""Provenance stamped on every row: hardware, the serving host's GPUs, suite git sha, the
suite code a cell ran, model file hashes."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import platform
import re
import shutil
import subprocess
from collections import Counter
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


# what a serving host's GPUs are, asked of nvidia-smi where they are (the worker for local
# targets, the instance for ec2: ``provision.ec2.script.render_script`` runs the same query there)
GPU_QUERY = "name,driver_version,clocks.max.sm,mig.mode.current"
_CUDA = re.compile(r"CUDA Version:\s*([0-9.]+)")


def cuda_version(nvidia_smi_header: str) -> str | None:
    """The CUDA version nvidia-smi's table header names (the driver's, not a toolkit's)."""
    found = _CUDA.search(nvidia_smi_header or "")
    return found.group(1) if found else None


def describe_gpus(rows: list[str], cuda: str | None = None) -> str | None:
    """``1x NVIDIA L4 (driver 550.54.15, CUDA 12.4, max SM 2040 MHz, MIG Disabled)`` from
    ``GPU_QUERY``'s CSV rows; identical GPUs counted, others joined with `` + ``; None
    without a row (no GPU, no nvidia-smi)."""
    parsed = [tuple(p.strip() for p in row.split(",")) for row in rows if row.strip()]
    if not parsed:
        return None
    parts = []
    for fields, count in Counter(parsed).items():
        name, *rest = fields
        facts = [f"{label} {value}" for label, value in zip(
            ("driver", "max SM", "MIG"), rest) if value and value not in ("[N/A]", "N/A")]
        if cuda:
            facts.insert(1 if facts else 0, f"CUDA {cuda}")
        parts.append(f"{count}x {name}" + (f" ({', '.join(facts)})" if facts else ""))
    return " + ".join(parts)


@lru_cache(maxsize=1)
def local_gpus() -> str | None:
    """This machine's GPUs (``describe_gpus``), or None where there are none."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        rows = subprocess.run(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=True
                              ).stdout.splitlines()
        header = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20,
                                check=False).stdout
    except (OSError, subprocess.SubprocessError):
        log.warning("nvidia-smi failed; no GPU facts recorded", exc_info=True)
        return None
    return describe_gpus(rows, cuda_version(header))


# GPU feature discovery's node labels (NVIDIA's gpu-operator / k8s-device-plugin)
def gpus_from_node_labels(labels: dict[str, str]) -> str | None:
    """A Kubernetes node's GPUs from its GPU feature discovery labels (``nvidia.com/
    gpu.product``, ``gpu.count``, the CUDA driver and runtime versions, ``mig.strategy``);
    None on a node without them."""
    product = labels.get("nvidia.com/gpu.product")
    if not product:
        return None

    def version(kind: str) -> str | None:
        full = labels.get(f"nvidia.com/cuda.{kind}-version.full")
        if full:
            return full
        parts = [labels.get(f"nvidia.com/cuda.{kind}.{p}") for p in ("major", "minor", "rev")]
        return ".".join(p for p in parts if p) or None

    facts = [f"driver {d}" for d in [version("driver")] if d]
    facts += [f"CUDA {c}" for c in [version("runtime")] if c]
    mig = labels.get("nvidia.com/mig.strategy")
    if mig:
        facts.append(f"MIG {mig}")
    count = labels.get("nvidia.com/gpu.count", "?")
    return f"{count}x {product}" + (f" ({', '.join(facts)})" if facts else "")


@lru_cache(maxsize=1)
def suite_git_sha() -> str:
    """The suite's commit: the image's (``SERVEBENCH_SUITE_GIT_SHA``, from the build's
    ``SUITE_GIT_SHA``: a container has no ``.git``), else this checkout's HEAD, else
    ``unknown``."""
    from servebench.settings import get_settings

    baked = (get_settings().suite_git_sha or "").strip()
    if baked and baked != "unknown":
        return baked
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# the suite's own code that decides what a cell sends, how it is timed and scored, beside
# the modules of its stack adapter and provisioner classes (measuring_code)
MEASURING_FILES = ("bench/*.py", "endpoint.py", "metrics.py", "telemetry.py", "tokenizer.py",
                   "workloads.py", "traces.py", "capacity.py", "data/*", "loadgen/*.py",
                   "evals/*.py")
_PACKAGE = Path(__file__).resolve().parent


@lru_cache(maxsize=32)
def measuring_code(*classes: type) -> str:
    """What of the suite a cell ran, as JSON ``{"loadgen/client.py": "<sha256[:12]>", ...}``:
    the files that build its prompts, drive and time its load and score its golden set
    (MEASURING_FILES) and the modules of ``classes`` and their bases within the package (its
    stack adapter's, its provisioner's). Read from the installed files, so an image without
    ``.git`` has it too. A suite deploy is a cause of a cell's change only where this moved
    (trends.attribution): a new commit touching the digest or the board runs the same cell."""
    files = {f for pattern in MEASURING_FILES for f in _PACKAGE.glob(pattern)}
    for cls in classes:
        for base in cls.__mro__:
            if base.__module__.split(".")[0] == _PACKAGE.name:
                source = inspect.getsourcefile(base)
                if source:
                    files.add(Path(source).resolve())
    return json.dumps({f.relative_to(_PACKAGE).as_posix():
                       hashlib.sha256(f.read_bytes()).hexdigest()[:12] for f in sorted(files)},
                      sort_keys=True)
