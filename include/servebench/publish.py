"""The publish step: a run's units' rows brought together, priced, checked and committed.

Each bench task leaves its unit's rows in the store's scratch area (``UNIT_TABLES``); a unit
that left none becomes failed cells with the reason. The quality gate and the cross-stack
check run here (they need every variant's answers), the hosts the teardown recorded are
priced, the ``runs`` row is written, and the batch must pass the data contract before it is
published.
"""

from __future__ import annotations

import datetime as dt
import logging

import pyarrow as pa

from servebench.bench.rows import cell_identity, failed_cell
from servebench.cost import paid
from servebench.evals.gate import cross_stack_columns, gate_columns
from servebench.plan import Plan, Unit
from servebench.provenance import hardware, suite_git_sha
from servebench.results.contract import enforce, validate_run
from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore, encode_run_id

log = logging.getLogger(__name__)
UNIT_TABLES = ("cells", "requests", "evals", "units")  # what a bench task leaves per unit
TEARDOWN_SCRATCH = "_teardown"  # the teardown task's scratch rows (the hosts it paid for)
NO_RESULTS = "the bench task left no results (it crashed, was killed or timed out)"


def keep_unit_rows(store: ResultStore, plan: Plan, unit: Unit, run_id: str,
                   tables: dict[str, list[dict]]) -> None:
    """A bench task's rows, kept in scratch for the publish (any worker may run it)."""
    for name in UNIT_TABLES:
        rows = [{"run_id": run_id, "run_date": plan.run_date, **row}
                for row in tables.get(name, [])]
        store.write_scratch(run_id, unit.unit_id, name, rows_to_table(name, rows))


def keep_paid_hosts(store: ResultStore, plan: Plan, run_id: str, hosts: list[dict]) -> None:
    """The teardown's record of the hosts the run paid for by the hour (priced at publish)."""
    rows = [{"run_id": run_id, "run_date": plan.run_date, **host} for host in hosts]
    store.write_scratch(run_id, TEARDOWN_SCRATCH, "hosts", rows_to_table("hosts", rows))


def publish_run(store: ResultStore, plan: Plan, run_id: str, *, dag_id: str,
                logical_date: dt.datetime | None = None,
                started_at: dt.datetime | None = None, times: dict | None = None,
                nightly: bool = True) -> dict:
    """Collect every unit's rows, price, gate, check the contract and publish; the run's
    counts. ``times``: the setup and teardown seconds (``acquire_s``, ``teardown_s``);
    ``nightly``: whether the run is a night of its series (``trends.series.counts_as_night``)."""
    spec = plan.spec
    scratch = store.read_scratch(run_id)
    tables: dict[str, list[pa.Table]] = {name: [] for name in UNIT_TABLES}
    for unit in plan.units:
        found = scratch.get(unit.unit_id, {})
        if "cells" not in found:
            found = {"cells": rows_to_table("cells", unit_failed_cells(plan, unit, run_id,
                                                                        NO_RESULTS))}
        for name, table in found.items():
            tables[name].append(table)
    combined = {name: pa.concat_tables(parts) if parts else rows_to_table(name, [])
                for name, parts in tables.items()}
    # the quality gate needs every variant's answers, so it runs here, not in a bench task
    evals = combined["evals"].to_pylist()
    gates, cross = gate_columns(spec, evals), cross_stack_columns(spec, evals)
    now = dt.datetime.now(dt.UTC)
    hosts = scratch.get(TEARDOWN_SCRATCH, {}).get("hosts")
    units = combined["units"].to_pylist()
    bill = paid(hosts.to_pylist() if hosts is not None else [], units,
                {t.name: t.price_per_hour(spec.price_per_hour) for t in spec.targets}, now)
    combined["hosts"] = rows_to_table("hosts", bill.hosts)
    cells = [{**row, **gates.get((row["target"], row["variant"]), {}),
              **cross.get((row["target"], row["variant"]), {})}
             for row in combined["cells"].to_pylist()]
    cells = [{**row, **bill.cell_fields(row)} for row in cells]
    combined["cells"] = rows_to_table("cells", cells)
    statuses = combined["cells"].column("status").to_pylist()
    combined["runs"] = rows_to_table("runs", [{
        "run_id": run_id, "run_date": plan.run_date, "logical_date": logical_date or now,
        "dag_id": dag_id, "nightly": nightly, "sweep_name": spec.name,
        "sweep_file": plan.sweep_file,
        "sweep_hash": plan.sweep_hash, "sampling_hash": plan.sampling_hash,
        "prompt_seed": plan.prompt_seed,
        "sampling_json": spec.sampling.model_dump_json(), "suite_git_sha": suite_git_sha(),
        # what the cells ran on (a provisioned host's, not this worker's), one of each
        "hardware": "; ".join(sorted({c["hardware"] for c in cells if c.get("hardware")}))
                    or hardware(), "started_at": started_at or now, "finished_at": now,
        "n_cells": len(statuses), "n_ok": statuses.count("ok"),
        "n_invalid": statuses.count("invalid"), "n_failed": statuses.count("failed"),
        "spec_json": spec.model_dump_json(),
        "acquire_s": (times or {}).get("acquire_s"),
        "teardown_s": (times or {}).get("teardown_s"),
        **{phase: sum(u.get(phase) or 0.0 for u in units)
           for phase in ("load_s", "warmup_s", "golden_s", "stop_s")},
        "paid_s": sum(bill.paid_s.values()), "measure_s": sum(bill.measure_s.values()),
        "sweep_efficiency": bill.sweep_efficiency, "paid_usd": sum(bill.paid_usd.values()),
    }])
    # the contract: a batch that breaks it is not published (the run fails, with the report)
    report = validate_run(combined, plan.expected_cells())
    store.put_text(f"contracts/date={plan.run_date.isoformat()}/{encode_run_id(run_id)}.txt",
                   report.render())
    enforce(report)
    manifest = store.publish(run_id, plan.run_date, combined)
    store.drop_scratch(run_id)
    return {
        "run_id": run_id, "run_date": plan.run_date.isoformat(), "results_uri": store.uri,
        "n_cells": len(statuses), "n_ok": statuses.count("ok"),
        "n_invalid": statuses.count("invalid"), "n_failed": statuses.count("failed"),
        "rows": {name: entry.rows for name, entry in manifest.tables.items()},
    }


def unit_failed_cells(plan: Plan, unit: Unit, run_id: str, reason: str) -> list[dict]:
    """Every cell of ``unit``, failed with ``reason`` (a unit that crashed or left nothing)."""
    target, variant = plan.target_of(unit), plan.variant_of(unit)
    return [failed_cell({"run_id": run_id, "run_date": plan.run_date,
                         **cell_identity(plan.spec, target, variant, w.name, p)}, reason)
            for w in plan.spec.workloads_for(unit.target) for p in plan.spec.load.points_for(w)]
