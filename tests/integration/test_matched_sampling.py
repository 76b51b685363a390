"""Against a real llama-server: cells are valid only when the responses prove matched
sampling, and prompt caching shows in the scraped server metrics.

Runs one variant at a time through the same VariantRunner the DAG uses (needs `make setup`).
"""

import pytest
import yaml
from measured import assert_measured, other_reasons
from servebench.bench import VariantRunner
from servebench.config import parse_sweep
from servebench.provision.local import LocalProvisioner
from servebench.settings import PROJECT_ROOT, get_settings

pytestmark = pytest.mark.integration


def _spec(load=None, **variant):
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["workloads"] = [
        {"kind": "shared_prefix", "name": "prefix", "prefix_tokens": 128, "suffix_tokens": 16,
         "num_prefixes": 2, "output_tokens": 16, "num_requests": 12},
    ]
    data["load"]["concurrency"] = [2]
    data["load"].update(load or {})
    data["cross_stack"] = []
    data["targets"] = [{
        "name": "llama", "stack": "llama_cpp", "golden_sets": [],
        "variants": [{"name": "v", "model": "build/models/adder-3m-f16.gguf", "quant": "f16",
                      "max_num_seqs": 2, "max_model_len": 512, "threads": 1, **variant}],
    }]
    return parse_sweep(data, "test")


def _run(tmp_path, load=None, **variant):
    spec = _spec(load, **variant)
    target = spec.targets[0]
    runner = VariantRunner(spec, target, target.variants[0], run_id="t", settings=get_settings(),
                           provisioner=LocalProvisioner(tmp_path))
    result = runner.run()
    assert not list(tmp_path.glob("*.server.json"))  # the server was stopped
    [cell] = result.cells
    return cell, result.requests


def test_forced_length_is_proven_valid(tmp_path):
    cell, requests = _run(tmp_path)
    assert_measured([cell])  # no rule but the host's fired: exact_output_length held
    measured = [r for r in requests if not r["warmup"]]
    assert all(r["output_tokens"] == 16 and r["finish_reason"] == "length" for r in measured)


def test_a_variant_whose_requests_end_early_is_invalid_with_the_reason(tmp_path):
    # the override caps generation below what the workload asked: the responses give it away
    cell, requests = _run(tmp_path, request_overrides={"max_tokens": 8})
    assert cell["status"] == "invalid"
    assert "output_tokens" in cell["reason"] and "requested" in cell["reason"]
    assert all(r["output_tokens"] == 8 and r["output_tokens_requested"] == 16 for r in requests)


def test_prefix_cache_hits_with_caching_on_and_not_off(tmp_path):
    on, _ = _run(tmp_path / "on")
    off, _ = _run(tmp_path / "off", prefix_caching=False)
    assert on["prefix_cache_hit_rate"] > 0.6, on["prefix_cache_hit_rate"]
    assert off["prefix_cache_hit_rate"] < 0.2, off["prefix_cache_hit_rate"]


def test_a_variant_that_cannot_launch_is_failed_cells_with_the_log(tmp_path):
    bad = tmp_path / "models" / "broken.gguf"
    bad.parent.mkdir()
    bad.write_bytes(b"GGUF but not really a model")
    cell, requests = _run(tmp_path / "state", model=str(bad))
    assert cell["status"] == "failed"
    assert cell["reason"].startswith("launch failed:") and "exited with code" in cell["reason"]
    assert requests == []


def test_open_loop_cell_at_a_poisson_rate(tmp_path):
    cell, requests = _run(tmp_path, load={"concurrency": [], "rates": [20.0], "seed": 7})
    assert_measured([cell])
    assert (cell["load_mode"], cell["request_rate"], cell["arrival"]) == ("open", 20.0, "poisson")
    assert cell["cell_id"].endswith("/prefix/r20")
    measured = sorted(r["scheduled_at"] for r in requests if not r["warmup"])
    # 12 arrivals at 20/s take about 0.55 s; a closed loop would have sent them back to back
    assert 0.15 < measured[-1] - measured[0] < 2.0


def test_a_golden_set_that_cannot_run_leaves_perf_rows_without_validity(tmp_path):
    def broken(*args, **kwargs):
        raise ConnectionError("server went away mid-eval")

    spec = _spec()
    target = spec.targets[0].model_copy(update={"golden_sets": ["addition"]})
    runner = VariantRunner(spec, target, target.variants[0], run_id="t", settings=get_settings(),
                           provisioner=LocalProvisioner(tmp_path), run_golden_set=broken)
    result = runner.run()
    [cell] = result.cells
    assert cell["status"] == "invalid"  # (beside the host's rules, if they fired)
    assert other_reasons(cell) == [("no quality number: golden set addition failed: "
                                    "ConnectionError: server went away mid-eval")]
    assert cell["ttft_ms_p50"] > 0  # the measurement itself is kept
    # stored with the unit too, where a later golden set's failure is the only trace of it
    assert result.unit["golden_failures"] == ("golden set addition failed: ConnectionError: "
                                              "server went away mid-eval")
