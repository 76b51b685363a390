"""`servebench run`: a sweep end to end without Airflow -- the DAG's steps in one process,
real llama-server, published, detected, digested, released."""

import pytest
import yaml
from servebench.cli import main
from servebench.results.store import ResultStore

pytestmark = pytest.mark.integration


def test_a_sweep_runs_end_to_end_from_the_terminal(local_sweep, tmp_path, monkeypatch, capsys):
    data = local_sweep([{"name": "adder", "stack": "llama_cpp", "golden_sets": ["addition"],
                         "variants": [{"name": "f16", "model": "build/models/adder-3m-f16.gguf",
                                       "quant": "f16", "max_num_seqs": 2,
                                       "max_model_len": 512, "threads": 1}]}],
                       input_tokens=32, output_tokens=24, num_requests=8, concurrency=2,
                       name="terminal")
    sweep = tmp_path / "terminal.yaml"
    sweep.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    assert main(["run", str(sweep), "--run-id", "cli-test"]) == 0
    out = capsys.readouterr().out
    assert "unit adder--f16" in out and "cell adder/f16/fixed/c2: ok" in out  # progress
    assert "cells: 1 ok, 0 invalid, 0 failed" in out and "digest: " in out
    store = ResultStore(str(tmp_path / "data"))
    [run] = store.read_table("runs").to_pylist()
    assert run["run_id"] == "cli-test" and run["dag_id"] == "servebench-cli"
    [cell] = store.read_table("cells").to_pylist()
    assert cell["status"] == "ok" and cell["accuracy"] is not None
    assert any(f.endswith(".md") for f in store.find("digests"))
    assert not list((tmp_path / "runs").rglob("*.server.json"))  # released
    assert main(["run", str(tmp_path / "missing.yaml")]) == 2  # bad input: nothing started
