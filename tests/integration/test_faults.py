"""Faults of the serving stack, injected into real streams: a fault-injecting proxy
(``fault_proxy.py``) on 127.0.0.1 in front of a real llama-server, measured as a static
endpoint through the VariantRunner the DAG uses. Two workloads per run: the proxy breaks the
chat requests of one (by their max_tokens) and leaves the other alone.

Each case asserts what a nightly job must guarantee: the hit cell is stored with a status that
is not ``ok`` (unless the fault leaves the data whole) and a reason that names the fault; the
other cell completes ``ok``; every request sent is stored, once. (Killing the real server
mid-cell and mid-golden-set: test_server_death.py; an endpoint that refuses connections or never
becomes healthy: test_static_provision.py and test_local_provisioner.py.)
"""

import pytest
from fault_proxy import FAULTS, FaultProxy, Faults
from measured import assert_measured, other_reasons
from servebench.bench import VariantRunner
from servebench.config import parse_sweep
from servebench.provision import get_provisioner
from servebench.settings import get_settings

pytestmark = pytest.mark.integration

HIT, CLEAN = 16, 24  # output tokens of the faulted and of the other workload (long enough
# that a loaded host does not deliver most answers in one read: timing_unresolved)
REQUESTS, WARMUP = 9, 2


def _spec(build, base_url: str, served_model: str):
    data = build([{
        "name": "proxied", "stack": "llama_cpp", "golden_sets": [],
        "provision": {"kind": "static", "hardware": "loopback", "health_timeout_s": 10},
        "variants": [{"name": "running", "model": served_model,
                      "endpoint": {"base_url": base_url}}],
    }], input_tokens=32, output_tokens=HIT, num_requests=REQUESTS, concurrency=3)
    data["workloads"].append({**data["workloads"][0], "name": "clean",
                              "output_tokens": CLEAN})
    data["workloads"][0]["name"] = "hit"
    data["load"].update(warmup_requests=WARMUP, request_timeout_s=3.0)
    return parse_sweep(data, "faults")


def _run(build, server, faults: Faults):
    settings = get_settings()
    with FaultProxy(server.base_url, faults) as proxy:
        spec = _spec(build, proxy.url, server.served_model)
        target = spec.targets[0]
        result = VariantRunner(spec, target, target.variants[0], run_id="faults",
                               settings=settings,
                               provisioner=get_provisioner("static").attach("f", {}, settings)
                               ).run()
    cells = {c["workload"]: c for c in result.cells}
    assert set(cells) == {"hit", "clean"}
    # the other workload's cell completes, whatever the fault did to the first
    assert_measured([cells["clean"]])
    # every request sent is stored, once: none lost, none twice
    for workload, cell in cells.items():
        rows = [r for r in result.requests if r["cell_id"] == cell["cell_id"]]
        assert len(rows) == REQUESTS + WARMUP, workload
        assert len({r["request_id"] for r in rows}) == len(rows)
        assert sum(not r["warmup"] for r in rows) == REQUESTS == cell["n_requests"]
    assert faults.faulted > 0
    return cells["hit"], [r for r in result.requests if r["cell_id"] == cells["hit"]["cell_id"]]


# fault kind, faulted every n-th hit request, expected status, words the reason must carry
CASES = [
    ("http_500", 3, "invalid", ["requests failed", "500"]),
    ("http_503", 1, "failed", ["all 9 requests failed", "503"]),
    ("http_429", 2, "invalid", ["requests failed", "429"]),
    ("bad_json", 1, "failed", ["bad JSON in SSE event"]),
    ("cut", 4, "invalid", ["requests failed"]),
    ("error_event", 1, "failed", ["StreamError", "injected: CUDA error: out of memory"]),
    ("stall", 5, "invalid", ["requests failed"]),
    ("wrong_model", 1, "invalid", ["served model 'some-other-model'"]),
]


@pytest.mark.parametrize(("kind", "every", "status", "words"), CASES,
                         ids=[c[0] for c in CASES])
def test_a_broken_stream_is_stored_with_its_reason(llama_server, local_sweep, kind, every,
                                                   status, words):
    assert kind in FAULTS
    cell, requests = _run(local_sweep, llama_server, Faults(kind, match=HIT, every=every))
    assert cell["status"] == status, (cell["status"], cell["reason"])
    for word in words:
        assert word in cell["reason"], cell["reason"]
    failed = [r for r in requests if not r["ok"]]
    if kind != "wrong_model":  # a wrong model is a whole response, from the wrong server
        assert failed and all(r["error"] for r in failed)  # each failed request says why
    if kind == "stall":  # the read deadline ended it, it did not hang the cell
        assert any("Timeout" in r["error"] or "Deadline" in r["error"] for r in failed)
    if kind == "cut":
        assert not any(r["ok"] and r["output_tokens"] != HIT for r in requests)


def test_a_stream_without_done_but_whole_is_ok(llama_server, local_sweep):
    # finish_reason and usage came, then the stream ended cleanly without [DONE]: the
    # response is whole, and counted as such
    cell, requests = _run(local_sweep, llama_server, Faults("no_done", match=HIT))
    assert cell["n_ok"] == REQUESTS and not other_reasons(cell), cell["reason"]
    assert all(r["ok"] and r["output_tokens"] == HIT for r in requests)


def test_a_slow_first_byte_is_measured_not_failed(llama_server, local_sweep):
    cell, _ = _run(local_sweep, llama_server, Faults("slow_first_byte", match=HIT, delay_s=0.4))
    assert cell["status"] == "ok", cell["reason"]
    assert cell["ttft_ms_p50"] >= 400  # the wait is in the time to first token
