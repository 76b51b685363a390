"""The shipped example sweeps, run as a user runs them: `servebench run
include/sweeps/slo-search.yaml` against llama-server (the local model), published, digested
and summarised. Needs `make setup` (llama.cpp and the local model)."""

import json
import re

import pytest
from measured import HOST_RULES
from servebench.cli import main
from servebench.results.store import ResultStore
from servebench.settings import PROJECT_ROOT

pytestmark = pytest.mark.integration


def test_the_slo_search_example_runs_from_the_terminal(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    sweep = PROJECT_ROOT / "include" / "sweeps" / "slo-search.yaml"
    assert main(["run", str(sweep), "--run-id", "slo-example"]) == 0
    out = capsys.readouterr().out
    [cell] = ResultStore(str(tmp_path / "data")).read_table("cells").to_pylist()
    assert (cell["cell_id"], cell["load_mode"], cell["slo_search_over"]) == (
        "adder-llamacpp/f16/fixed-32x64/slo", "slo", "concurrency")
    # a probe this shared host stalled makes the cell invalid, with why (the cell's own
    # measurement, or a probe the search could not judge for it); nothing else may
    parts = str(cell["reason"] or "").split("; ")
    assert cell["status"] == "ok" or all(any(rule in part for rule in HOST_RULES)
                                         for part in parts), cell
    probes = json.loads(cell["slo_probes_json"])
    assert 1 <= len(probes) <= 6 and probes[0]["load"] == 1
    # the summary's row says what it is: the most workers within the SLO, measured there
    [row] = [line for line in out.splitlines() if line.startswith("llama_cpp")]
    best = cell["max_load_within_slo"]
    if best:
        assert f"slo (max c{int(best)} within SLO)" in row
        if cell["status"] == "ok":  # measured at the load it names
            assert re.search(rf"SLO\)\s+{int(best)}\s", row) and cell["concurrency"] == best
    else:
        assert "slo (none within SLO)" in row or "slo (no answer)" in row
    assert "NOT JUDGED adder-llamacpp/f16: target has no golden set" in out
    [digest] = (tmp_path / "data" / "digests").rglob("*.md")
    assert "## Load within SLO" in digest.read_text()
