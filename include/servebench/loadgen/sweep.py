"""Find the highest request rate (or concurrency) that still meets the SLOs.

:func:`find_max_load` is mode-agnostic: it calls ``run_point(value) -> LoadResult`` (the caller
builds the load: ``LoadSpec.open(rate=value, ...)`` or ``LoadSpec.closed(int(value))``) and
judges each point with ``meets(result)`` — by default :func:`slo_check`. It grows the value
geometrically from ``start`` until a point fails (or ``max_value``), then bisects between the last
passing and the first failing value until they are within ``rel_tol``. A point whose client was
saturated is never counted as passing (it measured the client). Every evaluated point is kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from servebench.loadgen.result import LoadResult
from servebench.metrics import Slo, compute_cell_metrics


@dataclass
class SweepPoint:
    value: float
    passed: bool
    why: str
    result: LoadResult | None = None


@dataclass
class SweepResult:
    """``best``: highest passing value (``None`` if even ``start`` failed); ``points`` in
    evaluation order."""

    best: float | None
    points: list[SweepPoint] = field(default_factory=list)


def slo_check(slo: Slo, *, min_good_fraction: float = 0.9, max_error_rate: float = 0.0,
              ) -> Callable[[LoadResult], tuple[bool, str]]:
    """A ``meets`` judge: goodput/request-throughput >= ``min_good_fraction`` (DistServe
    attainment), error rate <= ``max_error_rate``, and the client not saturated."""

    def meets(res: LoadResult) -> tuple[bool, str]:
        if res.client_saturated:
            return False, "client_saturated: " + ", ".join(res.client_lag_reasons())
        m = compute_cell_metrics(res.records, (res.window_start, res.window_end), slo=slo)
        if m.n_requests == 0:
            return False, "no requests"
        if m.error_rate > max_error_rate:
            return False, f"error rate {m.error_rate:.3f}"
        frac = m.goodput / m.request_throughput if m.request_throughput else 0.0
        if not frac >= min_good_fraction:
            return False, f"SLO attainment {frac:.3f} < {min_good_fraction}"
        return True, f"SLO attainment {frac:.3f}"

    return meets


def find_max_load(run_point: Callable[[float], LoadResult],
                  meets: Callable[[LoadResult], tuple[bool, str]], *, start: float,
                  max_value: float = math.inf, growth: float = 2.0, rel_tol: float = 0.1,
                  integer: bool = False, max_points: int = 12, keep_results: bool = False,
                  ) -> SweepResult:
    """Search the highest ``value`` for which ``meets(run_point(value))`` passes.

    ``integer=True`` for concurrency (values rounded, search stops at adjacent integers).
    """
    if start <= 0 or growth <= 1:
        raise ValueError("start must be > 0 and growth > 1")
    out = SweepResult(best=None)

    def probe(v: float) -> bool:
        v = float(round(v)) if integer else v
        res = run_point(v)
        ok, why = meets(res)
        out.points.append(SweepPoint(v, ok, why, res if keep_results else None))
        if ok and (out.best is None or v > out.best):
            out.best = v
        return ok

    lo, hi = None, None
    v = min(start, max_value)
    while len(out.points) < max_points:
        if probe(v):
            lo = v
            if v >= max_value:
                return out
            v = min(v * growth, max_value)
        else:
            hi = v
            break
    if hi is None or lo is None:
        return out  # never failed within max_points, or even the start failed
    while len(out.points) < max_points:
        if integer and hi - lo <= 1:
            break
        if not integer and (hi - lo) <= rel_tol * lo:
            break
        mid = (lo + hi) / 2
        if integer:
            mid = float(math.floor(mid))
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return out
