"""The workload kinds beyond fixed and shared-prefix, each against a real llama-server through
the VariantRunner the DAG uses: a trace replayed at its own arrival times (Mooncake's format,
the committed sample made by scripts/make_trace.py, twice as fast), chat lengths drawn from
the shipped table, multi-turn conversations whose history grows, long-context prompts near
the variant's limit and random-word prompts; and the search for the most load within SLO.

Needs `make setup` (llama.cpp and the local model).
"""

import numpy as np
import pytest
import yaml
from servebench.bench import VariantRunner
from servebench.config import parse_sweep
from servebench.provision.local import LocalProvisioner
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.traces import read_trace, select

pytestmark = pytest.mark.integration

TRACE = "include/datasets/trace-mooncake-small.jsonl"
VARIANT = {"name": "f16", "model": "build/models/adder-3m-f16.gguf", "quant": "f16",
           "max_num_seqs": 4, "max_model_len": 512, "threads": 1}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["workloads"] = [
        {"kind": "trace", "name": "trace", "path": TRACE, "block_tokens": 32,
         "time_scale": 0.5},
        {"kind": "chat_lengths", "name": "chat", "dataset": "include/datasets/chat_lengths.jsonl",
         "num_requests": 12, "max_input_tokens": 200, "max_output_tokens": 64},
        {"kind": "multi_turn", "name": "turns", "num_conversations": 3, "turns": 3,
         "turn_input_tokens": 24, "output_tokens": 8},
        {"kind": "long_context", "name": "long", "context_share": 0.9, "output_tokens": 16,
         "num_requests": 6},
        {"kind": "fixed", "name": "random", "text": "random", "input_tokens": 64,
         "output_tokens": 16, "num_requests": 8},
    ]
    data["load"] = {"concurrency": [2], "max_concurrency": 8, "warmup_requests": 2,
                    "request_timeout_s": 60}
    data["cross_stack"] = []
    data["targets"] = [{"name": "llama", "stack": "llama_cpp", "golden_sets": [],
                        "baseline": "f16", "variants": [VARIANT]}]
    spec = parse_sweep(data, "test")
    target = spec.targets[0]
    runner = VariantRunner(spec, target, target.variants[0], run_id="t",
                           settings=get_settings(),
                           provisioner=LocalProvisioner(tmp_path_factory.mktemp("servers")))
    return runner.run()


def _cell(result, workload):
    [cell] = [c for c in result.cells if c["workload"] == workload]
    # a host that stalls the client makes a cell rightly invalid; nothing else may go wrong
    assert cell["status"] == "ok" or str(cell["reason"]).startswith("client_saturated"), cell
    return cell


def test_a_trace_is_replayed_at_its_own_arrival_times(result):
    cell = _cell(result, "trace")
    assert (cell["load_point"], cell["load_mode"], cell["concurrency"]) == ("trace", "trace", 8)
    rows = select(read_trace(PROJECT_ROOT / TRACE, block_tokens=32), time_scale=0.5)
    assert cell["n_requests"] == len(rows) == 40 and cell["n_ok"] == 40
    sent = [r for r in result.requests if r["cell_id"] == cell["cell_id"] and not r["warmup"]]
    scheduled = np.array(sorted(r["scheduled_at"] for r in sent))
    # each request was due at its row's arrival (half the trace's offsets)
    assert scheduled - scheduled[0] == pytest.approx([r.arrival_s for r in rows], abs=1e-3)
    assert cell["duration_s"] >= rows[-1].arrival_s
    # every answer as long as its row asked, every prompt as long as its row's input
    assert sorted(r["output_tokens"] for r in sent) == sorted(r.output_tokens for r in rows)
    assert sorted(r["prompt_tokens_requested"] for r in sent) == sorted(
        max(r.input_tokens, 8) for r in rows)
    # the rows' shared blocks reach the server's prompt cache, within what the trace implies
    assert 0.2 < cell["prefix_cache_expected"] < 0.8
    assert cell["prefix_cache_hit_rate"] > 0.1
    assert not str(cell["reason"] or "").startswith("prefix_cache_reuse")


def test_chat_lengths_vary_and_are_kept_exactly(result):
    cell = _cell(result, "chat")
    sent = [r for r in result.requests if r["cell_id"] == cell["cell_id"] and not r["warmup"]]
    assert len(sent) == 12
    # lengths drawn from the table, clipped, each answer exactly as long as its draw asked
    assert len({r["output_tokens_requested"] for r in sent}) > 1
    assert len({r["prompt_tokens_requested"] for r in sent}) > 1
    assert all(r["output_tokens"] == r["output_tokens_requested"] <= 64 for r in sent)
    assert all(r["prompt_tokens_requested"] <= 200 for r in sent)


def test_long_context_prompts_reach_near_the_variants_limit(result):
    cell = _cell(result, "long")
    sent = [r for r in result.requests if r["cell_id"] == cell["cell_id"] and not r["warmup"]]
    # 0.9 of the variant's 512, less 16 output tokens and the template's 16: served whole
    assert {r["prompt_tokens_requested"] for r in sent} == {int(512 * 0.9) - 16 - 16}
    assert all(r["prompt_tokens"] + r["output_tokens"] <= 512 for r in sent)
    assert cell["n_ok"] == 6 and cell["prefix_cache_expected"] < 0.05


def test_random_word_prompts_are_served_like_any_other(result):
    cell = _cell(result, "random")
    assert cell["n_ok"] == 8 and cell["prefix_cache_hit_rate"] < 0.05


def test_multi_turn_history_is_served_from_the_cache(result):
    cell = _cell(result, "turns")
    assert cell["n_ok"] == 9
    # turns 2 and 3 re-send their conversation's history: the cache serves it
    assert cell["prefix_cache_expected"] > 0.3
    assert cell["prefix_cache_hit_rate"] > 0.3


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """The most concurrency llama-server (4 slots, one thread) serves within a TTFT p95 of
    15 ms: past its slots a request waits for another's whole answer."""
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["workloads"] = [{"kind": "fixed", "name": "fixed", "input_tokens": 32,
                          "output_tokens": 32, "num_requests": 16}]
    data["slos"] = {"ttft_ms": 15}
    data["load"] = {"slo_search": {"over": "concurrency", "low": 1, "high": 16,
                                   "max_probes": 6},
                    "warmup_requests": 2, "request_timeout_s": 60}
    data["cross_stack"] = []
    data["targets"] = [{"name": "llama", "stack": "llama_cpp", "golden_sets": [],
                        "baseline": "f16", "variants": [VARIANT]}]
    spec = parse_sweep(data, "test")
    target = spec.targets[0]
    return VariantRunner(spec, target, target.variants[0], run_id="t",
                         settings=get_settings(),
                         provisioner=LocalProvisioner(tmp_path_factory.mktemp("slo"))).run()


def test_the_slo_search_keeps_the_highest_load_that_held(searched):
    import json

    [cell] = searched.cells
    assert (cell["cell_id"], cell["load_mode"], cell["slo_search_over"]) == (
        "llama/f16/fixed/slo", "slo", "concurrency")
    probes = json.loads(cell["slo_probes_json"])
    assert 1 <= len(probes) <= 6 and probes[0]["load"] == 1
    held = [p["load"] for p in probes if p["held"]]
    missed = [p for p in probes if not p["held"]]
    # a probe that could not be measured would make the cell invalid, with why
    assert cell["status"] == "ok", cell["reason"]
    assert cell["max_load_within_slo"] == max(held, default=0.0)
    # the row is the highest probe that held: measured at it, within the SLO
    assert cell["concurrency"] == cell["max_load_within_slo"]
    assert cell["ttft_ms_p95"] <= 15
    if missed:  # the bound: the least load above it that missed, and why (in TTFT)
        assert cell["max_load_failed_at"] == min(p["load"] for p in missed
                                                 if p["load"] > cell["max_load_within_slo"])
        assert all(p["why"].startswith("TTFT p95") for p in missed)
    else:
        assert cell["max_load_within_slo"] == 16 and cell["max_load_failed_at"] is None
    # only the kept probe's requests, under the cell's id
    sent = [r for r in searched.requests if not r["warmup"]]
    assert len(sent) == 16 and {r["cell_id"] for r in sent} == {cell["cell_id"]}


def _trace_and_search(targets: list[dict], *, ttft_ms: float, time_scale: float,
                      output_tokens: int, timeout_s: float) -> dict:
    """The local sweep asking for a trace (the first 24 requests of the sample) and the most
    concurrency (1..4, three probes) within a TTFT p95 SLO, for ``targets``."""
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data.update(
        cross_stack=[], golden_sets=[], slos={"ttft_ms": ttft_ms},
        workloads=[{"kind": "trace", "name": "trace", "path": TRACE, "block_tokens": 32,
                    "time_scale": time_scale, "max_requests": 24},
                   {"kind": "fixed", "name": "fixed", "input_tokens": 32,
                    "output_tokens": output_tokens, "num_requests": 8}],
        load={"slo_search": {"over": "concurrency", "low": 1, "high": 4, "max_probes": 3},
              "warmup_requests": 1, "request_timeout_s": timeout_s},
        # both workloads for every target (a local.yaml target's own list names others)
        targets=[{k: v for k, v in t.items() if k != "workloads"} for t in targets])
    return data


def test_a_trace_and_an_slo_search_from_yaml_land_in_parquet_and_the_digest(tmp_path,
                                                                            monkeypatch):
    """Both asked for in a sweep file, run by `servebench run` (the DAG's steps: publish
    through the data contract, detect, digest) against llama-server."""
    from servebench.cli import main
    from servebench.results.store import ResultStore

    data = _trace_and_search(
        [{"name": "llama", "stack": "llama_cpp", "golden_sets": [], "baseline": "f16",
          "variants": [VARIANT]}],
        # an SLO that one request at a time meets even on a busy 2-core host: this test is
        # about where the search's answer lands, not about the host's speed
        ttft_ms=250, time_scale=0.25, output_tokens=32, timeout_s=60)
    data["name"] = "kinds"
    sweep = tmp_path / "kinds.yaml"
    sweep.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    assert main(["run", str(sweep), "--run-id", "kinds"]) == 0
    store = ResultStore(str(tmp_path / "data"))
    cells = {c["load_point"]: c for c in store.read_table("cells").to_pylist()}
    assert set(cells) == {"trace", "slo"}
    assert cells["trace"]["load_mode"] == "trace" and cells["trace"]["n_requests"] == 24
    slo = cells["slo"]
    assert slo["load_mode"] == "slo" and slo["slo_probes_json"]
    assert slo["status"] == "ok" and 1 <= slo["max_load_within_slo"] <= 4
    [digest] = (tmp_path / "data" / "digests").rglob("*.md")
    assert "## Load within SLO" in digest.read_text()


def test_vllm_replays_a_trace_and_searches_its_load_within_slo(tmp_path):
    """The same two from the spec against vLLM's CPU build (the local sweep's bf16 variant,
    automatic prefix caching on, KV blocks of the trace's 32 tokens): the trace's shared
    blocks reach its cache, and the search keeps a probe that held."""
    import json

    local = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    [vllm] = [t for t in local["targets"] if t["name"] == "adder-vllm"]
    # its CPU build caches whole 128-token blocks unless told: the trace's are 32
    data = _trace_and_search(
        [{**vllm, "golden_sets": [], "variants": [
            {**vllm["variants"][0], "extra_args": ["--block-size", "32"]}]}],
        ttft_ms=2000, time_scale=0.5, output_tokens=16, timeout_s=120)
    spec = parse_sweep(data, "test")
    target = spec.targets[0]
    result = VariantRunner(spec, target, target.variants[0], run_id="t",
                           settings=get_settings(),
                           provisioner=LocalProvisioner(tmp_path)).run()
    cells = {c["load_point"]: c for c in result.cells}
    trace, slo = cells["trace"], cells["slo"]
    for cell in (trace, slo):
        assert cell["status"] == "ok" or str(cell["reason"]).startswith("client_saturated"), \
            cell["reason"]
    assert trace["n_ok"] == 24 and trace["prefix_cache_expected"] > 0.2
    assert trace["prefix_cache_hit_rate"] > 0.1
    probes = json.loads(slo["slo_probes_json"])
    assert probes[0]["load"] == 1 and slo["max_load_within_slo"] >= 1
    assert slo["concurrency"] == slo["max_load_within_slo"]
