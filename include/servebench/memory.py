"""What a served variant holds in memory: the facts a unit records, and how a server's own
process tree is measured.

Three figures, each with where it came from (or why there is none):

- **weights**: what the engine says its weights take (vLLM's ``Model loading took X GiB``),
  else the model files' size on disk (a GGUF file; a checkpoint folder's ``*.safetensors`` /
  ``*.bin``: :func:`files_bytes`);
- **KV-cache capacity** in tokens, as the engine reports it (each stack adapter's
  ``engine_memory``: vLLM's ``/metrics``, llama.cpp's log and ``/props``);
- **peak memory** of the serving processes from launch to stop (a provisioner's
  ``memory(endpoint)``): on this worker, :class:`TreeSampler` -- the server's process tree
  (its children too: vLLM's engine core and worker are child processes) summed every
  ``SAMPLE_INTERVAL_S``, each process's proportional set size (``Pss`` of
  ``/proc/<pid>/smaps_rollup``: a page shared by the tree's processes -- torch's libraries,
  vLLM's shared-memory queues -- is counted once, not once per process as a sum of RSS would),
  the highest sum kept. A spike shorter than the interval can be missed: the figure is a lower
  bound of the true peak, within the memory one interval's growth can add. On a GPU, the
  device memory ``nvidia-smi`` reports for the tree's processes, sampled the same way.

Imports nothing of servebench but its sampler thread (``servebench.sampling``): provisioners
and stack adapters both use it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servebench.sampling import Periodic

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 0.5
DEVICE_EVERY = 4  # nvidia-smi is asked every 4th sample (it takes ~50 ms a call)
MIB, GIB = 1 << 20, 1 << 30
# the files a checkpoint folder's weights are in (config, tokenizer and the rest are not)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
COMPUTE_APPS = ["nvidia-smi", "--query-compute-apps=pid,used_memory",
                "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class MemorySample:
    """The serving processes' peak memory over a unit (a provisioner's ``memory``): each
    figure with how it was measured, or, where it is None, why."""

    peak_rss_bytes: int | None
    peak_rss_source: str
    peak_device_memory_bytes: int | None = None
    peak_device_memory_source: str = "not measured"

    @classmethod
    def unmeasured(cls, why: str) -> MemorySample:
        return cls(None, why, None, why)


@dataclass(frozen=True)
class EngineMemory:
    """What the engine itself reports of its memory (a stack adapter's ``engine_memory``):
    each figure with where it was read, or, where it is None, why there is none."""

    weights_bytes: int | None = None
    weights_source: str | None = None
    kv_cache_tokens: int | None = None
    kv_cache_source: str | None = None


def files_bytes(path: Path) -> int | None:
    """The weights' size on disk: a file's own size, or the sum of a checkpoint folder's
    weight files (WEIGHT_SUFFIXES, any depth); None where ``path`` is neither (a hub id) or a
    folder holds no weight file."""
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return None
    sizes = [p.stat().st_size for p in path.rglob("*")
             if p.is_file() and p.suffix in WEIGHT_SUFFIXES]
    return sum(sizes) if sizes else None


# -- a process tree on this machine ---------------------------------------------------------
def _parents(proc: Path) -> dict[int, int]:
    """pid -> parent pid of every process in ``proc`` (/proc)."""
    parents = {}
    with os.scandir(proc) as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:  # it ended while we looked
                continue
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            parents[int(entry.name)] = int(stat[stat.rfind(")") + 2:].split()[1])
    return parents


def tree_pids(root: int, proc: Path = Path("/proc")) -> list[int]:
    """``root`` and every descendant of it now running (empty once ``root`` has ended)."""
    parents = _parents(proc)
    if root not in parents:
        return []
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return sorted(found)


def process_bytes(pid: int, proc: Path = Path("/proc")) -> int | None:
    """A process's proportional set size (``Pss`` of smaps_rollup), else its ``VmRSS`` where
    the kernel has no smaps_rollup; None once it has ended."""
    for name, key in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            text = (proc / str(pid) / name).read_text()
        except (FileNotFoundError, ProcessLookupError):
            return None
        except OSError:  # no such file on this kernel, or not ours to read: the next
            continue
        for line in text.splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024  # kB
    return None


def parse_compute_apps(text: str, pids: set[int]) -> int | None:
    """Bytes of device memory ``nvidia-smi --query-compute-apps=pid,used_memory
    --format=csv,noheader,nounits`` (``<pid>, <MiB>`` a line) gives the processes ``pids``;
    None where it lists none of them."""
    used = None
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2 or not fields[0].isdigit() or int(fields[0]) not in pids:
            continue
        try:
            mib = int(fields[1])
        except ValueError:  # "[N/A]" where the driver does not say
            continue
        used = (used or 0) + mib * MIB
    return used


def _compute_apps() -> str | None:
    try:
        out = subprocess.run(COMPUTE_APPS, capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi failed: %s", exc)
        return None
    return out.stdout if out.returncode == 0 else None


class TreeSampler(Periodic):
    """The peak memory of process ``pid`` and its descendants, sampled on a daemon thread
    every ``interval_s`` from ``start`` to ``stop`` (the module doc says what is summed).
    ``device`` asks nvidia-smi where there is one (None: look for it)."""

    def __init__(self, pid: int, *, interval_s: float = SAMPLE_INTERVAL_S,
                 proc: Path = Path("/proc"),
                 device: Callable[[], str | None] | None = None):
        super().__init__(interval_s, f"memory-{pid}")
        self.pid, self.proc = pid, proc
        if device is None and shutil.which("nvidia-smi"):
            device = _compute_apps
        self._device = device
        self.peak_bytes: int | None = None
        self.peak_processes = 0
        self.peak_device_bytes: int | None = None
        self.samples = 0
        self._lock = threading.Lock()

    def sample(self) -> None:
        """One sample: the tree's sum now (and its device memory, every DEVICE_EVERY-th)."""
        pids = tree_pids(self.pid, self.proc)
        sizes = [b for b in (process_bytes(p, self.proc) for p in pids) if b is not None]
        device = None
        if self._device is not None and pids and self.samples % DEVICE_EVERY == 0:
            text = self._device()
            device = parse_compute_apps(text, set(pids)) if text else None
        with self._lock:
            self.samples += 1
            if sizes and sum(sizes) > (self.peak_bytes or 0):
                self.peak_bytes, self.peak_processes = sum(sizes), len(sizes)
            if device is not None and device > (self.peak_device_bytes or 0):
                self.peak_device_bytes = device

    def peak(self) -> MemorySample:
        """The peaks so far, one last sample taken first (the server still runs)."""
        self.sample()
        with self._lock:
            how = (f"the server's process tree (at its peak {self.peak_processes} "
                   f"process(es)), Pss summed every {self.interval_s:g} s from launch, "
                   f"{self.samples} samples")
            rss = (self.peak_bytes, how) if self.peak_bytes is not None else \
                (None, "the server's processes had ended before any sample")
            if self._device is None:
                device = (None, "no GPU on this worker (no nvidia-smi)")
            elif self.peak_device_bytes is None:
                device = (None, "nvidia-smi listed none of the server's processes")
            else:
                device = (self.peak_device_bytes, ("nvidia-smi --query-compute-apps, the "
                          f"server's processes, every {self.interval_s * DEVICE_EVERY:g} s"))
        return MemorySample(rss[0], rss[1], device[0], device[1])

