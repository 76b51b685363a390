"""A sampler's thread: ``sample`` called every ``interval_s`` on a daemon thread from ``start``
to ``stop`` (or as a context manager), the first sample at once. The engine's gauges
(``telemetry.GaugeSampler``), a server's memory (``memory.TreeSampler``) and the host's energy
(``energy.EnergySampler``) are each one. Standard library only."""

from __future__ import annotations

import threading
from typing import Self


class Periodic:
    """Calls :meth:`sample` every ``interval_s`` on a thread named ``name``."""

    def __init__(self, interval_s: float, name: str):
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def sample(self) -> None:
        """One sample (a subclass's)."""
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)
