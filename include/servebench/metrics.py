"""The canonical metric computations of servebench -- one set, from a cell's raw request
records (warm-up excluded): per-request TTFT, TPOT, ITL and E2E and their statistics in ms,
throughput and goodput over the measured window, errors, and why a cell is not valid
(its requests, its client's lag, its prompts' cache reuse, its SLOs for a load search). What
each metric means: docs/load-and-metrics.md#metric-definitions and #when-a-cell-is-ok; what
each stored metric is (label, direction, views): ``servebench.metric_catalogue``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from servebench.records import RequestRecord

PERCENTILES = (50, 90, 95, 99)
NAN = math.nan


@dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objectives in milliseconds; ``None`` = not checked."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None


@dataclass(frozen=True, slots=True)
class ValidityChecks:
    """Which validity checks to run and their tolerances (see module docstring).

    A tolerance set to ``None`` disables that check.
    """

    exact_output_length: bool = False
    expected_model: str | None = None
    max_error_rate: float = 0.0
    chunk_rel_tolerance: float | None = 0.1
    chunk_abs_tolerance: int = 1
    prompt_rel_tolerance: float | None = 0.1
    prompt_abs_tolerance: int = 32


@dataclass(frozen=True)
class CellMetrics:
    """Aggregate metrics of one cell. Latencies in ms, throughputs per second of window."""

    cell_id: str | None
    n_requests: int
    n_ok: int
    n_errors: int
    error_rate: float
    window_start: float
    window_end: float
    duration_s: float
    request_throughput: float
    output_throughput: float
    total_throughput: float
    goodput: float
    n_good: int
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    slo_e2e_ms: float | None
    output_tokens_mean: float
    prompt_tokens_mean: float
    ttft_ms_mean: float
    ttft_ms_p50: float
    ttft_ms_p90: float
    ttft_ms_p95: float
    ttft_ms_p99: float
    tpot_ms_mean: float
    tpot_ms_p50: float
    tpot_ms_p90: float
    tpot_ms_p95: float
    tpot_ms_p99: float
    itl_ms_mean: float
    itl_ms_p50: float
    itl_ms_p90: float
    itl_ms_p95: float
    itl_ms_p99: float
    e2e_ms_mean: float
    e2e_ms_p50: float
    e2e_ms_p90: float
    e2e_ms_p95: float
    e2e_ms_p99: float
    invalid_reasons: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """True when no validity check failed."""
        return not self.invalid_reasons

    def as_row(self) -> dict[str, Any]:
        """Flat dict for a Parquet row (``invalid_reasons`` stays a list), plus ``valid``."""
        row = asdict(self)
        row["valid"] = self.valid
        return row


def summarize_ms(values_s: Sequence[float], name: str) -> dict[str, float]:
    """``{name_mean, name_p50, name_p90, name_p95, name_p99}`` in ms from values in seconds."""
    if len(values_s) == 0:
        return {f"{name}_mean": NAN, **{f"{name}_p{p}": NAN for p in PERCENTILES}}
    a = np.asarray(values_s, dtype=float) * 1000.0
    ps = np.percentile(a, PERCENTILES)  # linear interpolation (numpy default)
    return {f"{name}_mean": float(a.mean()), **{f"{name}_p{p}": float(v) for p, v in zip(PERCENTILES, ps)}}


def out_tokens(r: RequestRecord) -> int:
    """Server-reported output tokens, else the client's chunk token count."""
    return r.output_tokens if r.output_tokens is not None else sum(r.chunk_tokens)


def ttft_s(r: RequestRecord) -> float | None:
    """Per-request TTFT in seconds (sent -> first chunk of generated text); None without one."""
    return None if r.first_chunk_at is None else r.first_chunk_at - r.sent_at


def e2e_s(r: RequestRecord) -> float:
    """Per-request end-to-end latency in seconds (sent -> last byte)."""
    return r.done_at - r.sent_at


def tpot_s(r: RequestRecord) -> float | None:
    """Per-request TPOT in seconds, or None when undefined (no TTFT, output_tokens <= 1)."""
    n = out_tokens(r)
    if r.first_chunk_at is None or n <= 1:
        return None
    return (r.done_at - r.first_chunk_at) / (n - 1)


def _meets(r: RequestRecord, slo: Slo) -> bool:
    """True if a successful request meets every set SLO."""
    if slo.ttft_ms is not None:
        ttft = ttft_s(r)
        if ttft is None or ttft * 1000.0 > slo.ttft_ms:
            return False
    if slo.tpot_ms is not None:
        tpot = tpot_s(r)
        if tpot is not None and tpot * 1000.0 > slo.tpot_ms:
            return False
    if slo.e2e_ms is not None and e2e_s(r) * 1000.0 > slo.e2e_ms:
        return False
    return True


def _example(bad: list[str], n: int, what: str) -> str:
    return f"{len(bad)}/{n} successful requests: {what} (e.g. {bad[0]})"


def validity_reasons(records: Sequence[RequestRecord], checks: ValidityChecks) -> list[str]:
    """Reasons the successful ``records`` are not comparable; empty if none (see module doc)."""
    ok = [r for r in records if r.ok]
    n = len(ok)
    reasons: list[str] = []
    no_text = [r.request_id for r in ok if r.first_chunk_at is None]
    if no_text:
        reasons.append(_example(no_text, n, "no generated text"))
    no_usage = [r.request_id for r in ok if r.output_tokens is None]
    if no_usage:
        reasons.append(_example(no_usage, n, "server usage missing, token counts unverified "
                                "(set stream_options.include_usage)"))
    if checks.exact_output_length:
        bad = [f"{r.request_id}: {r.output_tokens} vs {r.output_tokens_requested}" for r in ok
               if r.output_tokens is not None and r.output_tokens_requested is not None
               and r.output_tokens != r.output_tokens_requested]
        if bad:
            reasons.append(_example(bad, n, "server output_tokens != requested exact length"))
    if checks.chunk_rel_tolerance is not None:
        bad = []
        for r in ok:
            if r.output_tokens is None:
                continue
            client = sum(r.chunk_tokens)
            tol = max(checks.chunk_abs_tolerance, checks.chunk_rel_tolerance * r.output_tokens)
            if abs(r.output_tokens - client) > tol:
                bad.append(f"{r.request_id}: usage {r.output_tokens} vs {client} in chunks")
        if bad:
            reasons.append(_example(bad, n, "server output_tokens vs client chunk count beyond tolerance"))
    if checks.prompt_rel_tolerance is not None:
        bad = []
        for r in ok:
            if r.prompt_tokens is None or r.prompt_tokens_requested is None:
                continue
            tol = max(checks.prompt_abs_tolerance, checks.prompt_rel_tolerance * r.prompt_tokens_requested)
            if abs(r.prompt_tokens - r.prompt_tokens_requested) > tol:
                bad.append(f"{r.request_id}: {r.prompt_tokens} vs {r.prompt_tokens_requested}")
        if bad:
            reasons.append(_example(bad, n, "server prompt_tokens vs requested beyond tolerance"))
    if checks.expected_model is not None:
        seen = Counter(r.served_model for r in ok if r.served_model != checks.expected_model)
        if seen:
            name, k = seen.most_common(1)[0]
            reasons.append(f"{sum(seen.values())}/{n} successful requests: served model {name!r} "
                           f"(x{k}) != expected {checks.expected_model!r}")
    return reasons


def compute_cell_metrics(
    records: Sequence[RequestRecord],
    window: tuple[float, float] | None = None,
    *,
    slo: Slo | None = None,
    checks: ValidityChecks | None = None,
) -> CellMetrics:
    """Canonical metrics of one cell (definitions in the module docstring).

    Args:
        records: the cell's records; ``warmup=True`` ones are ignored.
        window: measured window ``(start, end)``, epoch seconds; default first ``sent_at`` to
            last ``done_at`` of the non-warm-up records.
        slo: SLOs for goodput (default: none set).
        checks: validity checks (default: :class:`ValidityChecks` defaults).

    Never raises on empty or all-failed input: metrics are NaN and ``invalid_reasons`` says why.
    """
    slo = slo or Slo()
    checks = checks or ValidityChecks()
    recs = [r for r in records if not r.warmup]
    ok = [r for r in recs if r.ok]
    n, n_ok = len(recs), len(ok)
    reasons: list[str] = []
    if window is None:
        start = min((r.sent_at for r in recs), default=NAN)
        end = max((r.done_at for r in recs), default=NAN)
    else:
        start, end = window
    duration = end - start
    if n == 0:
        reasons.append("no measured requests")
    elif n_ok == 0 or (n - n_ok) / n > checks.max_error_rate:
        failed = [r for r in recs if not r.ok]
        err, k = Counter((r.error or f"HTTP {r.http_status}") for r in failed).most_common(1)[0]
        if n_ok == 0:
            reasons.append(f"all {n} requests failed; most common error ({k}x): {err}")
        else:
            reasons.append(f"{n - n_ok}/{n} requests failed (error rate {(n - n_ok) / n:.3f} > "
                           f"{checks.max_error_rate:g} allowed); most common error ({k}x): {err}")
    reasons += validity_reasons(recs, checks)
    if n and not duration > 0:
        reasons.append(f"measured window is empty or invalid (duration_s={duration})")

    ttft = [t for r in ok if (t := ttft_s(r)) is not None]
    tpot = [t for t in map(tpot_s, ok) if t is not None]
    itl = np.concatenate([np.diff(r.chunk_times) for r in ok if len(r.chunk_times) > 1] or [np.empty(0)])
    e2e = [e2e_s(r) for r in ok]
    out_tok = [out_tokens(r) for r in ok]
    prompt_tok = [r.prompt_tokens if r.prompt_tokens is not None else r.prompt_tokens_requested for r in ok]
    prompt_known = all(p is not None for p in prompt_tok)
    n_good = sum(1 for r in ok if _meets(r, slo))

    def rate(x: float) -> float:
        return x / duration if duration > 0 else NAN

    return CellMetrics(
        cell_id=recs[0].cell_id if recs and all(r.cell_id == recs[0].cell_id for r in recs) else None,
        n_requests=n,
        n_ok=n_ok,
        n_errors=n - n_ok,
        error_rate=(n - n_ok) / n if n else NAN,
        window_start=start,
        window_end=end,
        duration_s=duration,
        request_throughput=rate(n_ok) if n_ok else (0.0 if duration > 0 else NAN),
        output_throughput=rate(sum(out_tok)) if n_ok else (0.0 if duration > 0 else NAN),
        total_throughput=rate(sum(out_tok) + sum(prompt_tok)) if n_ok and prompt_known else (
            0.0 if duration > 0 and not n_ok else NAN),
        goodput=rate(n_good) if n_ok else (0.0 if duration > 0 else NAN),
        n_good=n_good,
        slo_ttft_ms=slo.ttft_ms,
        slo_tpot_ms=slo.tpot_ms,
        slo_e2e_ms=slo.e2e_ms,
        output_tokens_mean=float(np.mean(out_tok)) if out_tok else NAN,
        prompt_tokens_mean=float(np.mean(prompt_tok)) if out_tok and prompt_known else NAN,
        **summarize_ms(ttft, "ttft_ms"),
        **summarize_ms(tpot, "tpot_ms"),
        **summarize_ms(itl, "itl_ms"),
        **summarize_ms(e2e, "e2e_ms"),
        invalid_reasons=reasons,
    )


CLIENT_LAG_BOUND_MS = 50.0  # send lag p99 or event-loop lag p95 beyond this: client-bound


def client_lag_reasons(send_lag_p99_ms: float, loop_lag_p95_ms: float,
                       bound_ms: float = CLIENT_LAG_BOUND_MS) -> list[str]:
    """The ``client_saturated`` rule: which of the two client lags passed the bound (empty:
    the client kept up)."""
    lags = {"send lag p99": send_lag_p99_ms, "event-loop lag p95": loop_lag_p95_ms}
    return [f"{name} {value:.1f} ms" for name, value in lags.items() if value > bound_ms]


def client_saturated_reason(send_lag_p99_ms: float, loop_lag_p95_ms: float,
                            bound_ms: float = CLIENT_LAG_BOUND_MS) -> str | None:
    late = client_lag_reasons(send_lag_p99_ms, loop_lag_p95_ms, bound_ms)
    return f"client_saturated: {', '.join(late)} > {bound_ms:.0f} ms" if late else None


def timing_unresolved_reason(records: Sequence[RequestRecord]) -> str | None:
    """The ``timing_unresolved`` rule over a cell's measured records (None: timing observed)."""
    multi = [r for r in records if r.ok and not r.warmup and len(r.chunk_times) > 1]
    coalesced = sum(1 for r in multi if r.chunk_times[0] == r.chunk_times[-1])
    if multi and coalesced > len(multi) / 2:
        return (f"timing_unresolved: {coalesced}/{len(multi)} responses arrived in a single "
                "read, so per-token timing was not observed")
    return None


# how far above its workload's expected share a cell's measured prefix-cache hit rate may lie:
# a share, plus PREFIX_CACHE_CHANCE_TOKENS a request (prefix_cache_tolerance)
PREFIX_CACHE_TOLERANCE = 0.05
# the opening tokens a fresh prompt may share by chance with one a long-lived server cached:
# its random opening number matches the best of the server's cached prompts for about log10 of
# their count in digits where a digit is a token (llama.cpp's prompt cache keeps every prompt
# and picks the longest match: 2 tokens after BOS on a server that had answered a 200-item
# golden set, 3% of a 33-token prompt each); 4 covers some 10,000 cached prompts
PREFIX_CACHE_CHANCE_TOKENS = 4


def expected_prefix_cache_share(requests: Sequence[tuple[int | None, int, int]]) -> float | None:
    """The share of a cell's prompt tokens a prefix cache may serve, from ``(prompt_tokens,
    content_tokens, shared_tokens)`` per request sent (module docstring); ``prompt_tokens``
    None (no usage): the content alone. None for no requests."""
    servable = total = 0
    for prompt, content, shared in requests:
        prompt = content if prompt is None else prompt
        servable += min(prompt, shared + max(0, prompt - content))
        total += prompt
    return servable / total if total > 0 else None


def prefix_cache_tolerance(prompt_tokens: Sequence[int]) -> float:
    """How far above the expected share a cell's hit rate may lie, from the prompt tokens of
    each request it sent: :data:`PREFIX_CACHE_TOLERANCE` and :data:`PREFIX_CACHE_CHANCE_TOKENS`
    a request (a large share of a short prompt, nothing of a long one)."""
    total = sum(prompt_tokens)
    chance = PREFIX_CACHE_CHANCE_TOKENS * len(prompt_tokens) / total if total > 0 else 0.0
    return PREFIX_CACHE_TOLERANCE + chance


def prefix_cache_reuse_reason(measured: float | None, expected: float | None,
                              tolerance: float = PREFIX_CACHE_TOLERANCE) -> str | None:
    """The ``prefix_cache_reuse`` rule (None: the hit rate is what the workload implies, or
    nothing to judge)."""
    if measured is None or expected is None or measured <= expected + tolerance:
        return None
    return (f"prefix_cache_reuse: hit rate {measured:.2f} > {expected:.2f} the workload implies "
            f"(+{tolerance:.2f} tolerance): the server had cached prompts this cell sent")


def slo_misses(row: dict, slo: Slo, max_error_rate: float) -> list[str]:
    """Which of the SLOs a measured cell row (its ``*_ms_p95`` and ``error_rate``) missed, as
    ``TTFT p95 312 ms > 250``; empty: it held them."""
    misses = []
    for name, column, bound in (("TTFT", "ttft_ms_p95", slo.ttft_ms),
                                ("TPOT", "tpot_ms_p95", slo.tpot_ms),
                                ("E2E", "e2e_ms_p95", slo.e2e_ms)):
        value = row.get(column)
        if bound is None:
            continue
        if value is None or not value <= bound:  # NaN: nothing was served in time
            misses.append(f"{name} p95 {value if value is None else round(value, 1)} ms > "
                          f"{bound:g}")
    rate = row.get("error_rate")
    if rate is not None and rate > max_error_rate:
        misses.append(f"error rate {rate:.3f} > {max_error_rate:g}")
    return misses
