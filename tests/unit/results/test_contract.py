"""The results data contract (great-expectations): a good run passes, each breach is named.

One realistic run (20 cells, ~500 requests, 1000 evals) is built once; each test breaks one thing
in a copy and checks that the report names the expectation and the offending cell.
"""

import datetime as dt
import time

import pytest
from servebench.results.contract import (
    ContractError,
    ContractReport,
    enforce,
    validate_run,
)
from servebench.results.schema import LATENCY_METRICS, rows_to_table

RUN_ID = "scheduled__2025-03-01T00:00:00+00:00"
DAY = dt.date(2025, 3, 1)
TARGETS = {"llama": ["f16", "q8_0", "q4_k_m", "q2_k"], "tf": ["bf16"]}
WORKLOADS = ["fixed", "prefix"]
CONCURRENCY = [1, 4]
OUT_TOKENS = 32
REQS_PER_CELL = 25  # + 2 warm-up
EVAL_ITEMS = 200


def expected_matrix():
    return [(t, v, w, f"c{c}") for t, vs in TARGETS.items() for v in vs for w in WORKLOADS
            for c in CONCURRENCY]


def good_rows():
    cells, requests, evals = [], [], []
    for n, (t, v, w, label) in enumerate(expected_matrix()):
        c = int(label[1:])
        cid = f"{t}/{v}/{w}/{label}"
        row = dict(run_id=RUN_ID, run_date=DAY, cell_id=cid, target=t, stack="llama.cpp",
                   variant=v, workload=w, load_point=label, load_mode="closed", concurrency=c,
                   status="ok",
                   n_requests=REQS_PER_CELL, n_ok=REQS_PER_CELL, n_errors=0, error_rate=0.0,
                   request_throughput=2.0 * c, output_throughput=64.0 * c,
                   total_throughput=128.0 * c, goodput=1.5 * c, output_tokens_requested=OUT_TOKENS,
                   accuracy=0.9, golden_set="adder")
        for i, m in enumerate(LATENCY_METRICS):
            base = 10.0 * (i + 1) + n
            row.update({f"{m}_mean": base * 1.1, f"{m}_p50": base, f"{m}_p90": base * 1.3,
                        f"{m}_p95": base * 1.5, f"{m}_p99": base * 2})
        cells.append(row)
        for r in range(REQS_PER_CELL + 2):
            t0 = 1_700_000_000.0 + r
            requests.append(dict(
                run_id=RUN_ID, run_date=DAY, cell_id=cid, request_id=f"{cid}#{r}", warmup=r < 2,
                sent_at=t0, first_chunk_at=t0 + 0.01, done_at=t0 + 0.3,
                chunk_times=[t0 + 0.01 * k for k in range(1, 4)], chunk_tokens=[1, 1, 1],
                output_tokens_requested=OUT_TOKENS, output_tokens=OUT_TOKENS,
                finish_reason="length", http_status=200))
    for t, vs in TARGETS.items():
        for v in vs:
            for i in range(EVAL_ITEMS):
                ok = i % 10 != 0
                evals.append(dict(run_id=RUN_ID, run_date=DAY, target=t, stack="llama.cpp",
                                  variant=v, golden_set="adder", item_id=f"q{i}",
                                  reference="4", answer="4" if ok else "5",
                                  score=1.0 if ok else 0.0, correct=ok, latency_ms=12.0))
    runs = [dict(run_id=RUN_ID, run_date=DAY, n_cells=len(cells), n_ok=len(cells), n_invalid=0,
                 n_failed=0)]
    return {"runs": runs, "cells": cells, "requests": requests, "evals": evals}


def tables(rows):
    return {name: rows_to_table(name, r) for name, r in rows.items()}


@pytest.fixture(scope="module")
def good():
    return good_rows()


def mutated(good, table, fn):
    rows = {k: [dict(r) for r in v] for k, v in good.items()}
    fn(rows[table])
    return rows


def check_fails(rows, expectation, cid, table="cells", expected=None):
    report = validate_run(tables(rows), expected or expected_matrix())
    assert not report.success
    text = report.render()
    assert expectation in text and cid in text, text
    hits = [f for f in report.failures if f.expectation == expectation and f.table == table]
    assert hits, text
    assert any(cid in str(s) for f in hits for s in f.sample_rows), text
    with pytest.raises(ContractError) as err:
        enforce(report)
    assert expectation in str(err.value)
    return report


def test_good_run_passes_quickly(good):
    t0 = time.perf_counter()
    report = validate_run(tables(good), expected_matrix())
    elapsed = time.perf_counter() - t0
    assert isinstance(report, ContractReport)
    assert report.success, report.render()
    assert report.failures == [] and report.checked > 50
    assert report.rows == {"runs": 1, "cells": 20, "requests": 540, "evals": 1000}
    assert "PASSED" in report.render()
    assert enforce(report) is report
    assert elapsed < 30  # typically ~1 s plus the one-time GX import


def test_invalid_and_failed_cells_with_reasons_pass(good):
    def fn(cells):
        cells[0].update(status="invalid", reason="server output_tokens != requested",
                        ttft_ms_p50=50.0, ttft_ms_p95=1.0)  # ordering is only checked on ok cells
        cells[2].update(itl_ms_mean=0.0, itl_ms_p50=0.0)  # ok: chunks read together
        cells[1].update(status="failed", reason="OOM", **{f"{m}_{s}": None
                        for m in LATENCY_METRICS for s in ("mean", "p50", "p90", "p95", "p99")})

    report = validate_run(tables(mutated(good, "cells", fn)), expected_matrix())
    assert report.success, report.render()


def test_missing_cell_in_matrix(good):
    gone = good["cells"][3]["cell_id"]
    rows = mutated(good, "cells", lambda cells: cells.pop(3))
    rows["requests"] = [r for r in rows["requests"] if r["cell_id"] != gone]
    report = check_fails(rows, "servebench.sweep_matrix_complete", gone)
    assert "missing" in report.render()


def test_duplicate_cell(good):
    dup = good["cells"][5]["cell_id"]
    report = check_fails(mutated(good, "cells", lambda c: c.append(dict(c[5]))),
                         "expect_compound_columns_to_be_unique", dup)
    assert "more than once" in report.render()  # the matrix check says so too


def test_p50_above_p95(good):
    cid = good["cells"][7]["cell_id"]
    rows = mutated(good, "cells", lambda c: c[7].update(tpot_ms_p50=999.0))
    report = check_fails(rows, "expect_column_pair_values_a_to_be_greater_than_b", cid)
    (f,) = report.failures
    assert f.columns == ("tpot_ms_p95", "tpot_ms_p50")


def test_invalid_cell_without_reason(good):
    cid = good["cells"][2]["cell_id"]
    rows = tables(good)
    # rows_to_table refuses this already; the contract must catch it in a ready-made table too
    import pyarrow as pa
    import pyarrow.compute as pc

    cells = rows["cells"]
    status = pc.if_else(pc.equal(cells["cell_id"], cid), "invalid", cells["status"])
    rows["cells"] = cells.set_column(cells.schema.get_field_index("status"), "status",
                                     status.cast(pa.string()))
    report = validate_run(rows, expected_matrix())
    assert not report.success
    (f,) = report.failures
    assert f.expectation == "expect_column_values_to_not_be_null" and f.columns == ("reason",)
    assert f.sample_rows == [{"cell_id": cid, "reason": None}]
    assert cid in report.render()


def test_gate_verdicts_are_the_gates_own(good):
    """not_judged (a target without a golden set) is a verdict of the contract; a value the
    gate never gives is refused in a ready-made table, naming the cell."""
    import pyarrow as pa

    def verdicts(cells):
        for c, v in zip(cells, ["pass", "fail", "inconclusive", "not_judged", "baseline"]):
            c["gate_verdict"] = v

    rows = tables(mutated(good, "cells", verdicts))
    report = validate_run(rows, expected_matrix())
    assert report.success, report.render()
    cells = rows["cells"]
    values = cells["gate_verdict"].to_pylist()
    values[3] = "no golden set"
    rows["cells"] = cells.set_column(cells.schema.get_field_index("gate_verdict"),
                                     "gate_verdict", pa.array(values, pa.string()))
    report = validate_run(rows, expected_matrix())
    assert not report.success
    (f,) = report.failures
    assert f.expectation == "expect_column_values_to_be_in_set"
    assert f.columns == ("gate_verdict",)
    assert f.sample_rows == [{"cell_id": good["cells"][3]["cell_id"],
                              "gate_verdict": "no golden set"}]


def test_zero_ttft_on_ok_cell(good):
    cid = good["cells"][9]["cell_id"]
    rows = mutated(good, "cells", lambda c: c[9].update(ttft_ms_mean=0.0))
    report = check_fails(rows, "expect_column_values_to_be_between", cid)
    assert report.failures[0].columns == ("ttft_ms_mean",)
    assert "status == 'ok'" in report.render()


def test_negative_throughput(good):
    cid = good["cells"][11]["cell_id"]
    rows = mutated(good, "cells", lambda c: c[11].update(output_throughput=-1.0))
    report = check_fails(rows, "expect_column_values_to_be_between", cid)
    (f,) = report.failures
    assert f.columns == ("output_throughput",) and f.sample_rows[0]["output_throughput"] == -1.0


def test_output_tokens_mismatch_on_ok_cell(good):
    cid = good["cells"][4]["cell_id"]

    def fn(reqs):
        for r in reqs:
            if r["cell_id"] == cid and r["request_id"].endswith("#9"):
                r["output_tokens"] = OUT_TOKENS - 3

    report = check_fails(mutated(good, "requests", fn), "expect_column_pair_values_to_be_equal",
                         cid, table="requests")
    (f,) = report.failures
    assert f.sample_rows[0]["request_id"] == f"{cid}#9"


def test_mismatch_on_warmup_or_invalid_cell_is_fine(good):
    cid = good["cells"][4]["cell_id"]

    def fn(reqs):
        for r in reqs:
            if r["cell_id"] == cid and r["warmup"]:
                r["output_tokens"] = 1

    report = validate_run(tables(mutated(good, "requests", fn)), expected_matrix())
    assert report.success, report.render()


def test_evals_and_cross_table_breaches(good):
    def fn(evals):
        evals[0]["score"] = 1.5
        evals.append(dict(evals[1]))

    rows = mutated(good, "evals", fn)
    rows["requests"].append(dict(rows["requests"][0], cell_id="ghost", request_id="x"))
    report = validate_run(tables(rows), expected_matrix())
    got = {(f.table, f.expectation) for f in report.failures}
    assert got == {
        ("evals", "expect_column_values_to_be_between"),
        ("evals", "expect_compound_columns_to_be_unique"),
        ("requests", "servebench.cell_id_references_cells"),
    }, report.render()
    assert "item_id" in report.render() and "ghost" in report.render()


def test_missing_table_and_columns(good):
    t = tables(good)
    del t["evals"]
    t["runs"] = t["runs"].drop_columns(["spec_json"])
    report = validate_run(t, None)
    got = {(f.table, f.expectation) for f in report.failures}
    assert got == {("evals", "servebench.table_present"),
                   ("runs", "expect_table_columns_to_match_set")}, report.render()
    assert "spec_json" in report.render()
