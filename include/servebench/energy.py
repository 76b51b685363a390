"""Energy per token where the hardware counts it: a host's cumulative energy counters, read
on a thread while a cell runs and taken at the start and end of its measured window.

Two counters, each labelled with what it counts:

- **GPU** (:class:`NvmlCounter`): each NVIDIA GPU's total energy since its driver loaded
  (NVML's ``nvmlDeviceGetTotalEnergyConsumption``, millijoules; Volta and later), summed over
  the host's GPUs. ``nvidia-smi`` has no query field for it, so NVML's own Python binding
  (``nvidia-ml-py``) reads it.
- **CPU packages** (:class:`RaplCounter`): Intel RAPL's package domains under
  ``/sys/class/powercap`` (``intel-rapl:N/energy_uj``, microjoules, wrapping at
  ``max_energy_range_uj``; AMD's RAPL is exposed there too), the whole sockets: the server,
  the load generator and whatever else the host runs, which is why its cells say so.

A provisioned host's counter is read on the host itself: the EC2 launch script starts a
sampler beside the container that reads NVML every ``SAMPLE_INTERVAL_S`` into a log, and the
provisioner fetches the readings around each cell's window over SSM
(``provision.ec2.script``; :class:`LoggedReadings`).

Elsewhere a cell's energy is *not measured*, with why, never zero. A counter's value moves in
steps (RAPL about every millisecond, NVML every few tens of ms); the sampler reads it every
``SAMPLE_INTERVAL_S`` and interpolates the two readings around each end of the window, so a
window of a few seconds is known to within a fraction of one interval's energy.

Imports nothing of servebench but its sampler thread (``servebench.sampling``):
provisioners and the bench step both use it.
"""

from __future__ import annotations

import logging
import math
import time
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servebench.sampling import Periodic

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 0.1
POWERCAP = Path("/sys/class/powercap")
# the cells columns a cell's energy fills (None where nothing counted it)
ENERGY_COLUMNS = ("energy_j", "energy_j_per_output_token", "energy_j_per_request")


class EnergyReadings(ABC):
    """One cell's readings of a counter: entered around the cell, then asked for the joules
    between two epoch times inside it."""

    source: str  # what counted them, as a cell's ``energy_source`` says it

    def __enter__(self) -> EnergyReadings:
        return self

    def __exit__(self, *exc) -> None:
        return None

    @abstractmethod
    def joules(self, start: float, end: float) -> float | None:
        """The energy counted between epoch times ``start`` and ``end`` (None: the readings
        do not reach both)."""


class EnergySource(ABC):
    """What a provisioner hands a cell: a host's energy counter, wherever it is read."""

    # what the counter counts, as a cell's ``energy_source`` says it
    source: str

    @abstractmethod
    def readings(self) -> EnergyReadings:
        """A cell's readings (fresh for each cell)."""


class EnergyCounter(EnergySource):
    """A cumulative energy counter this process reads, one value per domain (a GPU, a CPU
    package); its readings are :class:`EnergySampler`'s."""

    def readings(self) -> EnergyReadings:
        return EnergySampler(self)

    @abstractmethod
    def read(self) -> tuple[float, ...]:
        """Each domain's counter, in joules (it may wrap: ``wrap_j``)."""

    def wrap_j(self) -> tuple[float | None, ...]:
        """Each domain's counter range, where it wraps back to zero (None: it does not)."""
        return (None,) * len(self.read())


class RaplCounter(EnergyCounter):
    """The package domains of ``root`` (``/sys/class/powercap``): ``intel-rapl:N`` (no
    sub-domain ``:N:M``: a package's core and uncore are inside its own count)."""

    def __init__(self, domains: list[Path]):
        self.domains = domains
        names = ", ".join(d.name for d in domains)
        self.source = (f"CPU packages (RAPL, {names}): the whole sockets, load generator and "
                       "the host's other work included")

    @classmethod
    def find(cls, root: Path = POWERCAP) -> tuple[RaplCounter | None, str]:
        """The host's package counter, or None and why there is none."""
        domains = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
        if not domains:
            return None, f"no RAPL package domain under {root}"
        counter = cls(domains)
        try:
            counter.read()
        except PermissionError:
            return None, (f"RAPL under {root} is readable by root only (energy_uj, since "
                          "Linux 5.10)")
        except (OSError, ValueError) as exc:
            return None, f"RAPL under {root} could not be read: {exc}"
        return counter, counter.source

    def read(self) -> tuple[float, ...]:
        return tuple(int((d / "energy_uj").read_text()) / 1e6 for d in self.domains)

    def wrap_j(self) -> tuple[float | None, ...]:
        out = []
        for d in self.domains:
            try:
                out.append(int((d / "max_energy_range_uj").read_text()) / 1e6)
            except (OSError, ValueError):
                out.append(None)
        return tuple(out)


class NvmlCounter(EnergyCounter):
    """Every NVIDIA GPU of the host, through NVML (``nvidia-ml-py``)."""

    def __init__(self, nvml, handles: list, names: list[str]):
        self._nvml, self._handles = nvml, handles
        shown = ", ".join(f"{n} x{names.count(n)}" if names.count(n) > 1 else n
                          for n in dict.fromkeys(names))
        self.source = (f"GPUs (NVML total energy consumption, {len(handles)}: {shown}), "
                       "the host's every GPU")

    @classmethod
    def find(cls) -> tuple[NvmlCounter | None, str]:
        """The host's GPUs' counter, or None and why there is none."""
        import pynvml

        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return None, f"no NVIDIA GPU energy counter (NVML: {exc})"
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                       for i in range(pynvml.nvmlDeviceGetCount())]
            if not handles:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
            names = [pynvml.nvmlDeviceGetName(h) for h in handles]
            counter = cls(pynvml, handles, [n.decode() if isinstance(n, bytes) else n
                                            for n in names])
            # before Volta: NVML_ERROR_NOT_SUPPORTED
            [pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles]
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            return None, f"no NVIDIA GPU energy counter (NVML: {exc})"
        return counter, counter.source

    def read(self) -> tuple[float, ...]:
        try:
            return tuple(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3
                         for h in self._handles)
        except self._nvml.NVMLError as exc:  # read as any counter's failed read
            raise OSError(f"NVML: {exc}") from exc


def host_counter(powercap: Path = POWERCAP) -> tuple[EnergyCounter | None, str]:
    """This host's counter -- its GPUs' where it has any, else its CPU packages' -- or None
    and why neither counts (the reasons of both)."""
    gpu, why_gpu = NvmlCounter.find()
    if gpu is not None:
        return gpu, gpu.source
    cpu, why_cpu = RaplCounter.find(powercap)
    if cpu is not None:
        return cpu, cpu.source
    return None, f"{why_gpu}; {why_cpu}"


@dataclass(frozen=True)
class EnergyWindow:
    """Joules over a window, and what counted them."""

    joules: float
    source: str


def interpolated(times: list[float], totals: list[float], t: float) -> float | None:
    """The cumulative total at epoch time ``t``, linear between the readings around it (None:
    outside them); ``times`` ascending."""
    i = bisect_left(times, t)
    if i < len(times) and times[i] == t:
        return totals[i]
    if i == 0 or i == len(times):
        return None  # outside what was read
    t0, t1 = times[i - 1], times[i]
    e0, e1 = totals[i - 1], totals[i]
    return e0 + (e1 - e0) * (t - t0) / (t1 - t0)


def window_joules(times: list[float], totals: list[float], start: float,
                  end: float) -> float | None:
    """The energy between ``start`` and ``end`` from cumulative readings (None: they do not
    reach both, or nothing was measured)."""
    if not (math.isfinite(start) and math.isfinite(end)):
        return None
    a, b = interpolated(times, totals, start), interpolated(times, totals, end)
    return None if a is None or b is None else max(b - a, 0.0)


class EnergySampler(Periodic, EnergyReadings):
    """Reads ``counter`` every ``interval_s`` on a thread between ``start`` and ``stop`` (a
    context manager), each domain unwrapped, keeping the total with the epoch time it was
    read, and once more as it stops; :meth:`joules` is the energy between two times inside
    what it read."""

    def __init__(self, counter: EnergyCounter, *, interval_s: float = SAMPLE_INTERVAL_S):
        super().__init__(interval_s, "energy-sampler")
        self.counter = counter
        self.source = counter.source
        self.times: list[float] = []
        self.totals: list[float] = []
        self.errors = 0
        self._wraps = counter.wrap_j()
        self._last: tuple[float, ...] | None = None
        self._offsets = [0.0] * len(self._wraps)

    def stop(self, timeout_s: float = 10.0) -> None:
        super().stop(timeout_s)
        self.sample()  # the last reading, after every request

    def sample(self) -> None:
        try:
            values = self.counter.read()
        except (OSError, ValueError) as exc:  # a missed reading: the next one bridges it
            self.errors += 1
            log.debug("energy counter read failed: %s", exc)
            return
        at = time.time()
        if self._last is not None:
            for i, (now, before) in enumerate(zip(values, self._last, strict=True)):
                if now < before:  # the counter wrapped (or, without a range, was reset)
                    self._offsets[i] += self._wraps[i] if self._wraps[i] else before
        self._last = values
        self.times.append(at)
        self.totals.append(sum(values) + sum(self._offsets))

    def joules(self, start: float, end: float) -> float | None:
        return window_joules(self.times, self.totals, start, end)


FETCH_TRIES, FETCH_WAIT_S = 3, 0.5  # a log asked for its readings right after the window


class LoggedReadings(EnergyReadings):
    """A counter read on another host into a log of ``<epoch s> <cumulative J>`` lines:
    ``fetch(start, end)`` returns the log's lines around both ends of a window (the EC2
    provisioner's, over SSM), asked once the cell is done."""

    def __init__(self, source: str, fetch: Callable[[float, float], str | None]):
        self.source, self._fetch = source, fetch

    def joules(self, start: float, end: float) -> float | None:
        if not (math.isfinite(start) and math.isfinite(end)):
            return None
        for attempt in range(FETCH_TRIES):
            times, totals = parse_log(self._fetch(start, end) or "")
            # asked the moment the cell ended, the log may not yet hold a reading after it
            if (times and times[-1] >= end) or attempt == FETCH_TRIES - 1:
                break
            time.sleep(FETCH_WAIT_S)
        joules = window_joules(times, totals, start, end)
        if joules is None:
            log.warning("energy: the readings fetched (%d, %s) do not span the window %.3f-%.3f",
                        len(times), f"{times[0]:.3f}-{times[-1]:.3f}" if times else "none",
                        start, end)
        return joules


def parse_log(text: str) -> tuple[list[float], list[float]]:
    """(times, totals) of a readings log's ``<epoch s> <cumulative J>`` lines, in time
    order; other lines (its header) are skipped."""
    pairs = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2:
            try:
                pairs.append((float(fields[0]), float(fields[1])))
            except ValueError:
                continue
    pairs.sort()
    return [t for t, _ in pairs], [e for _, e in pairs]


def energy_columns(window: EnergyWindow | None, why: str, *, output_tokens: int,
                   requests: int) -> dict:
    """A cell's energy columns: joules over its measured window, per output token and per
    successful request, and ``energy_source`` -- what counted them, or why nothing did."""
    if window is None:
        return {**dict.fromkeys(ENERGY_COLUMNS), "energy_source": f"not measured: {why}"}
    return {"energy_j": window.joules,
            "energy_j_per_output_token": window.joules / output_tokens if output_tokens else None,
            "energy_j_per_request": window.joules / requests if requests else None,
            "energy_source": window.source}
