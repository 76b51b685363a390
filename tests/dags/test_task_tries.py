"""The tasks that measure hand the library their try (``ti.try_number``): a retried or cleared
task's units draw prompts of their own (``workloads.prompt_key``), none its first try left in
a server's cache. Each task's callable is called as Airflow calls it: with the keyword
arguments its signature asks of the task's context (no DB needed)."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.bases.decorator import determine_kwargs

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def bag() -> DagBag:
    return DagBag(dag_folder=str(DAGS))


def _run(task, context: dict, monkeypatch, module: str, function: str) -> dict:
    """``task``'s callable run in ``context`` with ``module.function`` (the library call it
    wires) recording its keyword arguments instead."""
    import importlib

    called = {}
    monkeypatch.setattr(importlib.import_module(module), function,
                        lambda *args, **kwargs: called.update(kwargs) or {})
    call = task.python_callable
    # the task's own reads of its context (get_current_context) see the same one
    monkeypatch.setitem(call.__globals__, "get_current_context", lambda: context)
    call(**determine_kwargs(call, (), context))
    return called


def _context(try_number: int, **task_args) -> dict:
    return {"ti": SimpleNamespace(try_number=try_number), "run_id": "scheduled__r",
            "dag_run": SimpleNamespace(dag_id="d"), "params": {}, **task_args}


@pytest.mark.parametrize("try_number", [1, 3])
def test_the_nightly_bench_task_passes_its_try(bag, monkeypatch, try_number):
    bench = bag.dags["nightly_benchmark"].task_dict["bench"]
    context = _context(try_number, host="local", plan={}, provisioned={})
    called = _run(bench, context, monkeypatch, "servebench.pipeline", "bench_host")
    assert called["try_number"] == try_number


@pytest.mark.parametrize("try_number", [1, 2])
def test_the_release_gate_measure_task_passes_its_try(bag, monkeypatch, try_number):
    measure = bag.dags["release_gate"].task_dict["measure"]
    context = _context(try_number, plan={}, provisioned={})
    called = _run(measure, context, monkeypatch, "servebench.release.gate", "measure_gate")
    assert called["try_number"] == try_number
