"""Capacity: the highest load a stack serves within the sweep's SLOs, by a bracketing search
over probes (``SloSearch`` in the sweep's ``load``; what "holds" means is
``metrics.slo_misses``).

The search probes ``low``, then doubles the load until a probe misses or ``high`` holds, then
bisects the bracket (geometric midpoint for a rate, integer midpoint for a concurrency) until
it is ``precision`` narrow, adjacent, or ``max_probes`` are spent. The answer is a bracket: the
highest load that held and the lowest above it that did not (None: ``high`` held) -- the true
limit lies between, so the bracket's width is the search's own uncertainty, beside the
night-to-night noise the trends judge. A probe that could not be measured properly (failed,
or invalid for a reason other than the SLOs: a saturated client, wrong lengths) says nothing
about the SLOs: the search ends there, and its bound is marked as not the SLOs' (``by_slo``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from servebench.config import SloSearch


@dataclass(frozen=True)
class Probe:
    load: float
    held: bool  # measured properly and within every SLO
    why: str | None = None  # what it missed, or why it could not be judged
    by_slo: bool = True  # False: it did not hold because it could not be measured


@dataclass
class SearchResult:
    probes: list[Probe] = field(default_factory=list)

    @property
    def best(self) -> Probe | None:
        """The highest probe that held."""
        return max((p for p in self.probes if p.held), key=lambda p: p.load, default=None)

    @property
    def bound(self) -> Probe | None:
        """The lowest probe above the best that did not hold (None: the top held)."""
        floor = self.best.load if self.best else -math.inf
        return min((p for p in self.probes if not p.held and p.load > floor),
                   key=lambda p: p.load, default=None)


def next_load(search: SloSearch, held: float | None, missed: float | None) -> float | None:
    """The next load to probe, or None when the bracket is narrow enough (or ``high`` held)."""
    integer = search.over == "concurrency"
    if held is None:
        return search.low if missed is None else None  # low itself missed: nothing lower
    if missed is None:
        if held >= search.high:
            return None
        return min(search.high, held * 2)
    if integer:
        mid = float((int(held) + int(missed)) // 2)
        return mid if mid > held else None
    if missed / held - 1 <= search.precision:
        return None
    return float(f"{math.sqrt(held * missed):.3g}")  # a readable rate, inside the bracket


def search_max_load(search: SloSearch, probe: Callable[[float], Probe]) -> SearchResult:
    """Probe loads (``probe(load)`` measures one) until the bracket is found, at most
    ``search.max_probes``."""
    result = SearchResult()
    held: float | None = None
    missed: float | None = None
    while len(result.probes) < search.max_probes:
        load = next_load(search, held, missed)
        if load is None or (held is not None and load <= held) or (
                missed is not None and load >= missed):
            break
        outcome = probe(load)
        result.probes.append(outcome)
        if outcome.held:
            held = load
        elif not outcome.by_slo:  # unmeasurable: the SLOs cannot be judged from here on
            break
        else:
            missed = load
    return result
