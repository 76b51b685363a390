"""The load a workload is measured under: its load points (closed loop, open loop, max
throughput, a trace's own arrivals) and the SLO search, each point one cell."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servebench.config.base import _Strict
from servebench.config.workloads import TraceWorkload, Workload
from servebench.loadgen.modes import CLOSED, MAX, OPEN, SLO, SWEEP_MODES, TRACE


class SloSearch(_Strict):
    """The highest load at which the sweep's ``slos`` hold at p95 (TTFT, TPOT, E2E where
    given) with no more errors than ``load.max_error_rate``: one ``slo`` cell per workload,
    found by probes (each a short cell of the workload's requests with prompts of its own):
    ``low`` first, then doubling until a probe misses or ``high`` holds, then bisecting the
    bracket, at most ``max_probes`` in all. Its row is the highest probe that held, with the
    bracket (``max_load_within_slo`` .. ``max_load_failed_at``) and every probe."""

    over: Literal["rate", "concurrency"] = Field(
        "rate", description="open-loop request rate (req/s) or closed-loop concurrency")
    low: float = Field(gt=0, description="the first probe: a load the SLOs should hold at")
    high: float = Field(gt=0, description="the most the search probes")
    max_probes: int = Field(6, ge=2, le=20)
    precision: float = Field(
        0.1, gt=0, lt=1, description="a rate bracket this narrow (relative) ends the search; "
                                     "a concurrency one ends at adjacent integers")

    @model_validator(mode="after")
    def _bracket(self) -> SloSearch:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high:g}) must be above low ({self.low:g})")
        if self.over == "concurrency" and not (self.low.is_integer() and self.high.is_integer()):
            raise ValueError("a concurrency search needs whole low and high")
        return self


class AutoRequests(_Strict):
    """Opt-in: each cell's measured request count sized from its own series, so that it
    catches the sweep's ``trends.detect_at_least`` (``servebench.trends.sizing``). The plan
    reads the sweep's newest judged night: a cell series that misses its goal and whose noise
    more requests would bring down gets the count that reaches it, the cheapest first, as long
    as the seconds the counts add stay within ``budget_s``; a cell without such a night, one
    whose launch-to-launch noise alone keeps it above its goal, a trace, a multi-turn
    workload and an SLO search keep the workload's own count, which is also the least any
    cell is given."""

    budget_s: float = Field(
        gt=0, description="the seconds of measurement the sized counts may add to a night, "
                          "over the workloads' own counts (each cell's seconds per request "
                          "as its last night measured them)")
    max_factor: float = Field(
        8.0, ge=1, description="a cell's count at most this many times its workload's own")


class LoadPoint(BaseModel):
    """One load point of a workload, i.e. one cell: closed loop at a concurrency, open loop at
    a request rate, max throughput (every request at once), a trace's own arrivals, or the
    SLO search's (``slo``): its ``mode``, one of the vocabulary's sweep kinds
    (:mod:`servebench.loadgen.modes`), says what it is. ``label`` names it in cell ids
    (``c4``, ``r20``, ``max``, ``trace``, ``slo``)."""

    model_config = ConfigDict(frozen=True)

    label: str
    mode: str
    concurrency: int | None = None  # closed: workers; open, max: cap on requests in flight
    request_rate: float | None = None  # open: requests/s

    @field_validator("mode")
    @classmethod
    def _a_sweep_kind(cls, mode: str) -> str:
        if mode not in SWEEP_MODES:
            raise ValueError(f"mode must be one of {SWEEP_MODES}, got {mode!r}")
        return mode


class LoadPoints(_Strict):
    """Load points, each one cell per workload: closed-loop concurrencies, open-loop rates
    (arrivals from a seeded Poisson, gamma or constant process) and max throughput; warm-up
    excluded."""

    concurrency: list[Annotated[int, Field(gt=0)]] = Field(default_factory=list)
    rates: list[Annotated[float, Field(gt=0)]] = Field(
        default_factory=list, description="open-loop request rates, requests/s")
    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    burstiness: float = Field(1.0, gt=0, description="gamma shape; 1 = Poisson")
    max_throughput: bool = Field(
        False, description="a `max` point: every request sent at once (capped by "
                           "max_concurrency), for the server's ceiling in tok/s")
    max_concurrency: int | None = Field(None, gt=0,
                                        description="in-flight cap of open-loop and max points")
    seed: int = 0
    prompt_seed: int | None = Field(
        None, ge=0, description="seed of the prompts' text (each cell's prompt_key adds its "
        "identity and the measuring task's try, so a retry meets none of its first try's "
        "prompts); default: one drawn per run, so no run meets prompts a server that outlives "
        "runs (static, a pod, an instance) has cached; set a run's (runs.prompt_seed) to "
        "reproduce it")
    warmup_requests: int = Field(2, ge=0, description="per cell, sent first, not measured")
    request_timeout_s: float = Field(120.0, gt=0, description="a request past it fails")
    max_error_rate: float = Field(
        0.0, ge=0, lt=1,
        description="share of measured requests that may fail in a cell that stays comparable "
                    "(default: none)")
    slo_search: SloSearch | None = Field(
        None, description="an `slo` point per workload: the most load within the sweep's slos")
    auto_requests: AutoRequests | None = Field(
        None, description="size each cell's request count from its series' noise to catch "
                          "trends.detect_at_least within a per-night time budget (default: "
                          "every cell sends its workload's num_requests)")
    client_processes: int | Literal["auto"] = Field(
        1, description="load-generator processes per cell; auto: one, doubled while the cell "
                       "is client_saturated (up to the CPU count), the re-runs logged")

    @model_validator(mode="after")
    def _some_point(self) -> LoadPoints:
        if isinstance(self.client_processes, int) and self.client_processes < 1:
            raise ValueError("client_processes must be >= 1 or 'auto'")
        return self

    def points(self) -> list[LoadPoint]:
        closed = [LoadPoint(label=f"c{c}", mode=CLOSED, concurrency=c) for c in self.concurrency]
        opened = [LoadPoint(label=f"r{r:g}", mode=OPEN, concurrency=self.max_concurrency,
                            request_rate=r) for r in self.rates]
        ceiling = [LoadPoint(label="max", mode=MAX, concurrency=self.max_concurrency)
                   ] if self.max_throughput else []
        slo = [LoadPoint(label="slo", mode=SLO, concurrency=self.max_concurrency)
               ] if self.slo_search else []
        return closed + opened + ceiling + slo

    def points_for(self, workload: Workload) -> list[LoadPoint]:
        """A workload's load points: a trace's own arrivals (one ``trace`` point, capped by
        ``max_concurrency``), else the sweep's."""
        if isinstance(workload, TraceWorkload):
            return [LoadPoint(label="trace", mode=TRACE, concurrency=self.max_concurrency)]
        return self.points()
