"""The bench task's work: one host's units in turn on its provisioner (a crashed unit kept as
failed cells with its error, units a former try kept not run again), each unit's rows kept as
its scratch for the publish (``servebench.publish``). ``pipeline.bench_host`` is the DAG's
entry to it."""

from __future__ import annotations

import logging
from collections.abc import Callable

from servebench.bench.runner import VariantRunner
from servebench.connections import open_store
from servebench.plan import Plan, Unit
from servebench.provision import Provisioner, get_provisioner
from servebench.provision.interface import host_session
from servebench.publish import keep_unit_rows, unit_failed_cells
from servebench.quantize.make import make_variant
from servebench.results.store import ResultStore
from servebench.settings import Settings, get_settings

log = logging.getLogger(__name__)


def bench_host(plan: Plan | dict, host: str, provisioned: dict | None, run_id: str,
               settings: Settings | None = None, *, dag_id: str = "", try_number: int = 1,
               on_unit: Callable[[Unit], None] | None = None,
               on_unit_done: Callable[[Unit], None] | None = None,
               on_cell: Callable[[dict], None] | None = None) -> dict:
    """The bench task: every unit of ``host`` in turn, on the host's provisioner (a
    ``per_host`` kind's machine acquired before the first and released after the last, in
    every path, or held for the same morning's relaunches where the sweep confirms). A unit
    that crashes keeps failed cells with its error and the next unit runs; units a former
    try of the task kept are not run again, and the others draw prompts of this try's own
    (``try_number``: the task's, from 1; ``workloads.prompt_key``), none a server that
    outlived the former try has cached. ``on_unit``/``on_unit_done``/``on_cell``
    see the units and cells go by (the CLI's progress bars)."""
    settings, plan = settings or get_settings(), Plan.from_xcom(plan)
    store = open_store(settings)
    kept = store.scratch_units(run_id)
    units = plan.units_on(host)
    todo = [u for u in units if u.unit_id not in kept]
    if len(todo) < len(units):  # a recipe that failed to quantize keeps its failed cells too
        log.info("%s: %s kept by a former try or the quantize step", host,
                 [u.unit_id for u in units if u.unit_id in kept])
    summary: dict = {"host": host, "units": {}}
    if not todo:
        return summary
    cls = get_provisioner(todo[0].provision)
    targets = [plan.spec.target(name) for name in dict.fromkeys(u.target for u in todo)]
    state = (provisioned or {}).get("kinds", {}).get(cls.kind)
    with host_session(cls, run_id, state, targets, settings, dag_id=dag_id,
                      hold=plan.spec.trends.holds_hosts) as provisioner:
        for unit in todo:
            if on_unit:
                on_unit(unit)
            try:
                summary["units"][unit.unit_id] = bench_unit(
                    plan, unit, provisioner, run_id, settings, store, on_cell=on_cell,
                    try_number=try_number)
            except Exception as exc:  # noqa: BLE001 -- any crash: kept as the unit's reason
                log.exception("unit %s failed", unit.unit_id)  # with its traceback
                reason = f"the bench task failed: {type(exc).__name__}: {exc}"
                keep_unit_rows(store, plan, unit, run_id,
                               {"cells": unit_failed_cells(plan, unit, run_id, reason)})
                summary["units"][unit.unit_id] = {"failed": reason}
            if on_unit_done:
                on_unit_done(unit)
    return summary


def bench_unit(plan: Plan, unit: Unit, provisioner: Provisioner, run_id: str,
               settings: Settings, store: ResultStore,
               on_cell: Callable[[dict], None] | None = None, try_number: int = 1) -> dict:
    """One unit on its host's ``provisioner`` in the bench task's try ``try_number``, its rows
    kept as the unit's scratch in ``store``. A recipe variant's checkpoint is the quantize
    step's; a worker without it in its cache makes it first. A unit the plan refused keeps
    its failed cells with the plan's reason, nothing launched."""
    if unit.refused:
        cells = unit_failed_cells(plan, unit, run_id, unit.refused)
        keep_unit_rows(store, plan, unit, run_id, {"cells": cells})
        return {"cells": len(cells), "ok": 0, "invalid": 0, "failed": len(cells), "evals": 0}
    variant = plan.variant_of(unit)
    if variant.quantized is not None:
        make_variant(plan.spec, variant, settings)
    result = VariantRunner(plan.spec, plan.target_of(unit), variant,
                           run_id=run_id, settings=settings, provisioner=provisioner,
                           on_cell=on_cell, prompt_seed=plan.prompt_seed,
                           try_number=try_number, requests=plan.requests).run()
    keep_unit_rows(store, plan, unit, run_id,
                   {"cells": result.cells, "requests": result.requests, "evals": result.evals,
                    "units": [result.unit] if result.unit else []})
    statuses = [c["status"] for c in result.cells]
    return {"cells": len(statuses), "ok": statuses.count("ok"),
            "invalid": statuses.count("invalid"), "failed": statuses.count("failed"),
            "evals": len(result.evals)}
