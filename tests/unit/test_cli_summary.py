"""`servebench summary --require-ok`: what `make run` ends with. A run with cells that are not
ok exits 1 and names each one with its reason; a clean run exits 0."""

import datetime as dt

import pytest
from servebench.cli import main
from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore

DAY = dt.date(2026, 11, 30)


RUN_ID = "manual__2026-11-30"


def _publish(root, statuses):
    _publish_cells(root, [dict(cell_id=f"t/v{i}/w/c1", variant=f"v{i}", load_point="c1",
                               concurrency=1, status=status, reason=reason)
                          for i, (status, reason) in enumerate(statuses)])


def _publish_cells(root, cells):
    cells = [dict(run_id=RUN_ID, run_date=DAY, target="t", stack="llama_cpp", workload="w",
                  **c) for c in cells]
    statuses = [c["status"] for c in cells]
    ResultStore(str(root)).publish(RUN_ID, DAY, {
        "runs": rows_to_table("runs", [dict(
            run_id=RUN_ID, run_date=DAY, sweep_name="local", n_cells=len(cells),
            n_ok=statuses.count("ok"), n_invalid=statuses.count("invalid"),
            n_failed=statuses.count("failed"),
            started_at=dt.datetime(2026, 11, 30, 1), finished_at=dt.datetime(2026, 11, 30, 2))]),
        "cells": rows_to_table("cells", cells),
    })


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    return tmp_path / "data"


def test_failed_cells_fail_the_command_with_their_reasons(results, capsys):
    _publish(results, [("ok", None),
                       ("failed", "launch failed: adder-llamacpp--q8_0 killed by SIGSEGV (-11)"),
                       ("invalid", "client_saturated: send lag p99 > 50 ms")])
    assert main(["summary", "--latest", "--require-ok"]) == 1
    err = capsys.readouterr().err
    assert "2 of 3 cells are not ok" in err
    assert "t/v1/w/c1: failed: launch failed: adder-llamacpp--q8_0 killed by SIGSEGV" in err
    assert "t/v2/w/c1: invalid: client_saturated" in err
    # without the flag the summary only reports
    assert main(["summary", "--latest"]) == 0


def test_an_all_ok_run_passes(results):
    _publish(results, [("ok", None), ("ok", None)])
    assert main(["summary", "--latest", "--require-ok"]) == 0


def test_an_slo_searchs_row_says_it_is_the_most_load_within_slo(results, capsys):
    """The search's row was measured at its highest probe that held (concurrency 3 here):
    beside a plain c2 row the summary names it for what it is, not as one more load point."""
    _publish_cells(results, [
        dict(cell_id="t/v/w/c2", variant="v", load_point="c2", load_mode="closed",
             concurrency=2, status="ok", reason=None),
        dict(cell_id="t/v/w/slo", variant="v", load_point="slo", load_mode="slo",
             concurrency=3, slo_search_over="concurrency", max_load_within_slo=3.0,
             max_load_failed_at=4.0, status="ok", reason=None),
        dict(cell_id="t/r/w/slo", variant="r", load_point="slo", load_mode="slo",
             concurrency=8, request_rate=6.3496, slo_search_over="rate",
             max_load_within_slo=6.3496, max_load_failed_at=8.0, status="ok", reason=None),
        dict(cell_id="t/z/w/slo", variant="z", load_point="slo", load_mode="slo",
             concurrency=1, slo_search_over="concurrency", max_load_within_slo=0.0,
             max_load_failed_at=1.0, status="ok", reason=None),
        dict(cell_id="t/x/w/slo", variant="x", load_point="slo", load_mode="slo",
             concurrency=4, slo_search_over="concurrency", status="invalid",
             reason="client_saturated: send lag p99 64.9 ms > 50 ms"),
    ])
    assert main(["summary", "--latest"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("stack"))
    assert header.split()[:5] == ["stack", "variant", "workload", "load", "conc"]
    rows = [line for line in lines if line.startswith("llama_cpp")]
    assert len(rows) == 5
    [c2] = [line for line in rows if line.split()[1:4] == ["v", "w", "c2"]]
    assert c2.split()[4] == "2"
    [slo] = [line for line in rows if "slo (max c3 within SLO)" in line]
    assert slo.split()[1] == "v" and slo.split("SLO)")[1].split()[0] == "3"  # measured at 3
    by_variant = {line.split()[1]: line for line in rows}
    assert "slo (max r6.35 within SLO)" in by_variant["r"]
    assert "slo (none within SLO)" in by_variant["z"]
    assert "slo (no answer)" in by_variant["x"] and "INVALID" in by_variant["x"]


def test_cells_refused_for_this_workers_hardware_are_said_not_fatal(results, capsys):
    """W4A16 on vLLM's CPU build without AVX-512F: the plan refused the unit, its cells are
    stored failed with why; `make run` names them and passes on such a CPU. A failure of
    any other kind beside them still fails it."""
    refused = ("refused at plan: field recipe.scheme 'W4A16': vLLM's CPU build runs it with "
               "cpu_gemm_wna16, built only for CPUs with avx512f, which this worker lacks")
    _publish(results, [("ok", None), ("failed", refused), ("failed", refused)])
    assert main(["summary", "--latest", "--require-ok"]) == 0
    err = capsys.readouterr().err
    assert "refused on this worker's hardware (2 cells): t/v1, t/v2" in err
    assert refused in err and "not ok" not in err
    _publish(results, [("failed", refused), ("failed", "launch failed: killed by SIGSEGV")])
    assert main(["summary", "--latest", "--require-ok"]) == 1
    assert "1 of 2 cells are not ok" in capsys.readouterr().err
