"""One cell measured: its own prompts, its load, the server's telemetry around it, and the
validity rules (``servebench.metrics``) that make it ``ok``, ``invalid`` or ``failed``."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

from servebench.bench.rows import UnitRows, cell_id, length_control
from servebench.config import LoadPoint, LoadPoints, Workload
from servebench.endpoint import Endpoint
from servebench.energy import EnergyWindow, energy_columns
from servebench.loadgen.engine import LoadSpec
from servebench.loadgen.modes import CLOSED, LOAD_MODES, MAX, SCHEDULE
from servebench.loadgen.result import LoadResult
from servebench.metrics import (
    Slo,
    ValidityChecks,
    client_saturated_reason,
    compute_cell_metrics,
    expected_prefix_cache_share,
    prefix_cache_reuse_reason,
    prefix_cache_tolerance,
    timing_unresolved_reason,
)
from servebench.telemetry import (
    GaugeSampler,
    cell_prefix_cache_hit_rate,
    deltas,
    engine_telemetry,
    scrape,
)
from servebench.tokenizer import Tokenizer
from servebench.workloads import PromptItem, prompt_key

log = logging.getLogger(__name__)


@dataclass
class CellPrompts:
    """A cell's own prompts: its warm-up's (drawn apart, so they warm none of the measured
    ones), its measured ones, and how to draw an ``auto`` re-run's, warm-up first
    (``rebuild(k)``: both its own)."""

    warmup: list[PromptItem]
    measured: list[PromptItem]
    rebuild: Callable[[int], list[PromptItem]]


def load_spec_for(point: LoadPoint, load: LoadPoints,
                  items: Sequence[PromptItem] = ()) -> LoadSpec:
    """How the load generator drives ``point`` of the sweep's ``load`` section (a trace's:
    at its measured ``items``' own arrival times). An ``slo`` point is a search over loads,
    each probe a point of its own (:mod:`.slo`), not a load to run."""
    runs_as = LOAD_MODES[point.mode].runs_as
    if runs_as is None:
        raise ValueError(f"a {point.mode!r} point is a search over loads, not a load to run")
    if runs_as == SCHEDULE:
        return LoadSpec.schedule([item.arrival_s for item in items],
                                 max_concurrency=point.concurrency)
    if runs_as == CLOSED:
        return LoadSpec.closed(point.concurrency)
    if runs_as == MAX:
        return LoadSpec.max_throughput(point.concurrency)
    return LoadSpec.open(point.request_rate, arrival=load.arrival, burstiness=load.burstiness,
                         seed=load.seed, max_concurrency=point.concurrency)


class CellMeasurer:
    """Measures the cells of one unit against its server, with the steps a cell is made of
    (``build_prompts``, ``run_load``: another's can be passed in, to wrap or replace one)."""

    def __init__(self, rows: UnitRows, *, prompt_seed: int, repetition: int, try_number: int,
                 requests: dict[str, int], build_prompts: Callable[..., list[PromptItem]],
                 run_load: Callable[..., LoadResult], slo: Slo):
        self.rows = rows
        self.spec, self.target, self.variant = rows.spec, rows.target, rows.variant
        self.adapter = rows.adapter
        self.prompt_seed, self.repetition = prompt_seed, repetition
        self.try_number = try_number  # the task's: a retry's cells draw prompts of their own
        # cell id -> measured requests, where the plan sized it (load.auto_requests)
        self.requests = requests
        self._build_prompts, self._run_load = build_prompts, run_load
        self.slo = slo  # the sweep's SLOs as the metrics read them: goodput's test

    def prompt_key(self, workload_name: str, point: LoadPoint, *, rerun: int = 0,
                   warmup: bool = False) -> str:
        """The key of a cell's prompts (``workloads.prompt_key``) in this unit's run,
        release-gate repetition and try."""
        return prompt_key(self.prompt_seed, workload_name, point.label,
                          repetition=self.repetition, try_number=self.try_number, rerun=rerun,
                          warmup=warmup)

    def prompts(self, workload: Workload, point: LoadPoint,
                tokenizer: Tokenizer) -> CellPrompts:
        """The cell's own prompts (:meth:`prompt_key`): its warm-up's, its measured
        ones', and a builder for an ``auto`` re-run's."""
        seed, root = self.spec.sampling.seed, self.rows.settings.project_root  # the lengths'
        count = self.requests.get(cell_id(self.target.name, self.variant.name, workload.name,
                                          point))

        def build(rerun: int) -> list[PromptItem]:
            return self._build_prompts(workload, tokenizer, seed, root,
                                       key=self.prompt_key(workload.name, point, rerun=rerun),
                                       count=count, max_model_len=self.variant.max_model_len)

        warmup = self.spec.load.warmup_requests

        def warm(rerun: int) -> list[PromptItem]:
            return self._build_prompts(
                workload, tokenizer, seed, root, count=warmup,
                key=self.prompt_key(workload.name, point, rerun=rerun, warmup=True),
                max_model_len=self.variant.max_model_len) if warmup else []

        # a re-run's warm-up is its own too: the first run's would come back from the cache
        return CellPrompts(warm(0), build(0), lambda rerun: warm(rerun) + build(rerun))

    def measure(self, endpoint: Endpoint, workload_name: str, point: LoadPoint,
                prompts: CellPrompts, *, cid: str | None = None) -> tuple[dict, list[dict]]:
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
            sent.update(rerun=rerun, items=prompts.rebuild(rerun))
            return bodies(sent["items"])

        cid = cid or cell_id(self.target.name, self.variant.name, workload_name, point)
        load_spec = load_spec_for(point, self.spec.load, prompts.measured)
        before = scrape(endpoint.base_url, endpoint.metrics_path, headers=endpoint.headers)
        # the scheduler's gauges only where the engine has some
        sampler = GaugeSampler(endpoint.base_url, endpoint.metrics_path
                               if self.adapter.engine_gauges.gauges() else None,
                               headers=endpoint.headers)
        # the host's energy counter, where its provisioner reads one (servebench.energy)
        counter, energy_why = self.rows.provisioner.energy_counter(endpoint)
        energy = counter.readings() if counter is not None else None
        with sampler, energy or nullcontext():
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
            slo=self.slo,
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
        sent_ok = [(rec.prompt_tokens, item.input_tokens, item.shared_tokens)
                   for item, rec in zip(items, load.all_records(), strict=True) if rec.ok]
        expected_share = expected_prefix_cache_share(sent_ok)
        tolerance = prefix_cache_tolerance([content if prompt is None else prompt
                                            for prompt, content, _ in sent_ok])
        # the measurement's own validity (metrics.py): the client kept up, timing was observed
        reasons = [*cell.invalid_reasons, *filter(None, [
            client_saturated_reason(load.send_lag.p99_ms, load.loop_lag.p95_ms),
            timing_unresolved_reason(load.records),
            prefix_cache_reuse_reason(hit_rate, expected_share, tolerance)])]
        row = self.rows.base_row(workload_name, point, endpoint.argv)
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
            prompt_key=self.prompt_key(workload_name, point, rerun=sent["rerun"]),
            prefix_cache_hit_rate=hit_rate,
            prefix_cache_expected=expected_share,
            client_send_lag_ms_p99=load.send_lag.p99_ms,  # the two statistics the
            client_loop_lag_ms_p95=load.loop_lag.p95_ms,  # client_saturated rule reads
            client_loop_lag_ms_p99=load.loop_lag.p99_ms,
            server_metrics_json=json.dumps(server_delta) if server_delta else None,
            **engine_telemetry(self.adapter.engine_gauges, sampler, server_delta,
                               (load.window_start, load.window_end),
                               speculative=self.variant.speculative is not None),
        )
        row["output_tokens_total"] = sum(r.output_tokens or 0 for r in load.records if r.ok)
        joules = energy.joules(load.window_start, load.window_end) if energy else None
        if energy and joules is None:
            energy_why = "its counter's readings did not span the measured window"
        row.update(energy_columns(
            EnergyWindow(joules, counter.source) if joules is not None else None, energy_why,
            output_tokens=row["output_tokens_total"], requests=cell.n_ok))
        row.update(self.rows.cost(row))
        log.info("cell %s (%s): %s ttft p50 %.1f ms, %.0f tok/s %s", cid, point.label,
                 row["status"], row.get("ttft_ms_p50") or math.nan,
                 row.get("output_throughput") or math.nan, row["reason"] or "")
        return row, [rec.to_row() for rec in load.all_records()]
