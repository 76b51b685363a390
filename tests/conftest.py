"""Test-wide environment (Airflow points at the project's own home, dags/ and no examples) and
the synthetic nightly history the trends and report tests share.

Set before anything imports Airflow. `make test` exports the same values; these defaults let
`pytest` run directly too (the integration DAG test needs `make airflow-db` once).
"""

import datetime as dt
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("AIRFLOW_HOME", str(ROOT / ".airflow"))
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# no test reaches the Hugging Face Hub (no internet): the gated-model plan check is tested
# against a stand-in of the Hub API on loopback (tests/unit/provision/test_hub.py)
os.environ.setdefault("SERVEBENCH_HUB_ENDPOINT", "")
os.environ.setdefault(
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{ROOT / '.airflow' / 'airflow.db'}"
)


def pytest_collection_modifyitems(config, items):
    """Airflow configures logging (replacing the root handlers) on its first import; done here,
    at collection, it cannot take caplog's handler from under whichever test happens to import
    it first. Only where collected tests need it: the DAG and integration tests, and a unit test
    marked ``airflow`` (one that reads its own logs after something imports Airflow). The unit
    tests that reach Airflow lazily read no logs, and ``make unit`` does not pay its ~6 s."""
    unit = Path(__file__).parent / "unit"
    if any(not Path(item.path).is_relative_to(unit) or item.get_closest_marker("airflow")
           for item in items):
        import airflow.sdk  # noqa: F401

# -- a synthetic nightly history, shared by the trends and report tests -------------------------
DAY0 = dt.date(2026, 10, 1)
NIGHTS = 30


def _publish(store, night, rng):
    from servebench.results.schema import rows_to_table

    day = DAY0 + dt.timedelta(days=night)
    run_id = f"scheduled__{day.isoformat()}"
    engine = "b1" if night < 20 else "b2"
    cells = []
    for variant, slow in (("f16", 1.0), ("q4", 1.15 if night >= 20 else 1.0)):
        failed = variant == "f16" and night == 25
        cell = dict(run_id=run_id, run_date=day, cell_id=f"t/{variant}/w/c1", target="t",
                    stack="llama_cpp", variant=variant, workload="w", load_point="c1",
                    concurrency=1, engine_version=engine, model_file_sha256="a" * 64,
                    hardware="cpu; isa avx2", sampling_hash="s", accuracy=0.9,
                    golden_set="g", gate_verdict="fail" if (variant, night) == ("q4", 26)
                    else "pass", gate_reason="accuracy 0.80 vs 0.90" if night == 26 else None)
        if failed:
            cell.update(status="failed", reason="launch failed: killed by SIGSEGV (-11)")
        else:
            cell.update(status="ok", ttft_ms_p95=10.0 * slow * (1 + 0.01 * rng.normal()),
                        output_throughput=1000 * (1 + 0.01 * rng.normal()))
        cells.append(cell)
    runs = [dict(run_id=run_id, run_date=day, dag_id="nightly_benchmark", sweep_name="local",
                 logical_date=dt.datetime.combine(day, dt.time(2), dt.UTC),
                 finished_at=dt.datetime.combine(day, dt.time(3), dt.UTC),
                 suite_git_sha="abc", sweep_hash="h", n_cells=2)]
    store.publish(run_id, day, {"runs": rows_to_table("runs", runs),
                                "cells": rows_to_table("cells", cells)})
    return {"run_id": run_id, "run_date": day.isoformat()}


@pytest.fixture(scope="module")
def synthetic_history(tmp_path_factory):
    """30 nights of a two-variant sweep published to a real store, the detect step run after
    each as the DAG does: q4's TTFT p95 up 15% from night 20, when the engine version changed;
    f16 failing on night 25, q4's gate failing on night 26. Yields (store, summaries, day 0)."""
    yield from _history(tmp_path_factory, NIGHTS)


@pytest.fixture(scope="module")
def fresh_regression_history(tmp_path_factory):
    """The same history's first 23 nights: q4's regression (from night 20) is among the last
    week's findings, as on the morning a team reads it."""
    yield from _history(tmp_path_factory, 23)


def _history(tmp_path_factory, nights: int):
    from servebench.pipeline import detect
    from servebench.results.store import ResultStore

    root = tmp_path_factory.mktemp("history") / "data"
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVEBENCH_RESULTS_URI", str(root))
    mp.setenv("SERVEBENCH_ANNOTATIONS", str(root / "none.yaml"))
    rng = np.random.default_rng(11)
    store = ResultStore(str(root))
    summaries = []
    try:
        for night in range(nights):  # as the DAG does: publish, then detect, night by night
            summaries.append(detect(_publish(store, night, rng)))
        yield store, summaries, DAY0
    finally:
        mp.undo()
