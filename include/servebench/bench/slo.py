"""The ``slo`` cell: the highest load within the sweep's SLOs (``servebench.capacity``), each
probe a cell measured with prompts of its own."""

from __future__ import annotations

import json
import logging

from servebench.bench.cell import CellMeasurer
from servebench.bench.rows import cell_id
from servebench.capacity import Probe, search_max_load
from servebench.config import LoadPoint, Workload
from servebench.endpoint import Endpoint
from servebench.loadgen.modes import CLOSED, OPEN
from servebench.metrics import slo_misses
from servebench.tokenizer import Tokenizer

log = logging.getLogger(__name__)


def search_slo(cells: CellMeasurer, endpoint: Endpoint, workload: Workload, point: LoadPoint,
               tokenizer: Tokenizer) -> tuple[dict, list[dict]]:
    """The ``slo`` cell's row and requests. Each probe is a cell of the workload's requests with
    prompts of its own (its own prompt key: no probe meets a cache another warmed). The row kept
    is the highest probe that held (else the first), with the bracket and every probe; only its
    requests are kept."""
    spec = cells.spec
    search = spec.load.slo_search
    max_errors = spec.load.max_error_rate
    cid = cell_id(cells.target.name, cells.variant.name, workload.name, point)
    measured: dict[float, tuple[dict, list[dict]]] = {}

    def probe(load: float) -> Probe:
        at = (LoadPoint(label=f"slo@r{load:g}", mode=OPEN, request_rate=load,
                        concurrency=point.concurrency) if search.over == "rate" else
              LoadPoint(label=f"slo@c{int(load)}", mode=CLOSED, concurrency=int(load)))
        row, requests = cells.measure(endpoint, workload.name, at,
                                      cells.prompts(workload, at, tokenizer), cid=cid)
        measured[load] = (row, requests)
        misses = slo_misses(row, cells.slo, max_errors)
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
    return row, requests
