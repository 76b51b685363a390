"""`servebench run`: a sweep end to end without Airflow -- the DAG's steps in one process,
real llama-server, published, detected, digested, released."""

import pytest
import yaml
from measured import assert_measured
from servebench.cli import main
from servebench.results.store import ResultStore
from servebench.settings import PROJECT_ROOT

pytestmark = pytest.mark.integration


def test_a_sweep_runs_end_to_end_from_the_terminal(local_sweep, tmp_path, monkeypatch, capsys):
    data = local_sweep([{"name": "adder", "stack": "llama_cpp", "golden_sets": ["addition"],
                         "variants": [{"name": "f16", "model": "build/models/adder-3m-f16.gguf",
                                       "quant": "f16", "max_num_seqs": 2,
                                       "max_model_len": 512, "threads": 1}]}],
                       # long enough streams that a busy client still sees their tokens
                       # arrive apart (timing_unresolved is the rule for when it does not)
                       input_tokens=32, output_tokens=64, num_requests=8, concurrency=2,
                       name="terminal")
    sweep = tmp_path / "terminal.yaml"
    sweep.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    assert main(["run", str(sweep), "--run-id", "cli-test"]) == 0
    out = capsys.readouterr().out
    store = ResultStore(str(tmp_path / "data"))
    [run] = store.read_table("runs").to_pylist()
    assert run["run_id"] == "cli-test" and run["dag_id"] == "servebench-cli"
    [cell] = store.read_table("cells").to_pylist()
    assert_measured([cell])  # (ok, unless this host stalled the client: not this test's point)
    assert cell["accuracy"] is not None
    # the terminal says what was stored: progress, then the run's count
    assert "unit adder--f16" in out and f"cell adder/f16/fixed/c2: {cell['status']}" in out
    ok = cell["status"] == "ok"
    assert f"cells: {int(ok)} ok, {int(not ok)} invalid, 0 failed" in out and "digest: " in out
    assert any(f.endswith(".md") for f in store.find("digests"))
    assert not list((tmp_path / "runs").rglob("*.server.json"))  # released
    # what the unit held (bench.memory): the GGUF's bytes, llama-server's two 512-token
    # slots as its log states them, its process's peak; stored, in its cell, and printed
    [unit] = store.read_table("units").to_pylist()
    gguf = PROJECT_ROOT / "build/models/adder-3m-f16.gguf"
    assert unit["weights_bytes"] == gguf.stat().st_size
    assert unit["weights_source"] == "the model files on disk (build/models/adder-3m-f16.gguf)"
    assert unit["kv_cache_tokens"] == 1024
    assert "n_slots = 2, n_ctx_slot = 512" in unit["kv_cache_source"]
    assert 5e6 < unit["peak_rss_bytes"] < 1e9 and "Pss" in unit["peak_rss_source"]
    assert unit["peak_device_memory_bytes"] is None and unit["peak_device_memory_source"]
    assert (cell["weights_bytes"], cell["kv_cache_tokens"], cell["peak_rss_bytes"]) == (
        unit["weights_bytes"], 1024, unit["peak_rss_bytes"])
    assert "adder/f16: weights 7.16 MB, KV cache 1,024 tokens, peak memory " in out
    assert main(["run", str(tmp_path / "missing.yaml")]) == 2  # bad input: nothing started


def test_a_terminated_run_stops_its_servers(local_sweep, tmp_path):
    """`servebench run` killed with SIGTERM (a CI timeout, `kill`) unwinds as from Ctrl-C:
    the llama-server it started is stopped, its record removed, and it exits 130."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    data = local_sweep([{"name": "adder", "stack": "llama_cpp", "variants": [
        {"name": "f16", "model": "build/models/adder-3m-f16.gguf", "quant": "f16",
         "max_num_seqs": 1, "max_model_len": 512, "threads": 1}]}],
        input_tokens=32, output_tokens=32, num_requests=2000, concurrency=1, name="killed")
    sweep = tmp_path / "killed.yaml"
    sweep.write_text(yaml.safe_dump(data))
    runs = tmp_path / "runs"
    env = {**os.environ, "SERVEBENCH_RESULTS_URI": str(tmp_path / "data"),
           "SERVEBENCH_WORK_DIR": str(runs)}
    env.pop("SLACK_BOT_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "servebench.cli", "run", str(sweep)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (records := list(runs.rglob("*.server.json"))):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        pid = json.loads(records[0].read_text())["pid"]
        time.sleep(2)  # into its cells
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted (SIGTERM)" in err
    assert not list(runs.rglob("*.server.json"))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the server is gone (stopped and reaped)
