"""`servebench summary --require-ok`: what `make run` ends with. A run with cells that are not
ok exits 1 and names each one with its reason; a clean run exits 0."""

import datetime as dt

import pytest
from servebench.cli import main
from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore

DAY = dt.date(2026, 11, 30)


def _publish(root, statuses):
    run_id = "manual__2026-11-30"
    cells = [dict(run_id=run_id, run_date=DAY, cell_id=f"t/v{i}/w/c1", target="t",
                  stack="llama_cpp", variant=f"v{i}", workload="w", load_point="c1",
                  concurrency=1, status=status, reason=reason)
             for i, (status, reason) in enumerate(statuses)]
    ResultStore(str(root)).publish(run_id, DAY, {
        "runs": rows_to_table("runs", [dict(
            run_id=run_id, run_date=DAY, sweep_name="local", n_cells=len(cells),
            n_ok=sum(s == "ok" for s, _ in statuses),
            n_invalid=sum(s == "invalid" for s, _ in statuses),
            n_failed=sum(s == "failed" for s, _ in statuses),
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
