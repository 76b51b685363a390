"""The data contract a run must meet before it is published: great-expectations suites per table.

``validate_run(tables, expected_cells)`` checks the four tables of one run (as built by
``pipeline.aggregate_and_publish``) and returns a :class:`ContractReport`; ``enforce(report)``
raises :class:`ContractError` when it failed. Publish only after ``enforce`` passes.

What is checked (GX Core 1.x expectations unless marked *pandas*):

every table   all schema columns present (and no others); required keys non-null
runs          exactly one row; counts >= 0
cells         status in {ok, invalid, failed}; reason non-null when status != ok;
              gate_verdict, where set, in {pass, fail, inconclusive, not_judged, baseline};
              (target, variant, workload, load_point) unique, cell_id unique;
              throughputs/goodput >= 0; error_rate, accuracy in [0, 1];
              on ok cells: TTFT and E2E stats > 0, TPOT and ITL >= 0 (chunks read together
              share a timestamp; the runner marks a cell whose timing it could not resolve)
              and p50 <= p95 <= p99 for ttft/tpot/itl/e2e;
              *pandas*: every expected (target, variant, workload, load_point) present, none extra
requests      (cell_id, request_id) unique; *pandas*: every cell_id names a cell of the run;
              on ok cells' measured (warmup = false), successful requests:
              output_tokens == output_tokens_requested (GX, on the joined frame)
evals         correct in {true, false} and non-null; score in [0, 1] and non-null;
              (target, variant, golden_set, item_id) unique

Every failure names the table, the expectation, the column(s) and sample offending rows by their
identifying columns (cell_id for cells, cell_id + request_id for requests, ...).

Cost: one ephemeral GX context per call, one pandas datasource, one batch per table. Importing
great_expectations takes ~3 s, so it is imported lazily (DAG parsing never pays for it).
Nested columns (chunk_times, chunk_tokens, gate_flipped_ids) are not checked by any expectation;
they are replaced by null columns of the same name before conversion to pandas to keep it cheap.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import pyarrow as pa

from servebench.errors import ContractError
from servebench.metric_catalogue import CATALOGUE
from servebench.results.schema import (
    CELL_STATUSES,
    GATE_VERDICT_VALUES,
    LATENCY_METRICS,
    LATENCY_STATS,
    PUBLISHED_TABLES,
    REQUIRED,
    TABLES,
)

log = logging.getLogger(__name__)

ExpectedCell = tuple[str, str, str, int]  # (target, variant, workload, load_point)

# Columns that identify an offending row in a report, per table.
ID_COLUMNS: dict[str, list[str]] = {
    "runs": ["run_id"],
    "cells": ["cell_id"],
    "requests": ["cell_id", "request_id"],
    "evals": ["target", "variant", "golden_set", "item_id"],
}
MATRIX_KEY = ("target", "variant", "workload", "load_point")
# the catalogue's bounded metrics: rates and an slo cell's load bracket (req/s or workers),
# and shares
THROUGHPUTS = tuple(m.column for m in CATALOGUE if m.bounds == (0.0, None))
FRACTIONS = tuple(m.column for m in CATALOGUE if m.bounds == (0.0, 1.0))
CUSTOM = "servebench"
# frames derived from a table: name -> (table reported, which rows)
DERIVED = {
    "cells_ok": ("cells", "status == 'ok'"),
    "ok_requests": ("requests", "measured (warmup = false), successful requests of ok cells"),
}
_OK_CELL_COLUMNS = {"cell_id", "status"} | {f"{m}_{s}" for m in LATENCY_METRICS
                                             for s in LATENCY_STATS}  # prefix of checks done in pandas rather than by a GX expectation


@dataclass(frozen=True)
class ContractFailure:
    table: str
    expectation: str  # the GX expectation type, or "servebench.<check>" for pandas checks
    columns: tuple[str, ...]
    details: str
    sample_rows: list[dict[str, Any]] = field(default_factory=list)

    def render(self) -> str:
        cols = ", ".join(self.columns) if self.columns else "-"
        lines = [f"[{self.table}] {self.expectation} ({cols}): {self.details}"]
        lines += [f"    {_fmt_row(r)}" for r in self.sample_rows]
        return "\n".join(lines)


@dataclass
class ContractReport:
    success: bool
    failures: list[ContractFailure]
    checked: int = 0  # expectations + pandas checks evaluated
    elapsed_s: float = 0.0
    rows: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        sizes = ", ".join(f"{t} {n}" for t, n in self.rows.items())
        head = (f"data contract {'PASSED' if self.success else 'FAILED'}: {self.checked} checks, "
                f"{len(self.failures)} failed ({sizes}; {self.elapsed_s:.2f} s)")
        return "\n".join([head, *(f.render() for f in self.failures)])

    def failures_for(self, table: str | None = None, expectation: str | None = None
                     ) -> list[ContractFailure]:
        return [f for f in self.failures
                if (table is None or f.table == table)
                and (expectation is None or f.expectation == expectation)]


def enforce(report: ContractReport) -> ContractReport:
    """Raise ContractError when ``report`` failed; return it otherwise."""
    if not report.success:
        raise ContractError(report)
    return report


def _fmt_row(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in row.items())


# -- pandas frames ---------------------------------------------------------------------------
def _frame(table: pa.Table):
    """pandas frame of ``table``; nested columns become nulls (no expectation reads them)."""
    cols = []
    for f in table.schema:
        col = table.column(f.name)
        if pa.types.is_nested(f.type):
            col = pa.nulls(table.num_rows, pa.null())
        cols.append(col)
    return pa.Table.from_arrays(cols, names=table.column_names).to_pandas()


# -- suites ----------------------------------------------------------------------------------
def _suites(gx) -> dict[str, list]:
    """Expectations per frame (a table, or a derived frame reported under its table)."""
    E = gx.expectations
    suites: dict[str, list] = {}
    for name in PUBLISHED_TABLES:
        schema = TABLES[name]
        exps = [E.ExpectTableColumnsToMatchSet(column_set=list(schema.names), exact_match=True)]
        exps += [E.ExpectColumnValuesToNotBeNull(column=c) for c in REQUIRED[name]]
        suites[name] = exps

    suites["runs"] += [E.ExpectTableRowCountToEqual(value=1)]
    suites["runs"] += [E.ExpectColumnValuesToBeBetween(column=c, min_value=0)
                       for c in ("n_cells", "n_ok", "n_invalid", "n_failed")]

    from great_expectations.expectations.row_conditions import Column

    not_ok = Column("status") != "ok"
    cells = suites["cells"]
    cells += [
        E.ExpectColumnValuesToBeInSet(column="status", value_set=list(CELL_STATUSES)),
        E.ExpectColumnValuesToBeInSet(column="gate_verdict",
                                      value_set=list(GATE_VERDICT_VALUES)),
        E.ExpectColumnValuesToNotBeNull(column="reason", row_condition=not_ok),
        E.ExpectColumnValuesToBeUnique(column="cell_id"),
        E.ExpectCompoundColumnsToBeUnique(column_list=list(MATRIX_KEY)),
    ]
    cells += [E.ExpectColumnValuesToBeBetween(column=c, min_value=0) for c in THROUGHPUTS]
    cells += [E.ExpectColumnValuesToBeBetween(column=c, min_value=0, max_value=1)
              for c in FRACTIONS]
    # on ok cells only: a frame of the ok rows (a GX row_condition per expectation runs a
    # pandas query over all ~130 columns each time, which made validation 3x slower)
    ok_cells = suites["cells_ok"] = []
    for m in LATENCY_METRICS:
        # ITL and TPOT may be exactly 0: chunks that arrive in one HTTP read share a timestamp
        ok_cells += [E.ExpectColumnValuesToBeBetween(column=f"{m}_{s}", min_value=0,
                                                     strict_min=m in ("ttft_ms", "e2e_ms"))
                     for s in LATENCY_STATS]
        for lo, hi in (("p50", "p95"), ("p95", "p99")):
            ok_cells.append(E.ExpectColumnPairValuesAToBeGreaterThanB(
                column_A=f"{m}_{hi}", column_B=f"{m}_{lo}", or_equal=True,
                ignore_row_if="either_value_is_missing"))

    suites["requests"] += [E.ExpectCompoundColumnsToBeUnique(column_list=["cell_id", "request_id"])]

    suites["evals"] += [
        E.ExpectColumnValuesToNotBeNull(column="correct"),
        E.ExpectColumnValuesToBeInSet(column="correct", value_set=[True, False]),
        E.ExpectColumnValuesToNotBeNull(column="score"),
        E.ExpectColumnValuesToBeBetween(column="score", min_value=0, max_value=1),
        E.ExpectCompoundColumnsToBeUnique(column_list=ID_COLUMNS["evals"]),
    ]
    # on ok cells' measured, successful requests (the frame built by _ok_requests)
    suites["ok_requests"] = [E.ExpectColumnPairValuesToBeEqual(
        column_A="output_tokens", column_B="output_tokens_requested", ignore_row_if="neither")]
    return suites


def _ok_requests(cells, requests):
    """Measured, successful requests of ok cells (joined with the cell's requested length)."""
    ok_cells = cells.loc[cells["status"] == "ok", "cell_id"]
    r = requests
    mask = (
        r["cell_id"].isin(ok_cells)
        & (r["warmup"] == False)  # noqa: E712 (pandas)
        & r["error"].isna()
        & r["http_status"].between(200, 299)
    )
    return r.loc[mask, ["cell_id", "request_id", "output_tokens", "output_tokens_requested"]]


# -- GX results -> failures ------------------------------------------------------------------
def _columns_of(config: dict) -> tuple[str, ...]:
    kw = config.get("kwargs", {})
    if "column" in kw:
        return (kw["column"],)
    if "column_A" in kw:
        return (kw["column_A"], kw["column_B"])
    if "column_list" in kw:
        return tuple(kw["column_list"])
    if "column_set" in kw:
        return ()
    return ()


def _condition_text(config: dict) -> str:
    cond = config.get("kwargs", {}).get("row_condition")
    if not cond:
        return ""
    if isinstance(cond, dict) and cond.get("type") == "comparison":
        cond = f"{cond['column']['name']} {cond['operator']} {cond['parameter']!r}"
    return str(cond)


def _plain(v: Any) -> Any:
    if hasattr(v, "item") and not isinstance(v, (list, tuple, dict)):
        v = v.item()  # numpy scalar
    if isinstance(v, float) and v != v:
        return None
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    return v


def _failure_from(table: str, res, max_samples: int, scope: str = "") -> ContractFailure:
    cfg = res.expectation_config.to_json_dict()
    etype = cfg["type"]
    kw = cfg.get("kwargs", {})
    result = res.result or {}
    columns = _columns_of(cfg)
    where = " and ".join(x for x in (scope, _condition_text(cfg)) if x)
    where = f" where {where}" if where else ""
    samples: list[dict[str, Any]] = []
    if res.exception_info and res.exception_info.get("raised_exception"):
        details = f"could not be evaluated: {res.exception_info.get('exception_message')}"
    elif etype == "expect_table_columns_to_match_set":
        mismatched = result.get("details", {}).get("mismatched", {})
        details = f"columns do not match the schema: {mismatched or result.get('observed_value')}"
    elif etype == "expect_table_row_count_to_equal":
        details = f"expected {kw.get('value')} row(s), found {result.get('observed_value')}"
    else:
        bounds = {k: kw[k] for k in ("min_value", "max_value", "value_set", "or_equal",
                                     "strict_min") if kw.get(k) is not None}
        details = (f"{result.get('unexpected_count')} of {result.get('element_count')} row(s) "
                   f"unexpected{where}" + (f" {bounds}" if bounds else ""))
        idx = result.get("partial_unexpected_index_list") or []
        values = result.get("partial_unexpected_list") or []
        for i, row in enumerate(idx[:max_samples]):
            if isinstance(row, dict):  # identifying columns first, then the checked ones
                row = {k: _plain(row[k]) for k in sorted(row, key=lambda k: (
                    k not in ID_COLUMNS[table], ID_COLUMNS[table].index(k)
                    if k in ID_COLUMNS[table] else 0))}
            else:
                row = {"index": _plain(row)}
            if len(columns) == 1 and columns[0] not in row and i < len(values):
                row[columns[0]] = _plain(values[i])
            samples.append(row)
    return ContractFailure(table, etype, columns, details, samples)


# -- the entry point -------------------------------------------------------------------------
def _quiet_gx():
    """No analytics calls, no progress bars (set on the context), no INFO chatter."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    for name in ("great_expectations", "posthog"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        # GX sets some of its own loggers to INFO explicitly (e.g. "Created temporary directory")
        if name.startswith("great_expectations.") and isinstance(logger, logging.Logger) \
                and logger.level != logging.NOTSET:
            logger.setLevel(logging.ERROR)


def validate_run(
    tables: dict[str, pa.Table],
    expected_cells: Iterable[ExpectedCell] | None,
    *,
    max_samples: int = 10,
) -> ContractReport:
    """Check one run's tables against the contract.

    ``tables`` maps runs/cells/requests/evals to Arrow tables (a missing table is a failure);
    ``expected_cells`` is the sweep matrix, one (target, variant, workload, load_point) per cell
    the plan expands to (None skips the completeness check). ``max_samples`` caps the offending
    rows quoted per failure.
    """
    t0 = time.perf_counter()
    _quiet_gx()
    failures: list[ContractFailure] = []
    checked = 0
    frames = {}
    for name in PUBLISHED_TABLES:
        if name not in tables:
            failures.append(ContractFailure(name, f"{CUSTOM}.table_present", (),
                                            "table missing from the run"))
        else:
            frames[name] = _frame(tables[name])
        checked += 1
    if "cells" in frames:
        cells = frames["cells"]
        if "status" in cells:
            cells_ok = cells.loc[cells["status"] == "ok"]
            frames["cells_ok"] = cells_ok[[c for c in cells_ok.columns if c in _OK_CELL_COLUMNS]]
        if "requests" in frames:
            frames["ok_requests"] = _ok_requests(cells, frames["requests"])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        _quiet_gx()
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        source = context.data_sources.add_pandas("servebench_contract")
        suites = _suites(gx)
        for name, df in frames.items():
            table, scope = DERIVED.get(name, (name, ""))
            batch = (source.add_dataframe_asset(name)
                     .add_batch_definition_whole_dataframe("run")
                     .get_batch(batch_parameters={"dataframe": df}))
            suite = gx.ExpectationSuite(name=f"servebench.{name}", expectations=suites[name])
            result_format = {
                "result_format": "SUMMARY",
                "partial_unexpected_count": max_samples,
                "unexpected_index_column_names": ID_COLUMNS[table],
            }
            res = batch.validate(suite, result_format=result_format)
            checked += len(res.results)
            failures += [_failure_from(table, r, max_samples, scope)
                         for r in res.results if not r.success]

    if "cells" in frames and expected_cells is not None:
        checked += 1
        failures += _matrix_failures(frames["cells"], list(expected_cells), max_samples)
    if "cells" in frames and "requests" in frames:
        checked += 1
        failures += _orphan_requests(frames["cells"], frames["requests"], max_samples)

    report = ContractReport(
        success=not failures, failures=failures, checked=checked,
        elapsed_s=time.perf_counter() - t0,
        rows={n: t.num_rows for n, t in tables.items() if n in PUBLISHED_TABLES},
    )
    log.info("%s", report.render().splitlines()[0])
    return report


def _matrix_failures(cells, expected: Sequence[ExpectedCell], max_samples: int
                     ) -> list[ContractFailure]:
    def cell_id(*key) -> str:  # as servebench.bench.rows.cell_id spells it
        return "/".join(map(str, key))

    want = Counter(tuple(map(str, k)) for k in expected)
    have = Counter(
        tuple(map(str, k)) for k in cells[list(MATRIX_KEY)].itertuples(index=False, name=None)
    )
    out = []
    missing = sorted(k for k in want if k not in have)
    extra = sorted((k for k in have if k not in want), key=str)
    dupes = sorted(k for k, n in have.items() if n > 1)
    name = f"{CUSTOM}.sweep_matrix_complete"
    if missing:
        out.append(ContractFailure(
            "cells", name, MATRIX_KEY,
            f"{len(missing)} of {len(want)} expected cell(s) missing",
            [{"cell_id": cell_id(*k), **dict(zip(MATRIX_KEY, k))} for k in missing[:max_samples]]))
    if extra:
        ids = dict(zip(map(tuple, cells[list(MATRIX_KEY)].itertuples(index=False, name=None)),
                       cells["cell_id"]))
        out.append(ContractFailure(
            "cells", name, MATRIX_KEY, f"{len(extra)} cell(s) not in the sweep matrix",
            [{"cell_id": ids.get(k), **dict(zip(MATRIX_KEY, k))} for k in extra[:max_samples]]))
    if dupes:
        out.append(ContractFailure(
            "cells", name, MATRIX_KEY, f"{len(dupes)} cell(s) present more than once",
            [{"cell_id": cell_id(*k), "count": have[k]} for k in dupes[:max_samples]]))
    return out


def _orphan_requests(cells, requests, max_samples: int) -> list[ContractFailure]:
    orphans = requests.loc[~requests["cell_id"].isin(cells["cell_id"]), "cell_id"]
    if orphans.empty:
        return []
    counts = orphans.value_counts(sort=False)
    return [ContractFailure(
        "requests", f"{CUSTOM}.cell_id_references_cells", ("cell_id",),
        f"{len(orphans)} request(s) name a cell_id that is not in cells",
        [{"cell_id": c, "requests": int(n)} for c, n in list(counts.items())[:max_samples]])]
