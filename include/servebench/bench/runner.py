"""A unit's life: check, launch, /health, every cell, the golden set, always stop.

This is the body of one mapped task's unit. Whatever happens, it returns rows
(:mod:`servebench.bench.rows`): a variant that fails to launch becomes failed cells with the
reason; a cell that raises becomes one failed cell; a cell whose responses do not prove matched
sampling becomes an invalid cell (:mod:`servebench.bench.cell`). The server is stopped in every
path (and the teardown task reaps it if this process dies).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable

import httpx

from servebench.bench.cell import CellMeasurer
from servebench.bench.golden import run_golden
from servebench.bench.memory import cell_memory, unit_memory
from servebench.bench.rows import UnitRows, VariantResult
from servebench.bench.slo import search_slo
from servebench.canary import unit_columns as canary_columns
from servebench.config import SweepSpec, TargetSpec, VariantSpec
from servebench.endpoint import Endpoint
from servebench.errors import LaunchError
from servebench.evals.runner import EvalOutcome, run_golden_set
from servebench.loadgen.engine import run_load_sync
from servebench.loadgen.modes import LOAD_MODES
from servebench.loadgen.result import LoadResult
from servebench.metrics import Slo
from servebench.plan import unit_id
from servebench.provision.interface import Provisioner
from servebench.settings import Settings
from servebench.stacks import get_stack
from servebench.stacks.adapter import StackAdapter
from servebench.tokenizer import (
    FileTokenizer,
    ServerTokenizer,
    Tokenizer,
    local_tokenizer_file,
    tokenizer_problem,
)
from servebench.workloads import PromptItem, build_prompts, draw_prompt_seed

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request drowns the log

EXIT_GRACE_S = 2.0  # a server unreachable from its own tokenizer: how long to wait for its exit


def _first(text: str) -> str:
    """How a server ended, and the first error its log raised, without the log tail (which
    stays in the task log)."""
    return text.splitlines()[0].removesuffix("; log tail:")


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
        try_number: int = 1,
        prompt_seed: int | None = None,
        requests: dict[str, int] | None = None,
        only_cells: set[tuple[str, str]] | None = None,
        golden: bool = True,
        adapter: StackAdapter | None = None,
        build_prompts: Callable[..., list[PromptItem]] = build_prompts,
        run_load: Callable[..., LoadResult] = run_load_sync,
        run_golden_set: Callable[..., EvalOutcome] = run_golden_set,
    ):
        self.spec, self.target, self.variant = spec, target, variant
        self.run_id, self.settings, self.provisioner = run_id, settings, provisioner
        # the target's stack's adapter unless one is given (a test's, a wrapped one)
        self.adapter: StackAdapter = adapter or get_stack(target.stack)
        self.rows = UnitRows(spec, target, variant, settings=settings, provisioner=provisioner,
                             adapter=self.adapter, on_cell=on_cell)
        # the run's (the plan drew it); a runner on its own draws one
        prompt_seed = draw_prompt_seed(spec.load.prompt_seed) if prompt_seed is None \
            else prompt_seed
        # the steps a cell and the golden set are made of (``workloads.build_prompts``,
        # ``loadgen.run_load_sync``, ``evals.run_golden_set``): another's can be passed in, to
        # wrap or to replace one (the fault tests kill the server inside one)
        self.cells = CellMeasurer(
            self.rows, prompt_seed=prompt_seed,
            repetition=repetition,  # a release gate's: each draws prompts of its own
            try_number=try_number,  # the task's: a retry meets none of the first try's prompts
            requests=requests or {},  # the plan's sized counts (load.auto_requests), by cell id
            build_prompts=build_prompts, run_load=run_load,
            # the sweep's SLOs as the metrics read them: goodput's test, the SLO search's verdict
            slo=Slo(spec.slos.ttft_ms, spec.slos.tpot_ms, spec.slos.e2e_ms))
        self._run_golden_set = run_golden_set
        # a re-measurement's (bench.confirm): only these (workload, load point label) cells,
        # and no golden set (its answers are tonight's: accuracy is not what it asks)
        self.only_cells, self.golden = only_cells, golden

    @property
    def result(self) -> VariantResult:
        return self.rows.result

    def run(self) -> VariantResult:
        rows = self.rows
        rows.engine_version = self.provisioner.engine_version(self.adapter)
        problems = [*self.provisioner.check(self.target, self.variant, self.adapter,
                                            self.settings),
                    *self.provisioner.refusals(self.target, self.variant, self.adapter,
                                               self.settings)]
        if problems:
            rows.failed_cells("; ".join(problems), None)
            return self.result
        name = unit_id(self.target.name, self.variant.name)
        unit = self.result.unit
        # the host's own speed before the server starts and after it stops (servebench.canary)
        canary_before = self.provisioner.canary()
        unit.update(unit_id=name, target=self.target.name, variant=self.variant.name,
                    provision=self.target.provision_kind,
                    started_at=dt.datetime.now(dt.UTC))
        t0 = time.monotonic()
        try:
            endpoint = self.provisioner.launch(name, self.target, self.variant, self.adapter)
        except Exception as exc:  # launch failure is data: every cell records why
            log.exception("launch of %s failed", name)
            unit.update(load_s=time.monotonic() - t0, ended_at=dt.datetime.now(dt.UTC))
            unit.update(canary_columns(canary_before, self.provisioner.canary()))
            rows.failed_cells(f"launch failed: {exc}",
                              exc.argv if isinstance(exc, LaunchError) else None)
            return self.result
        unit.update(load_s=time.monotonic() - t0,
                    host=self.provisioner.placement(endpoint)["host"])
        rows.endpoint = endpoint
        rows.engine_version = self.provisioner.engine_version(self.adapter, endpoint)
        try:
            self._run_on(endpoint)
        finally:
            try:  # what it held, asked while it still runs (bench.memory)
                unit.update(unit_memory(self.provisioner, self.adapter, endpoint,
                                        self.variant, self.settings))
            finally:
                t_stop = time.monotonic()
                self.provisioner.stop(endpoint)
                unit.update(stop_s=time.monotonic() - t_stop, ended_at=dt.datetime.now(dt.UTC))
                unit.update(canary_columns(canary_before, self.provisioner.canary()))
        for row in self.result.cells:
            row.update(cell_memory(unit))
        return self.result

    def _server_died(self) -> str | None:
        """How the variant's server ended, if it has and its provisioner can tell."""
        endpoint = self.rows.endpoint
        return self.provisioner.exited(endpoint) if endpoint is not None else None

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
        checkpoint's on this worker (``servebench.tokenizer``; the plan checked it is here)."""
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
            self.rows.without_quality(f"the server had died: {_first(died)}")
            return
        if not self.golden:
            return
        t_golden = time.monotonic()
        try:
            run_golden(self.rows, endpoint, self._run_golden_set)
        finally:
            self.result.unit["golden_s"] = time.monotonic() - t_golden
        died = self._server_died()
        if died:  # the answers it could not give are not the variant's accuracy
            for row in self.result.cells:
                row.update(accuracy=None, golden_set=None)
            self.rows.without_quality(f"the server died during the golden set: {_first(died)}")

    def _measure(self, endpoint: Endpoint) -> None:
        """Every cell of the variant: its workloads at each load point."""
        rows, cells = self.rows, self.cells
        try:
            tokenizer = self._tokenizer(endpoint)
        except Exception as exc:  # every cell records why; the traceback stays in the log
            log.exception("no tokenizer for %s", self.variant.name)
            rows.failed_cells(self._build_failure(exc), endpoint.argv)
            tokenizer = None
        for workload in self.spec.workloads_for(self.target.name) if tokenizer else []:
            for point in self.spec.load.points_for(workload):
                if self.only_cells is not None and \
                        (workload.name, point.label) not in self.only_cells:
                    continue
                died = self._server_died()
                if died:  # nothing more can be measured on a dead port
                    rows.failed_cell(workload.name, point, endpoint.argv,
                                     f"the server had died: {_first(died)}")
                    continue
                if LOAD_MODES[point.mode].searched:
                    try:
                        rows.keep(*search_slo(cells, endpoint, workload, point, tokenizer))
                    except Exception as exc:  # one broken cell must not lose the others
                        log.exception("SLO search %s/%s failed", self.variant.name,
                                      workload.name)
                        rows.failed_cell(workload.name, point, endpoint.argv,
                                         f"{type(exc).__name__}: {exc}")
                    continue
                try:
                    prompts = cells.prompts(workload, point, tokenizer)
                except Exception as exc:  # this cell records why; the log keeps the rest
                    log.exception("workload %s could not be built for %s", workload.name,
                                  self.variant.name)
                    rows.failed_cell(workload.name, point, endpoint.argv,
                                     self._build_failure(exc))
                    continue
                try:
                    rows.keep(*cells.measure(endpoint, workload.name, point, prompts))
                except Exception as exc:  # one broken cell must not lose the others
                    log.exception("cell %s/%s/%s failed", self.variant.name, workload.name,
                                  point.label)
                    rows.failed_cell(workload.name, point, endpoint.argv,
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
