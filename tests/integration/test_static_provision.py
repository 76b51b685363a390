"""A target with ``provision: {kind: static}``: a llama-server that someone else runs (here
started by the test, on loopback) is measured as it is -- health-checked, its cells and golden
set run through the same VariantRunner the DAG uses, and left running afterwards; one that
does not answer becomes failed cells that say so."""

import pytest
from measured import assert_measured
from servebench.bench import VariantRunner
from servebench.config import parse_sweep
from servebench.provision import get_provisioner
from servebench.provision.local import free_port
from servebench.settings import PROJECT_ROOT, get_settings

pytestmark = pytest.mark.integration


def _spec(build, base_url: str, served_model: str, **provision):
    data = build([{
        "name": "shared-box", "stack": "llama_cpp", "golden_sets": ["addition"],
        "provision": {"kind": "static", "hardware": "the team's shared box", **provision},
        "variants": [{"name": "running", "model": served_model,
                      "endpoint": {"base_url": base_url}}],
    }], input_tokens=32, output_tokens=24, num_requests=8, concurrency=2)
    return parse_sweep(data, "test")


def _run(spec, adapter=None, **runner):
    settings = get_settings()
    target = spec.targets[0]
    provisioner = get_provisioner("static").attach("t", {}, settings)
    return VariantRunner(spec, target, target.variants[0], run_id="t", settings=settings,
                         provisioner=provisioner, adapter=adapter, **runner).run()


def test_a_running_server_is_measured_as_it_is_and_left_running(llama_server,
                                                                 local_sweep):
    server = llama_server
    result = _run(_spec(local_sweep, server.base_url, server.served_model))
    [cell] = result.cells
    assert_measured([cell])  # measured as it is (how this host scheduled the client aside)
    assert cell["hardware"] == "the team's shared box"
    # what the server itself says it runs (llama.cpp /props build_info)
    import httpx

    assert cell["engine_version"] == httpx.get(server.base_url + "/props").json()["build_info"]
    assert cell["launch_args"] is None  # nothing was launched
    assert cell["accuracy"] is not None and len(result.evals) == 200
    assert cell["server_metrics_json"]  # its /metrics scraped around the cell
    assert get_provisioner("static").attach("t", {}, get_settings()).teardown() == []
    assert httpx.get(server.base_url + "/health").status_code == 200  # still serving


def test_an_endpoint_that_does_not_answer_fails_its_cells_with_why(local_sweep):
    port = free_port()  # nothing listens there
    result = _run(_spec(local_sweep, f"http://127.0.0.1:{port}", "adder", health_timeout_s=1.0))
    [cell] = result.cells
    assert cell["status"] == "failed"
    assert f"static endpoint http://127.0.0.1:{port}/health not healthy" in cell["reason"]
    assert "ConnectError" in cell["reason"]


def test_a_stack_that_cannot_force_lengths_is_measured_at_natural_length(llama_server,
                                                                          local_sweep):
    """The path TGI and a hosted OpenAI-schema API take (here a llama-server told it cannot
    force lengths): each answer ends where the model ends it, capped at the workload's length;
    the cell says length_control natural and is judged without the exact-length rule."""
    from servebench.stacks.llama_cpp import LlamaCppStack

    class CannotForceLengths(LlamaCppStack):
        def forces_length(self, variant):
            return False

    server = llama_server
    result = _run(_spec(local_sweep, server.base_url, server.served_model),
                  adapter=CannotForceLengths())
    [cell] = result.cells
    assert cell["length_control"] == "natural"
    # (a short natural answer may arrive in one read: timing_unresolved is still the rule's)
    assert cell["status"] in ("ok", "invalid") and "exact length" not in (cell["reason"] or "")
    assert all(r["output_tokens"] <= 24 for r in result.requests if r["ok"])  # capped
    assert cell["accuracy"] is not None  # the golden set, as for every stack


def test_a_retried_unit_meets_none_of_its_first_trys_prompts_in_the_cache(llama_server,
                                                                          local_sweep):
    """The nightly's retry runs a unit again (one its first try did not keep) against a server
    that outlived that try and kept its prompts cached -- here someone else's, which outlives
    every try. The retry's cells draw prompts of their own (the task's try in their key): the
    server's cache holds none of them, as the first try's prompts sent again would show."""
    server = llama_server
    spec = parse_sweep(local_sweep([{
        "name": "shared-box", "stack": "llama_cpp", "golden_sets": [],
        "provision": {"kind": "static"},
        "variants": [{"name": "running", "model": server.served_model,
                      "endpoint": {"base_url": server.base_url}}],
    }], input_tokens=64, output_tokens=8, num_requests=16, concurrency=2), "test")

    def unit(try_number: int) -> dict:
        [cell] = _run(spec, prompt_seed=4242, try_number=try_number).cells  # the plan's seed
        assert cell["n_ok"] == 16, cell["reason"]
        return cell

    first, resent, retry = unit(1), unit(1), unit(2)
    # the same try's prompts again: served from the cache the first try left, so invalid
    assert resent["prompt_key"] == first["prompt_key"]
    assert "prefix_cache_reuse" in resent["reason"] and resent["prefix_cache_hit_rate"] > 0.5
    # the retry's own: a cold cache, as the workload implies (a loaded host may still stall
    # the client, which is another rule's)
    assert retry["prompt_key"].startswith("4242:fixed:c2:r0:try2")
    for cell in (first, retry):
        assert "prefix_cache_reuse" not in (cell["reason"] or ""), cell["reason"]


def test_a_suspect_on_a_static_endpoint_is_re_measured_there_interleaved(llama_server,
                                                                        local_sweep, tmp_path):
    """The same morning's confirmation on a static target: nothing is launched, so each
    "relaunch" re-measures the running servers' suspect cell, the suspect's server
    interleaved ABBA with its reference's -- the host's minutes hit both sides alike -- and
    both are left running."""
    import httpx
    import yaml
    from servebench.bench.confirm import remeasure
    from servebench.plan import make_plan
    from servebench.provision.local import LocalProvisioner
    from servebench.stacks import get_stack
    from servebench.trends.confirm import Session, Suspect

    settings = get_settings()
    local = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    llama = next(t for t in local["targets"] if t["stack"] == "llama_cpp")
    owner = LocalProvisioner(tmp_path / "owner", settings)
    [target] = parse_sweep(local_sweep([{**llama, "name": "owner"}], input_tokens=32,
                                       output_tokens=8, num_requests=8, concurrency=2),
                           "owner").targets
    q8 = next(v for v in target.variants if v.name == "q8_0")
    other = owner.launch("owner-q8", target, q8, get_stack("llama_cpp"))
    try:
        data = local_sweep([{
            "name": "shared-box", "stack": "llama_cpp", "baseline": "a", "golden_sets": [],
            "provision": {"kind": "static"},
            "variants": [{"name": name, "model": server.served_model,
                          "endpoint": {"base_url": server.base_url}}
                         for name, server in (("a", llama_server), ("b", other))],
        }], input_tokens=32, output_tokens=8, num_requests=8, concurrency=2)
        path = tmp_path / "static-confirm.yaml"
        path.write_text(yaml.safe_dump(data))
        plan = make_plan(str(path))
        [workload] = plan.spec.workloads
        [point] = plan.spec.load.points_for(workload)
        suspect = Suspect(series_id="s", target="shared-box", stack="llama_cpp", variant="b",
                          workload=workload.name, load_point=point.label,
                          metric="tpot_ms_p50", source="suspect", value=2.0, level=1.0,
                          noise=0.1, start=0, night=0)
        session = Session("shared-box", "b", "a", suspects=[suspect])
        [cell] = session.cells
        done = remeasure(plan, [session], "static-confirm", settings,
                         launches=2)[("shared-box", "b")]
        assert done.failure is None
        for side in (done.suspect, done.reference):  # each re-measure valid, none cached
            assert len(side[cell]) == 2 and all(row and row["tpot_ms_p50"] > 0
                                                 for row in side[cell]), side
        for server in (llama_server, other):  # still serving
            assert httpx.get(server.base_url + "/health").status_code == 200
    finally:
        owner.stop(other)
