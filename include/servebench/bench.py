"""Benchmark one target variant: launch, warm up, every cell, the golden set, always stop.

This is the body of one mapped task. Whatever happens, it returns rows: a variant that fails
to launch becomes failed cells with the reason; a cell that raises becomes one failed cell;
a cell whose responses do not prove matched sampling becomes an invalid cell. The server is
stopped in every path (and the teardown task reaps it if this process dies).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from servebench.capacity import Probe, search_max_load
from servebench.config import (
    LoadPoint,
    LoadPoints,
    SweepSpec,
    TargetSpec,
    VariantSpec,
    Workload,
)
from servebench.cost import cost_fields
from servebench.endpoint import Endpoint
from servebench.errors import LaunchError
from servebench.evals.runner import EvalOutcome, run_golden_set
from servebench.loadgen.engine import LoadSpec, run_load_sync
from servebench.loadgen.result import LoadResult
from servebench.metrics import (
    Slo,
    ValidityChecks,
    client_saturated_reason,
    compute_cell_metrics,
    expected_prefix_cache_share,
    prefix_cache_reuse_reason,
    slo_misses,
    timing_unresolved_reason,
)
from servebench.plan import unit_id
from servebench.provenance import file_sha256, measuring_code
from servebench.provision.interface import Provisioner
from servebench.settings import Settings
from servebench.stacks import get_stack
from servebench.stacks.adapter import StackAdapter
from servebench.telemetry import (
    GaugeSampler,
    cell_prefix_cache_hit_rate,
    deltas,
    engine_telemetry,
    scrape,
)
from servebench.tokenize import (
    FileTokenizer,
    ServerTokenizer,
    Tokenizer,
    local_tokenizer_file,
    tokenizer_problem,
)
from servebench.workloads import PromptItem, build_prompts, draw_prompt_seed, prompt_key

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request drowns the log

# a cell whose client fell this far behind its own schedule measured the client, not the server


@dataclass
class VariantResult:
    """Rows for the ``cells``, ``requests`` and ``evals`` tables from one variant."""

    cells: list[dict] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    unit: dict = field(default_factory=dict)  # the ``units`` row: where, phase times


@dataclass
class CellPrompts:
    """A cell's own prompts: its warm-up's (drawn apart, so they warm none of the measured
    ones), its measured ones, and how to draw an ``auto`` re-run's (``rebuild(k)``)."""

    warmup: list[PromptItem]
    measured: list[PromptItem]
    rebuild: Callable[[int], list[PromptItem]]


EXIT_GRACE_S = 2.0  # a server unreachable from its own tokenizer: how long to wait for its exit


def _first(text: str) -> str:
    return text.splitlines()[0]  # the log tail stays in the task log


def load_spec_for(point: LoadPoint, load: LoadPoints,
                  items: Sequence[PromptItem] = ()) -> LoadSpec:
    """How the load generator drives ``point`` of the sweep's ``load`` section (a trace's:
    at its measured ``items``' own arrival times)."""
    if point.mode == "trace":
        return LoadSpec.trace([item.arrival_s for item in items],
                              max_concurrency=point.concurrency)
    if point.mode == "closed":
        return LoadSpec.closed(point.concurrency)
    if point.mode == "max":
        return LoadSpec.max_throughput(point.concurrency)
    return LoadSpec.open(point.request_rate, arrival=load.arrival, burstiness=load.burstiness,
                         seed=load.seed, max_concurrency=point.concurrency)


def length_control(exact: bool) -> str:
    """A cell's ``length_control``: ``exact`` (every answer as long as the workload asked) or
    ``natural`` (answers end where the model ends them, capped at that length: a stack that
    cannot force lengths). Natural cells are compared only with their own history."""
    return "exact" if exact else "natural"


def cell_identity(spec: SweepSpec, target: TargetSpec, variant: VariantSpec, workload: str,
                  point: LoadPoint) -> dict:
    """The cells columns that say which cell a row is -- the same for a measured cell, one that
    failed on the host and one whose bench task left nothing (``pipeline``)."""
    return {
        "cell_id": cell_id(target.name, variant.name, workload, point),
        "target": target.name, "stack": target.stack, "variant": variant.name,
        "model": variant.model, "quant": variant.quant,
        "workload": workload, "load_point": point.label, "load_mode": point.mode,
        "concurrency": point.concurrency, "request_rate": point.request_rate,
        "arrival": spec.load.arrival if point.mode == "open" else None,
        "sampling_hash": spec.sampling.spec_hash(),
        "price_per_hour": target.price_per_hour(spec.price_per_hour),
    }


def cell_id(target: str, variant: str, workload: str, point: LoadPoint) -> str:
    return f"{target}/{variant}/{workload}/{point.label}"


def failed_cell(row: dict, reason: str) -> dict:
    """A cell row that measured nothing: its identity (``cell_identity`` and what else is
    known), failed, with why. Every failed cell is made here."""
    return {**row, "status": "failed", "reason": reason}


class VariantRunner:
    """Runs every cell of one (target, variant) against a freshly launched server."""

    def __init__(
        self,
        spec: SweepSpec,
        target: TargetSpec,
        variant: VariantSpec,
        *,
        run_id: str,
        settings: Settings,
        provisioner: Provisioner,
        on_cell: Callable[[dict], None] | None = None,
        repetition: int = 0,
        prompt_seed: int | None = None,
        adapter: StackAdapter | None = None,
        build_prompts: Callable[..., list[PromptItem]] = build_prompts,
        run_load: Callable[..., LoadResult] = run_load_sync,
        run_golden_set: Callable[..., EvalOutcome] = run_golden_set,
    ):
        self.spec, self.target, self.variant = spec, target, variant
        self.on_cell = on_cell  # told of each cell row as it is made (progress bars)
        self.repetition = repetition  # a release gate's: each draws prompts of its own
        # the run's (the plan drew it); a runner on its own draws one
        self.prompt_seed = draw_prompt_seed(spec.load.prompt_seed) if prompt_seed is None \
            else prompt_seed
        self.run_id, self.settings, self.provisioner = run_id, settings, provisioner
        # the target's stack's adapter unless one is given (a test's, a wrapped one)
        self.adapter: StackAdapter = adapter or get_stack(target.stack)
        # the steps a cell and the golden set are made of (``workloads.build_prompts``,
        # ``loadgen.run_load_sync``, ``evals.run_golden_set``): another's can be passed in, to
        # wrap or to replace one (the fault tests kill the server inside one)
        self._build_prompts, self._run_load, self._run_golden_set = \
            build_prompts, run_load, run_golden_set
        self.hardware = provisioner.hardware(target)
        # the sweep's SLOs as the metrics read them: goodput's test, the SLO search's verdict
        self._slo = Slo(spec.slos.ttft_ms, spec.slos.tpot_ms, spec.slos.e2e_ms)
        self._price_per_hour = provisioner.price_per_hour(target, spec.price_per_hour)
        self.result = VariantResult()
        self._endpoint: Endpoint | None = None  # the variant's server, while it is measured

    # -- rows -------------------------------------------------------------------------------
    def _base_row(self, workload: str, point: LoadPoint, argv: list[str] | None) -> dict:
        model_path = self.settings.resolve(self.variant.model)
        return {
            **cell_identity(self.spec, self.target, self.variant, workload, point),
            "price_per_hour": self._price_per_hour,  # the host's it ran on
            "engine": self.adapter.engine,
            "engine_version": self._engine_version,
            "engine_notes": self._engine_notes(),
            "launch_args": json.dumps(argv) if argv else None,
            **(self.provisioner.placement(self._endpoint) if self._endpoint is not None
               else {}),
            "model_file_sha256": file_sha256(model_path),
            "measuring_code": measuring_code(type(self.adapter), type(self.provisioner)),
            "hardware": self.hardware,
        }

    def _failed_cells(self, reason: str, argv: list[str] | None) -> None:
        for workload in self.spec.workloads:
            for point in self.spec.load.points_for(workload):
                self._failed_cell(workload.name, point, argv, reason)

    def _failed_cell(self, workload: str, point: LoadPoint, argv: list[str] | None,
                     reason: str) -> None:
        self._add_cell(failed_cell(self._base_row(workload, point, argv), reason))

    # -- run --------------------------------------------------------------------------------
    def run(self) -> VariantResult:
        self._engine_version = self.provisioner.engine_version(self.adapter)
        problems = self.provisioner.check(self.target, self.variant, self.adapter, self.settings)
        if problems:
            self._failed_cells("; ".join(problems), None)
            return self.result
        name = unit_id(self.target.name, self.variant.name)
        unit = self.result.unit
        unit.update(unit_id=name, target=self.target.name, variant=self.variant.name,
                    provision=self.target.provision_kind,
                    started_at=dt.datetime.now(dt.UTC))
        t0 = time.monotonic()
        try:
            endpoint = self.provisioner.launch(name, self.target, self.variant, self.adapter)
        except Exception as exc:  # launch failure is data: every cell records why
            log.exception("launch of %s failed", name)
            unit.update(load_s=time.monotonic() - t0, ended_at=dt.datetime.now(dt.UTC))
            self._failed_cells(f"launch failed: {exc}",
                               exc.argv if isinstance(exc, LaunchError) else None)
            return self.result
        unit.update(load_s=time.monotonic() - t0,
                    host=self.provisioner.placement(endpoint)["host"])
        self._endpoint = endpoint
        self._engine_version = self.provisioner.engine_version(self.adapter, endpoint)
        try:
            self._run_on(endpoint)
        finally:
            t_stop = time.monotonic()
            self.provisioner.stop(endpoint)
            unit.update(stop_s=time.monotonic() - t_stop, ended_at=dt.datetime.now(dt.UTC))
        return self.result

    def _add_cell(self, row: dict) -> None:
        self.result.cells.append(row)
        if self.on_cell is not None:
            self.on_cell(row)

    def _engine_notes(self) -> str | None:
        """What the cells' numbers cannot show about the engine: the stack's known limits,
        and a version outside the releases its adapter was checked against."""
        notes = self.adapter.known_limits(self.variant, self.spec.sampling)
        outside = self.adapter.version_problem(self._engine_version)
        if outside:
            notes.append(outside)
        return "; ".join(notes) or None

    def _server_died(self) -> str | None:
        """How the variant's server ended, if it has and its provisioner can tell."""
        return self.provisioner.exited(self._endpoint) if self._endpoint is not None else None

    def _build_failure(self, exc: Exception) -> str:
        """Why a workload could not be built: the server's death when it died under the build
        (its tokenizer is the server's: the error is only a reset connection), else ``exc``."""
        died = self._server_died()
        deadline = time.monotonic() + EXIT_GRACE_S
        # the server's socket closes as it dies, a moment before it can be reaped
        while died is None and isinstance(exc, httpx.TransportError) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
            died = self._server_died()
        return f"the server had died: {_first(died)}" if died else f"workload build failed: {exc}"

    def _tokenizer(self, endpoint: Endpoint) -> Tokenizer:
        """The server's own tokenizer where the stack has one (the ground truth), else the
        checkpoint's on this worker (``servebench.tokenize``; the plan checked it is here)."""
        if self.adapter.tokenize_api is not None:
            return ServerTokenizer(endpoint.base_url, self.adapter.tokenize_api,
                                   model=endpoint.served_model, headers=endpoint.headers)
        source = self.variant.tokenizer or self.variant.model
        path = local_tokenizer_file(source, self.settings.project_root, self.variant.revision)
        if path is None:
            raise ValueError(tokenizer_problem(self.target.stack, None, source,
                                               self.settings.project_root,
                                               self.variant.revision))
        return FileTokenizer(path)

    def _run_on(self, endpoint: Endpoint) -> None:
        t0 = time.monotonic()
        try:
            self._measure(endpoint)
        finally:
            measured = sum(c.get("duration_s") or 0.0 for c in self.result.cells)
            self.result.unit.update(measure_s=measured,
                                    warmup_s=max(0.0, time.monotonic() - t0 - measured))
        died = self._server_died()
        if died:
            self._without_quality(f"the server had died: {_first(died)}")
            return
        t_golden = time.monotonic()
        try:
            self._run_golden(endpoint)
        finally:
            self.result.unit["golden_s"] = time.monotonic() - t_golden
        died = self._server_died()
        if died:  # the answers it could not give are not the variant's accuracy
            for row in self.result.cells:
                row.update(accuracy=None, golden_set=None)
            self._without_quality(f"the server died during the golden set: {_first(died)}")

    def _measure(self, endpoint: Endpoint) -> None:
        """Every cell of the variant: its workloads at each load point."""
        try:
            tokenizer = self._tokenizer(endpoint)
        except Exception as exc:  # every cell records why; the traceback stays in the log
            log.exception("no tokenizer for %s", self.variant.name)
            self._failed_cells(self._build_failure(exc), endpoint.argv)
            tokenizer = None
        for workload in self.spec.workloads if tokenizer else []:
            for point in self.spec.load.points_for(workload):
                died = self._server_died()
                if died:  # nothing more can be measured on a dead port
                    self._failed_cell(workload.name, point, endpoint.argv,
                                      f"the server had died: {_first(died)}")
                    continue
                if point.mode == "slo":
                    try:
                        self._search_slo(endpoint, workload, point, tokenizer)
                    except Exception as exc:  # one broken cell must not lose the others
                        log.exception("SLO search %s/%s failed", self.variant.name,
                                      workload.name)
                        self._failed_cell(workload.name, point, endpoint.argv,
                                          f"{type(exc).__name__}: {exc}")
                    continue
                try:
                    cell = self._cell_prompts(workload, point, tokenizer)
                except Exception as exc:  # this cell records why; the log keeps the rest
                    log.exception("workload %s could not be built for %s", workload.name,
                                  self.variant.name)
                    self._failed_cell(workload.name, point, endpoint.argv,
                                      self._build_failure(exc))
                    continue
                try:
                    self._run_cell(endpoint, workload.name, point, cell)
                except Exception as exc:  # one broken cell must not lose the others
                    log.exception("cell %s/%s/%s failed", self.variant.name, workload.name,
                                  point.label)
                    self._failed_cell(workload.name, point, endpoint.argv,
                                      f"{type(exc).__name__}: {exc}")
                    continue
                died = self._server_died()
                if died:  # it died under this cell: say so, whatever the requests showed
                    row = self.result.cells[-1]
                    row.update(status="failed" if not row.get("n_ok") else "invalid",
                               reason="; ".join(filter(None, [
                                   f"the server died during the cell: {_first(died)}",
                                   row.get("reason")])))
                    log.error("server of %s died: %s", self.variant.name, died)

    def _cell_prompts(self, workload: Workload, point: LoadPoint,
                      tokenizer: Tokenizer) -> CellPrompts:
        """The cell's own prompts (``workloads.prompt_key``): its warm-up's, its measured
        ones', and a builder for an ``auto`` re-run's."""
        seed, root = self.spec.sampling.seed, self.settings.project_root  # seed: the lengths'

        def build(rerun: int) -> list[PromptItem]:
            key = prompt_key(self.prompt_seed, workload.name, point.label,
                             repetition=self.repetition, rerun=rerun)
            return self._build_prompts(workload, tokenizer, seed, root, key=key,
                                       max_model_len=self.variant.max_model_len)

        warmup = self.spec.load.warmup_requests
        warm = self._build_prompts(workload, tokenizer, seed, root, count=warmup, key=prompt_key(
            self.prompt_seed, workload.name, point.label, repetition=self.repetition,
            warmup=True), max_model_len=self.variant.max_model_len) if warmup else []
        return CellPrompts(warm, build(0), build)

    def _run_cell(self, endpoint: Endpoint, workload_name: str, point: LoadPoint,
                  prompts: CellPrompts) -> None:
        self._keep(*self._measure_cell(endpoint, workload_name, point, prompts))

    def _keep(self, row: dict, requests: list[dict]) -> None:
        self._add_cell(row)
        self.result.requests.extend(requests)

    def _measure_cell(self, endpoint: Endpoint, workload_name: str, point: LoadPoint,
                      prompts: CellPrompts, *, cid: str | None = None
                      ) -> tuple[dict, list[dict]]:
        """One cell measured: its row and its requests' rows (``cid``: the cell id they
        carry, where it is not the point's own: an SLO search's probes)."""
        warmup = len(prompts.warmup)
        exact = self.adapter.forces_length(self.variant)

        def bodies(items: list[PromptItem]) -> list[dict]:
            return [
                {**self.adapter.chat_body(
                    served_model=endpoint.served_model, messages=p.messages,
                    sampling=self.spec.sampling, max_tokens=p.output_tokens, force_length=exact,
                    variant=self.variant,
                ), **self.variant.request_overrides}
                for p in items
            ]

        sent = {"rerun": 0, "items": prompts.warmup + prompts.measured}

        def rerun_bodies(rerun: int) -> list[dict]:  # a re-run measures prompts of its own
            sent.update(rerun=rerun, items=prompts.warmup + prompts.rebuild(rerun))
            return bodies(sent["items"])

        cid = cid or cell_id(self.target.name, self.variant.name, workload_name, point)
        load_spec = load_spec_for(point, self.spec.load, prompts.measured)
        before = scrape(endpoint.base_url, endpoint.metrics_path, headers=endpoint.headers)
        # the scheduler's gauges only where the engine has some
        sampler = GaugeSampler(endpoint.base_url, endpoint.metrics_path
                               if self.adapter.engine_gauges.gauges() else None,
                               headers=endpoint.headers)
        with sampler:
            load = self._run_load(
                endpoint.base_url, endpoint.chat_path, bodies(sent["items"]), load_spec,
                warmup=warmup, cell_id=cid, timeout_s=self.spec.load.request_timeout_s,
                headers=endpoint.headers,
                prompt_tokens_requested=[p.input_tokens for p in sent["items"]],
                processes=self.spec.load.client_processes, rerun_bodies=rerun_bodies,
            )
        items = sent["items"]
        for processes, send_lag, loop_lag in load.scale_attempts:
            log.info("cell %s: re-run with more client processes: %d lagged (send lag p99 "
                     "%.1f ms, event-loop lag p95 %.1f ms)", cid, processes, send_lag, loop_lag)
        after = scrape(endpoint.base_url, endpoint.metrics_path, headers=endpoint.headers)
        server_delta = deltas(before, after)
        # what the workload asked for, not what the body said: an override that changed the
        # length must show up as a mismatch, not move the goalposts
        for item, rec in zip(items, load.all_records(), strict=True):
            rec.output_tokens_requested = item.output_tokens
        cell = compute_cell_metrics(
            load.records,
            (load.window_start, load.window_end),
            slo=self._slo,
            checks=ValidityChecks(
                exact_output_length=exact,
                max_error_rate=self.spec.load.max_error_rate,
                expected_model=endpoint.served_model,
                prompt_abs_tolerance=max(p.template_slack for p in items),
                # usage vs streamed chunks only where every forced token streams as text
                chunk_rel_tolerance=0.1 if self.adapter.forced_tokens_stream_as_text else None,
            ),
        )
        # the prompts' validity: the cache the server used is the one the workload implies
        hit_rate = cell_prefix_cache_hit_rate(
            server_delta, self.adapter.prefix_cache_counters, load.all_records())
        expected_share = expected_prefix_cache_share(
            [(rec.prompt_tokens, item.input_tokens, item.shared_tokens)
             for item, rec in zip(items, load.all_records(), strict=True) if rec.ok])
        # the measurement's own validity (metrics.py): the client kept up, timing was observed
        reasons = [*cell.invalid_reasons, *filter(None, [
            client_saturated_reason(load.send_lag.p99_ms, load.loop_lag.p95_ms),
            timing_unresolved_reason(load.records),
            prefix_cache_reuse_reason(hit_rate, expected_share)])]
        row = self._base_row(workload_name, point, endpoint.argv)
        if hit_rate is None:  # said in the cell: its prompts' reuse could not be judged
            row["engine_notes"] = "; ".join(filter(None, [
                row["engine_notes"], "no prefix-cache hit rate reported: prompt reuse unchecked"]))
        # every metric is a column (a new one the schema lacks fails the run loudly, in
        # rows_to_table); validity is carried by status and reason, set below
        row.update({k: v for k, v in cell.as_row().items()
                    if k not in ("valid", "invalid_reasons")})
        failed = cell.n_ok == 0
        row.update(
            status="failed" if failed else ("invalid" if reasons else "ok"),
            reason="; ".join(reasons) or None,
            output_tokens_requested=items[-1].output_tokens,
            length_control=length_control(exact),
            prompt_key=prompt_key(self.prompt_seed, workload_name, point.label,
                                  repetition=self.repetition, rerun=sent["rerun"]),
            prefix_cache_hit_rate=hit_rate,
            prefix_cache_expected=expected_share,
            client_send_lag_ms_p99=load.send_lag.p99_ms,  # the two statistics the
            client_loop_lag_ms_p95=load.loop_lag.p95_ms,  # client_saturated rule reads
            client_loop_lag_ms_p99=load.loop_lag.p99_ms,
            server_metrics_json=json.dumps(server_delta) if server_delta else None,
            **engine_telemetry(self.adapter.engine_gauges, sampler, server_delta,
                               (load.window_start, load.window_end)),
        )
        row["output_tokens_total"] = sum(r.output_tokens or 0 for r in load.records if r.ok)
        row.update(self._cost(row))
        log.info("cell %s (%s): %s ttft p50 %.1f ms, %.0f tok/s %s", cid, point.label,
                 row["status"], row.get("ttft_ms_p50") or math.nan,
                 row.get("output_throughput") or math.nan, row["reason"] or "")
        return row, [rec.to_row() for rec in load.all_records()]

    def _search_slo(self, endpoint: Endpoint, workload: Workload, point: LoadPoint,
                    tokenizer: Tokenizer) -> None:
        """The ``slo`` cell: the highest load within the sweep's SLOs (``capacity``), each
        probe a cell of the workload's requests with prompts of its own (its own prompt key:
        no probe meets a cache another warmed). The row kept is the highest probe that held
        (else the first), with the bracket and every probe; only its requests are kept."""
        search = self.spec.load.slo_search
        max_errors = self.spec.load.max_error_rate
        cid = cell_id(self.target.name, self.variant.name, workload.name, point)
        measured: dict[float, tuple[dict, list[dict]]] = {}

        def probe(load: float) -> Probe:
            at = (LoadPoint(label=f"slo@r{load:g}", mode="open", request_rate=load,
                            concurrency=point.concurrency) if search.over == "rate" else
                  LoadPoint(label=f"slo@c{int(load)}", mode="closed", concurrency=int(load)))
            row, requests = self._measure_cell(
                endpoint, workload.name, at, self._cell_prompts(workload, at, tokenizer),
                cid=cid)
            measured[load] = (row, requests)
            misses = slo_misses(row, self._slo, max_errors)
            if row["status"] == "ok":
                return Probe(load, not misses, "; ".join(misses) or None)
            if (row.get("error_rate") or 0) > max_errors:  # overload: requests failed
                return Probe(load, False, "; ".join(misses))
            return Probe(load, False, f"{row['status']}: {row['reason']}", by_slo=False)

        result = search_max_load(search, probe)
        best, bound = result.best, result.bound
        row, requests = measured[(best or result.probes[0]).load]
        row = {**row, "load_point": point.label, "load_mode": point.mode,
               "slo_search_over": search.over,
               "max_load_within_slo": best.load if best else 0.0,
               "max_load_failed_at": bound.load if bound else None,
               "slo_probes_json": json.dumps([
                   {"load": p.load, "held": p.held, "why": p.why} for p in result.probes])}
        if bound is not None and not bound.by_slo and row["status"] == "ok":
            row.update(status="invalid", reason=(
                f"slo_search: the probe at {bound.load:g} could not be judged ({bound.why})"))
        log.info("cell %s: max load within SLO %s (%s), %d probes", cid,
                 row["max_load_within_slo"], f"missed at {bound.load:g}" if bound else
                 "high held", len(result.probes))
        self._keep(row, requests)

    def _run_golden(self, endpoint: Endpoint) -> None:
        outcomes: list[EvalOutcome] = []
        for index, name in enumerate(self.target.golden_sets):
            ref = self.spec.golden_set(name)
            try:
                outcome = self._run_golden_set(
                    ref, adapter=self.adapter, endpoint=endpoint,
                    sampling=self.spec.sampling, variant=self.variant, settings=self.settings,
                    cell_prefix=unit_id(self.target.name, self.variant.name),
                )
            except Exception as exc:  # the perf rows stay, but cannot count as comparable
                log.exception("golden set %s failed on %s", name, self.variant.name)
                failure = f"golden set {name} failed: {type(exc).__name__}: {exc}"
                if index == 0:  # the headline quality number
                    self._without_quality(failure)
                # every one is kept with the unit (a later set's too: no cell carries it)
                unit = self.result.unit
                unit["golden_failures"] = "; ".join(filter(None, [unit.get("golden_failures"),
                                                                   failure]))
                continue
            outcomes.append(outcome)
            for item in outcome.rows:
                item.update(target=self.target.name, stack=self.target.stack,
                            variant=self.variant.name)
                self.result.evals.append(item)
        if outcomes:
            accuracy = outcomes[0].accuracy  # the first golden set is the headline number
            for row in self.result.cells:
                row.update(accuracy=accuracy, golden_set=outcomes[0].name)
                if row.get("n_ok") is not None:  # wrong answers are not successes
                    row.update(self._cost(row))

    def _without_quality(self, reason: str) -> None:
        """Every perf number travels with a quality number: without one a cell is invalid."""
        for row in self.result.cells:
            if row.get("status") == "ok":
                row.update(status="invalid", reason=f"no quality number: {reason}")

    def _cost(self, row: dict) -> dict:
        return cost_fields(price_per_hour=self._price_per_hour,
                           duration_s=row["duration_s"],
                           output_tokens=row["output_tokens_total"], n_ok=row["n_ok"],
                           accuracy=row.get("accuracy"))
