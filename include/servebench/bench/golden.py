"""A unit's golden set: through the same endpoint and sampling as its cells, the first set's
accuracy carried by every cell row (the headline quality number), each item an ``evals`` row."""

from __future__ import annotations

import logging
from collections.abc import Callable

from servebench.bench.rows import UnitRows
from servebench.endpoint import Endpoint
from servebench.evals.runner import EvalOutcome
from servebench.plan import unit_id

log = logging.getLogger(__name__)


def run_golden(rows: UnitRows, endpoint: Endpoint,
               run_golden_set: Callable[..., EvalOutcome]) -> None:
    """Every golden set of the unit's target on ``endpoint``; a set that fails is kept with the
    unit, and the first one's failure leaves the cells without a quality number."""
    spec, target, variant = rows.spec, rows.target, rows.variant
    outcomes: list[EvalOutcome] = []
    for index, name in enumerate(target.golden_sets):
        ref = spec.golden_set(name)
        try:
            outcome = run_golden_set(
                ref, adapter=rows.adapter, endpoint=endpoint,
                sampling=spec.sampling, variant=variant, settings=rows.settings,
                cell_prefix=unit_id(target.name, variant.name),
            )
        except Exception as exc:  # the perf rows stay, but cannot count as comparable
            log.exception("golden set %s failed on %s", name, variant.name)
            failure = f"golden set {name} failed: {type(exc).__name__}: {exc}"
            if index == 0:  # the headline quality number
                rows.without_quality(failure)
            # every one is kept with the unit (a later set's too: no cell carries it)
            unit = rows.result.unit
            unit["golden_failures"] = "; ".join(filter(None, [unit.get("golden_failures"),
                                                               failure]))
            continue
        outcomes.append(outcome)
        for item in outcome.rows:
            item.update(target=target.name, stack=target.stack, variant=variant.name)
            rows.result.evals.append(item)
    if outcomes:
        accuracy = outcomes[0].accuracy  # the first golden set is the headline number
        for row in rows.result.cells:
            row.update(accuracy=accuracy, golden_set=outcomes[0].name)
            if row.get("n_ok") is not None:  # wrong answers are not successes
                row.update(rows.cost(row))
