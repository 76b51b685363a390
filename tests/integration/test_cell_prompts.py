"""Against a real llama-server with its prompt cache on: every cell draws prompts of its own,
so a later cell measures the cache its workload implies, not one an earlier cell warmed; a cell
that re-sends another's prompts is invalid, with the measured and expected shares.

Runs through the VariantRunner the DAG uses (needs `make setup`).
"""

import pytest
import yaml
from measured import assert_measured
from servebench.bench import VariantRunner
from servebench.config import parse_sweep
from servebench.metrics import PREFIX_CACHE_TOLERANCE
from servebench.provision.local import LocalProvisioner
from servebench.release.gate import ReleaseGateParams, run_repetitions
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.workloads import build_prompts

pytestmark = pytest.mark.integration

VARIANT = {"model": "build/models/adder-3m-f16.gguf", "quant": "f16", "max_num_seqs": 4,
           "max_model_len": 512, "threads": 1}


def _spec():
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["workloads"] = [{"kind": "fixed", "name": "fixed", "input_tokens": 64,
                          "output_tokens": 16, "num_requests": 24}]
    data["load"]["concurrency"] = [1, 4]
    data["cross_stack"] = []
    data["targets"] = [{"name": "llama", "stack": "llama_cpp", "golden_sets": [],
                        "baseline": "a", "variants": [{"name": "a", **VARIANT},
                                                      {"name": "b", **VARIANT}]}]
    return parse_sweep(data, "test")


def _cells(tmp_path, **steps):
    spec = _spec()
    target = spec.targets[0]
    result = VariantRunner(spec, target, target.variants[0], run_id="t",
                           settings=get_settings(), provisioner=LocalProvisioner(tmp_path),
                           **steps).run()
    return {c["concurrency"]: c for c in result.cells}


def test_a_later_cell_does_not_measure_an_earlier_cells_cache(tmp_path):
    cells = _cells(tmp_path)
    assert_measured(cells.values())  # no rule but the host's fired: prefix_cache_reuse held
    for cell in cells.values():
        # independent prompts: only the chat template's BOS is shared (1 token of 65)
        assert cell["prefix_cache_hit_rate"] <= \
            cell["prefix_cache_expected"] + PREFIX_CACHE_TOLERANCE, cell
        assert cell["prefix_cache_expected"] < 0.05
    # four requests at once on one thread: a first token comes later, never sooner
    assert cells[4]["ttft_ms_p50"] >= cells[1]["ttft_ms_p50"]
    assert cells[1]["prompt_key"] != cells[4]["prompt_key"]


def test_a_cell_that_resends_prompts_is_invalid(tmp_path):
    # on purpose: every cell (and its warm-up) draws from one key, as before prompts belonged
    # to their cell
    def one_key(*args, key, **kwargs):
        return build_prompts(*args, key="same", **kwargs)

    cells = _cells(tmp_path, build_prompts=one_key)
    reused = cells[4]
    assert reused["status"] == "invalid"
    assert "prefix_cache_reuse: hit rate" in reused["reason"]
    assert reused["prefix_cache_hit_rate"] > 0.9  # every prompt was the c1 cell's
    assert f"> {reused['prefix_cache_expected']:.2f} the workload implies" in reused["reason"]


def test_each_release_gate_repetition_draws_prompts_of_its_own(tmp_path):
    params = ReleaseGateParams(target="llama", candidate="b", repetitions=2, concurrency=[4])
    spec = _spec()
    spec = spec.model_copy(update={"load": spec.load.model_copy(update={"concurrency": [4]})})
    cells = run_repetitions(spec, params, "gate", LocalProvisioner(tmp_path), get_settings())
    keys = {(c["repetition"], c["variant"]): c["prompt_key"] for c in cells["cells"]}
    # baseline and candidate meet the same prompts within a repetition, never across them
    assert keys[(0, "a")] == keys[(0, "b")] != keys[(1, "a")] == keys[(1, "b")]
    # each repetition meets a cold cache (a loaded host may still stall the client)
    assert not [c for c in cells["cells"] if "prefix_cache_reuse" in (c["reason"] or "")]
    assert all(c["status"] != "failed" for c in cells["cells"]), cells["cells"]


def test_a_cell_the_plan_sized_measures_that_many_requests(tmp_path):
    """load.auto_requests: the plan's count for a cell (by cell id) is what it measures; the
    others send their workload's."""
    cells = _cells(tmp_path, requests={"llama/a/fixed/c1": 40})
    assert_measured(cells.values())
    assert (cells[1]["n_requests"], cells[4]["n_requests"]) == (40, 24)
