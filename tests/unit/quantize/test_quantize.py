"""A variant's quantization recipe (servebench.config.quantize, servebench.quantize): what the
spec and the plan refuse, each naming the file and the field; the hash that names a recipe's
checkpoint (it moves with every input and with nothing else); the plan launching the
checkpoint while the rows keep the base model; a recipe that cannot be made becoming its
units' failed cells; and trends attribution naming a changed recipe."""

import datetime as dt
import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from servebench.bench.host import bench_unit
from servebench.bench.rows import cell_identity
from servebench.config import parse_sweep
from servebench.errors import PlanError, SpecError
from servebench.pipeline import plan_run, quantize_recipes
from servebench.plan import Plan
from servebench.provision.local import LocalProvisioner
from servebench.quantize.inputs import checkpoint_for
from servebench.results.store import ResultStore
from servebench.settings import PROJECT_ROOT
from servebench.stacks import get_stack
from servebench.stacks.vllm import cpu_recipe_problems, cpu_recipe_refusals
from servebench.trends.attribution import NOTHING_CHANGED, recorded_change

sys.path.insert(0, str(Path(__file__).parents[1]))
from test_plan import _settings, _sweep  # the plan tests' project and sweep

VLLM = 2  # the local sweep's vLLM target
AT = f"targets[{VLLM}](name=adder-vllm).variants[2](name=q)"
BASE_CONFIG = "include/models/adder-3m/config.json"
GPTQ = {"scheme": "W4A16", "method": "gptq", "group_size": 128,
        "calibration": {"dataset": "addition", "samples": 16, "seq_len": 16}}


@pytest.fixture(autouse=True)
def _avx512_worker(monkeypatch):
    """A worker whose CPU runs every format the CPU build serves (CI's CPUs vary): the
    refusal of the others is tested on its own."""
    monkeypatch.setattr("servebench.stacks.vllm.cpu_flags", lambda: {"avx2", "avx512f"})


def _variant(recipe: dict, **kw) -> dict:
    return {"name": "q", "model": "include/models/adder-3m", "quant": "compressed-tensors",
            "dtype": "bfloat16", "max_num_seqs": 4, "max_model_len": 512, "threads": 1,
            "recipe": recipe, **kw}


def _with(recipe: dict, target: int = VLLM, **kw):
    def edit(data):
        _unquantized(data)
        data["targets"][target]["variants"].append(_variant(recipe, **kw))
    return edit


def _unquantized(data: dict) -> dict:
    """The local sweep without its own quantized vLLM variants (its bf16 and bf16-nocache
    alone), and the cross-stack groups of full precision: each test adds its own."""
    data["targets"][VLLM]["variants"] = data["targets"][VLLM]["variants"][:2]
    data["cross_stack"] = [g for g in data["cross_stack"] if g.get("precision") != "mixed"]
    return data


def _local() -> dict:
    return _unquantized(yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text()))


@pytest.mark.parametrize("recipe, field, says", [
    ({**GPTQ, "scheme": "W3A5"}, "recipe.scheme", "Input should be 'W4A16'"),
    ({**GPTQ, "method": "hqq"}, "recipe.method", "Input should be 'gptq'"),
    ({**GPTQ, "group_size": 0}, "recipe.group_size", "greater than 0"),
    ({**GPTQ, "scheme": "W8A8"}, "recipe",
     "group_size: scheme 'W8A8' quantizes weights per channel, not in groups"),
    ({**GPTQ, "method": "smoothquant+gptq"}, "recipe",
     "method 'smoothquant+gptq' does not make scheme 'W4A16'"),
    ({"scheme": "W4A16", "method": "gptq"}, "recipe", "calibration: method 'gptq'"),
    ({"scheme": "W4A16", "method": "rtn", "calibration": {"dataset": "addition"}}, "recipe",
     "calibration: method 'rtn' with scheme 'W4A16' uses no calibration data"),
    ({"file": "x.yaml", "scheme": "W8A8"}, "recipe", "file names the whole recipe: drop scheme"),
    ({"method": "gptq"}, "recipe", "give scheme and method"),
])
def test_a_recipe_the_spec_cannot_take_names_the_file_and_field(recipe, field, says):
    data = _local()
    data["targets"][VLLM]["variants"].append(_variant(recipe))
    with pytest.raises(SpecError) as err:
        parse_sweep(data, "sweeps/x.yaml")
    line = next(line for line in str(err.value).splitlines() if AT in line)
    assert line.strip().startswith(f"sweeps/x.yaml: field {AT}.{field}"), line
    assert says in line


@pytest.mark.parametrize("quant", ["w8a8_int8", "none", "w8a8_fp8"])
def test_a_recipe_whose_scheme_and_quant_disagree_names_both_the_file_and_field(quant):
    data = _local()
    data["targets"][VLLM]["variants"].append(_variant(GPTQ, quant=quant))
    with pytest.raises(SpecError) as err:
        parse_sweep(data, "sweeps/x.yaml")
    [line] = [line for line in str(err.value).splitlines() if AT in line]
    assert line.strip() == (f"sweeps/x.yaml: field {AT}.recipe: Value error, scheme 'W4A16' "
                            f"disagrees with quant {quant!r}: its checkpoint is quant w4a16 or "
                            "compressed-tensors")
    # the format's own name, llm-compressor's generic one, in any case, agree
    for agreeing in ("w4a16", "W4A16", "compressed-tensors"):
        data["targets"][VLLM]["variants"][-1]["quant"] = agreeing
        parse_sweep(data, "sweeps/x.yaml")


def test_the_plan_refuses_a_recipe_file_whose_scheme_disagrees_with_quant(tmp_path):
    (tmp_path / "r.yaml").write_text("quant_stage:\n  quant_modifiers:\n    "
                                     "QuantizationModifier:\n      scheme: W8A8\n")
    with pytest.raises(PlanError) as err:
        plan_run(str(_sweep(tmp_path, _with({"file": "r.yaml"}, quant="w4a16"))),
                 settings=_settings(tmp_path))
    assert (f"sweep.yaml: field {AT}.recipe.file: {tmp_path}/r.yaml's scheme 'W8A8' disagrees "
            "with quant 'w4a16': its checkpoint is quant w8a8_int8 or compressed-tensors") \
        in str(err.value)


@pytest.mark.parametrize("target, stack", [(0, "llama_cpp"), (1, "transformers")])
def test_a_recipe_on_a_stack_that_cannot_serve_compressed_tensors_is_refused(target, stack):
    data = _local()
    data["targets"][target]["variants"][0]["recipe"] = GPTQ
    with pytest.raises(SpecError, match=rf"sweeps/x.yaml: field targets\[{target}\].*"
                                        rf"variants\[0\]\(name=\w+\)\.recipe: stack '{stack}' "
                                        "has no option recipe"):
        parse_sweep(data, "sweeps/x.yaml")


def test_the_plan_refuses_a_group_size_the_models_dimensions_do_not_take(tmp_path):
    with pytest.raises(PlanError) as err:
        plan_run(str(_sweep(tmp_path, _with({**GPTQ, "group_size": 96}))),
                 settings=_settings(tmp_path))
    assert (f"sweep.yaml: field {AT}.recipe.group_size: 96 does not divide the model's "
            "hidden_size 256, num_attention_heads x head_dim 256 "
            "(include/models/adder-3m/config.json)") in str(err.value)
    # 768 (intermediate_size) divides by 96 and 256 by 64: 64 passes
    plan_run(str(_sweep(tmp_path, _with({**GPTQ, "group_size": 64}))),
             settings=_settings(tmp_path, cache=tmp_path / "cache"))


def test_the_plan_refuses_calibration_data_and_recipe_files_it_cannot_read(tmp_path):
    (tmp_path / "list.yaml").write_text("- GPTQModifier\n")
    bad = _with({"scheme": "W8A8", "method": "smoothquant+gptq",
                 "calibration": {"dataset": "nowhere.jsonl"}})
    with pytest.raises(PlanError) as err:
        plan_run(str(_sweep(tmp_path, bad)), settings=_settings(tmp_path))
    assert (f"field {AT}.recipe.calibration.dataset: 'nowhere.jsonl' is neither a golden set "
            "of this sweep nor a readable file") in str(err.value)
    listed = _with({"file": "list.yaml", "calibration": {"dataset": "addition"}})
    with pytest.raises(PlanError) as err:
        plan_run(str(_sweep(tmp_path, listed)), settings=_settings(tmp_path))
    assert f"field {AT}.recipe.file: {tmp_path}/list.yaml is not an llm-compressor recipe" \
        in str(err.value)
    # llm-compressor itself would die deep inside: "'NoneType' object is not iterable"
    (tmp_path / "gptq.yaml").write_text("stage:\n  modifiers:\n    GPTQModifier: {scheme: W4A16}\n")
    with pytest.raises(PlanError) as err:
        plan_run(str(_sweep(tmp_path, _with({"file": "gptq.yaml"}))), settings=_settings(tmp_path))
    assert (f"field {AT}.recipe.calibration: {tmp_path}/gptq.yaml's GPTQModifier calibrates on "
            "data: name a dataset") in str(err.value)


def test_the_cpu_build_refuses_what_the_workers_cpu_or_dtype_cannot_run():
    spec = _local()
    spec["targets"][VLLM]["variants"].append(_variant(GPTQ, dtype="float32"))
    q = parse_sweep(spec, "x").targets[VLLM].variants[2]
    # the worker's CPU is no fault of the spec: a refusal (the unit alone fails) ...
    [refusal] = cpu_recipe_refusals(q, {"avx2", "fma"})
    assert refusal.startswith("field recipe.scheme 'W4A16': vLLM's CPU build runs it with "
                              "cpu_gemm_wna16, built only for CPUs with avx512f, which "
                              "this worker lacks")
    assert cpu_recipe_refusals(q, {"avx2", "avx512f"}) == []
    # ... a dtype it cannot compute in is (the sweep stops at plan)
    [problem] = cpu_recipe_problems(q)
    assert problem.startswith("field dtype 'float32': vLLM's CPU build computes scheme "
                              "'W4A16' in bfloat16 only")
    w4 = q.model_copy(update={"dtype": "bfloat16"})
    assert cpu_recipe_problems(w4) == []
    w8a8 = w4.model_copy(update={"recipe": w4.recipe.model_copy(
        update={"scheme": "W8A8", "group_size": None})})
    assert cpu_recipe_refusals(w8a8, {"avx2"}) == []  # oneDNN: no instruction required
    # with AMX its symmetric-activation W8A8 runs on sgl's kernel, which computes in bf16/half
    assert cpu_recipe_refusals(w8a8, {"avx512f", "amx_tile"}) == []  # bfloat16
    f32 = w8a8.model_copy(update={"dtype": "float32"})
    assert cpu_recipe_refusals(f32, {"avx512f"}) == []
    [amx] = cpu_recipe_refusals(f32, {"avx512f", "amx_tile"})
    assert amx.startswith("field dtype 'float32': on this worker's CPU (amx_tile in "
                          "/proc/cpuinfo) vLLM's CPU build runs scheme 'W8A8' with sgl's "
                          "int8_scaled_mm_with_quant, which computes in bfloat16 or float16 "
                          "only: 'int8_scaled_mm_with_quant: expect A to be bfloat16 or half.'")


# the CPU kinds a worker of this project runs on: an Intel Xeon with AMX, an AMD EPYC with
# AVX-512 (BF16, no AMX), and a CPU below AVX-512 (/proc/cpuinfo's flags)
AMX_XEON = {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16",
            "amx_int8"}
AVX512_EPYC = {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"}
AVX2_ONLY = {"avx2", "fma"}


@pytest.mark.parametrize("flags, refused", [
    (AMX_XEON, {}), (AVX512_EPYC, {}),
    (AVX2_ONLY, {"w4a16-gptq": "field recipe.scheme 'W4A16': vLLM's CPU build runs it with "
                               "cpu_gemm_wna16, built only for CPUs with avx512f",
                 "w4a16-awq": "field recipe.scheme 'W4A16_ASYM'",
                 "bf16-kv-fp8": "field kv_cache_dtype 'fp8': vLLM's CPU build keeps an fp8 "
                                "KV cache only on CPUs with avx512f or amx_tile"})])
def test_the_local_defaults_vllm_variants_run_on_every_avx512_worker(monkeypatch, flags,
                                                                     refused):
    """Every vLLM unit of the local default is served on AMX and on AVX-512 CPUs, none refused
    (one dtype, bfloat16, for the whole target); below AVX-512 what the CPU build cannot run
    is refused, the rest served."""
    import servebench.stacks.vllm as vllm_stack
    from servebench.settings import Settings

    monkeypatch.setattr(vllm_stack, "installed_build", lambda venv: ("cpu", "0.32.0"))
    monkeypatch.setattr(vllm_stack, "cpu_flags", lambda: flags)
    spec = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    target = parse_sweep(spec, "local.yaml").targets[VLLM]
    adapter, settings = get_stack("vllm"), Settings(project_root=PROJECT_ROOT)
    assert {v.dtype for v in target.variants} == {"bfloat16"}
    found = {v.name: adapter.hardware_refusals(v, settings) for v in target.variants}
    assert {name for name, why in found.items() if why} == set(refused)
    for name, phrase in refused.items():
        [why] = found[name]
        assert why.startswith(phrase), why
    assert all(adapter.local_problems(v, settings) == [] for v in target.variants)


def test_a_recipe_files_schemes_are_read_for_the_refusals(tmp_path):
    from servebench.settings import Settings
    from servebench.stacks.vllm import recipe_schemes

    (tmp_path / "r.yaml").write_text("quant_stage:\n  quant_modifiers:\n    "
                                     "QuantizationModifier:\n      scheme: W8A8\n")
    spec = _local()
    spec["targets"][VLLM]["variants"].append(_variant({"file": "r.yaml"}, dtype="float32"))
    v = parse_sweep(spec, "x").targets[VLLM].variants[2]
    assert recipe_schemes(v, Settings(project_root=tmp_path)) == ["W8A8"]
    [amx] = cpu_recipe_refusals(v, {"amx_tile"}, ["W8A8"])
    assert amx.startswith("field dtype 'float32': on this worker's CPU (amx_tile")
    assert recipe_schemes(v, Settings(project_root=tmp_path / "nowhere")) == []


def _planned(tmp_path: Path, recipe: dict = GPTQ, **kw) -> Plan:
    settings = _settings(tmp_path, cache=tmp_path / "cache", **kw)
    return Plan.from_xcom(plan_run(str(_sweep(tmp_path, _with(recipe))), settings=settings))


def test_the_unit_launches_the_recipes_checkpoint_and_its_rows_keep_the_base(tmp_path):
    plan = _planned(tmp_path)
    unit = plan.units[-1]
    assert unit.quantized.path == str(tmp_path / "cache" / "quantized" /
                                      unit.quantized.recipe_hash)
    variant = plan.variant_of(unit)
    assert variant.model == unit.quantized.path and variant.base_model == \
        "include/models/adder-3m"
    point = plan.spec.load.points()[0]
    row = cell_identity(plan.spec, plan.target_of(unit), variant, "w", point)
    assert row["model"] == "include/models/adder-3m"
    assert row["recipe_hash"] == unit.quantized.recipe_hash
    other = plan.units[-2]  # a variant without a recipe launches its own model
    assert plan.variant_of(other).model == "include/models/adder-3m" and other.quantized is None


def test_the_recipe_hash_moves_with_each_input_and_with_nothing_else(tmp_path):
    base = tmp_path / "base"
    shutil.copytree(PROJECT_ROOT / "include/models/adder-3m", base)
    calibration = tmp_path / "calib.jsonl"
    calibration.write_text('{"text": "1+1=2"}\n')
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text("quant_stage:\n  quant_modifiers:\n    GPTQModifier: {scheme: W4A16}\n")
    (tmp_path / "requirements-quant.txt").write_text("llmcompressor==0.14.0.1\n")
    settings = _settings(tmp_path, cache=tmp_path / "cache")

    def digest(recipe: dict) -> str:
        data = _local()
        data["targets"][VLLM]["variants"].append(_variant(recipe, model=str(base)))
        spec = parse_sweep(data, "x")
        return checkpoint_for(spec, spec.targets[VLLM].variants[2], settings).recipe_hash

    preset = {**GPTQ, "calibration": {"dataset": str(calibration)}}
    from_file = {"file": str(recipe_file), "calibration": {"dataset": str(calibration)}}
    seen = {digest(preset), digest(from_file)}
    assert digest(preset) in seen and len(seen) == 2  # stable, and the two recipes differ
    assert digest({**preset, "group_size": 64}) not in seen
    assert digest({**preset, "ignore": []}) not in seen
    changes = [
        (calibration, '{"text": "1+2=3"}\n'),  # the calibration data's bytes
        (recipe_file, recipe_file.read_text().replace("W4A16", "W4A16_ASYM")),  # the file's
        (tmp_path / "requirements-quant.txt", "llmcompressor==0.15.0\n"),  # the tools' pins
    ]
    for path, text in changes:
        before = digest(preset), digest(from_file)
        path.write_text(text)
        after = digest(preset), digest(from_file)
        assert after != before, path.name
        seen |= set(after)
    before = digest(preset)
    weights = base / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")  # the base checkpoint's files
    from servebench.provenance import file_sha256
    file_sha256.cache_clear()
    assert digest(preset) != before


def test_a_recipe_that_cannot_be_made_fails_its_units_cells_with_why(tmp_path):
    plan = _planned(tmp_path, quant_venv=tmp_path / "no-venv")
    seen = []  # what `servebench run` prints before each recipe
    made = quantize_recipes(plan, "r1", settings=_settings(
        tmp_path, cache=tmp_path / "cache", quant_venv=tmp_path / "no-venv"),
        on_recipe=seen.append)
    assert [unit.unit_id for unit in seen] == ["adder-vllm--q"]
    [(digest, outcome)] = made.items()
    assert "no quantization venv at" in outcome["failed"] and "make quant" in outcome["failed"]
    store = ResultStore(str(tmp_path / "data"))
    assert store.scratch_units("r1") == {plan.units[-1].unit_id}  # the bench skips it
    cells = [c for t in store.read_scratch("r1").values() for c in t["cells"].to_pylist()]
    assert cells and all(c["status"] == "failed" and digest in c["reason"] and
                         "no quantization venv" in c["reason"] for c in cells)


def test_a_worker_without_the_formats_instruction_refuses_that_unit_alone(tmp_path,
                                                                          monkeypatch):
    """The spec is right, this worker's CPU cannot run it: the plan warns and goes on, the
    unit is neither quantized nor launched, and its cells are stored failed with the reason;
    the bench's own check says the same on a worker the plan did not see."""
    monkeypatch.setattr("servebench.stacks.vllm.cpu_flags", lambda: {"avx2", "fma"})
    plan = _planned(tmp_path)
    refused = {u.unit_id: u.refused for u in plan.units if u.refused}
    assert list(refused) == ["adder-vllm--q"]
    assert refused["adder-vllm--q"].startswith(
        "refused at plan: field recipe.scheme 'W4A16': vLLM's CPU build runs it with "
        "cpu_gemm_wna16, built only for CPUs with avx512f, which this worker lacks")
    assert any(f"field {AT}: vllm: refused, its cells stored failed" in w for w in plan.warnings)
    settings = _settings(tmp_path, cache=tmp_path / "cache")
    assert quantize_recipes(plan, "r1", settings=settings) == {}  # nothing made for it
    store = ResultStore(str(tmp_path / "data"))
    unit = plan.units[-1]
    done = bench_unit(plan, unit, provisioner=None, run_id="r1", settings=settings,
                      store=store)
    assert done["failed"] == done["cells"] > 0 and done["ok"] == 0
    cells = [c for t in store.read_scratch("r1").values() for c in t["cells"].to_pylist()]
    assert cells and all(c["status"] == "failed" and c["reason"] == unit.refused
                         for c in cells)
    # the bench's own check on its worker (a plan made elsewhere did not refuse it)
    variant = plan.variant_of(unit)
    problems = LocalProvisioner.refusals(plan.target_of(unit), variant,
                                         get_stack("vllm"), settings)
    assert problems and "avx512f" in problems[0]


def test_attribution_names_a_changed_recipe():
    where = {"target": "t", "stack": "vllm", "variant": "w4a16", "workload": "w",
             "load_point": "c1"}

    def spec(group: int) -> str:
        return json.dumps({"name": "s", "targets": [{"name": "t", "variants": [
            {"name": "w4a16", "recipe": {"scheme": "W4A16", "group_size": group}}]}]})

    runs = pd.DataFrame({"run_id": ["r0", "r1"], "run_date": [dt.date(2026, 12, 1),
                                                               dt.date(2026, 12, 2)],
                         "suite_git_sha": "abc", "sweep_hash": ["h0", "h1"],
                         "spec_json": [spec(128), spec(32)]})
    cells = pd.DataFrame([{**where, "run_id": f"r{i}", "model_file_sha256": "m" * 64,
                           "recipe_hash": digest} for i, digest in enumerate(["aaaa", "bbbb"])])
    assert recorded_change(cells, runs, where, 1) == \
        "recipe_hash aaaa -> bbbb; sweep variant.recipe.group_size 128 -> 32"
    # the night the suite gained the recipe field, every older spec lacks it: no sweep change
    before = json.dumps({"name": "s", "targets": [{"name": "t", "variants": [
        {"name": "w4a16", "model": "m"}]}]})
    after = json.dumps({"name": "s", "targets": [{"name": "t", "variants": [
        {"name": "w4a16", "model": "m", "recipe": None}]}]})
    runs["spec_json"] = [before, after]
    cells["recipe_hash"] = None
    assert recorded_change(cells, runs, where, 1) == NOTHING_CHANGED


def test_the_cpu_build_refuses_8_bit_weight_only_quoting_the_engine():
    spec = _local()
    spec["targets"][VLLM]["variants"].append(_variant({**GPTQ, "scheme": "W8A16"}))
    q = parse_sweep(spec, "x").targets[VLLM].variants[2]
    [problem] = cpu_recipe_problems(q)
    assert problem.startswith("field recipe.scheme 'W8A16': vLLM's CPU build cannot serve it: "
                              "'Failed to find a kernel that can implement the WNA16 linear")


def test_a_hub_base_is_checked_from_the_hub_cache_or_said_unchecked(tmp_path, monkeypatch):
    from servebench.quantize.checks import recipe_problems

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    data = _local()
    data["targets"][VLLM]["variants"].append(_variant({**GPTQ, "group_size": 96},
                                                      model="org/base-model"))
    spec = parse_sweep(data, "x")
    target = spec.targets[VLLM]
    settings = _settings(tmp_path).model_copy(update={"project_root": PROJECT_ROOT})
    problems, warnings = recipe_problems(spec, target, target.variants[2], settings)
    assert not problems and warnings == [
        "recipe.group_size: not checked against the model's dimensions: 'org/base-model' has "
        "no config.json on this worker"]
    # the Hugging Face cache's copy, as `hf download` lays it out
    repo = tmp_path / "hub" / "models--org--base-model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / BASE_CONFIG, repo / "snapshots" / "abc123" / "config.json")
    problems, warnings = recipe_problems(spec, target, target.variants[2], settings)
    assert problems == ["recipe.group_size: 96 does not divide the model's hidden_size 256, "
                        "num_attention_heads x head_dim 256 (org/base-model/config.json)"]


def test_the_smoke_test_launches_a_recipe_variant_as_the_benchmark_does(tmp_path):
    """`servebench smoke` makes a recipe's checkpoint first (it would otherwise have served
    the base model and said the variant serves); one that cannot be made is its problem."""
    from servebench.config import load_sweep
    from servebench.smoke import smoke_sweep

    spec = load_sweep(_sweep(tmp_path, _with(GPTQ)))
    settings = _settings(tmp_path, cache=tmp_path / "cache", quant_venv=tmp_path / "none")
    spec = spec.model_copy(update={"targets": [spec.targets[VLLM].model_copy(
        update={"variants": spec.targets[VLLM].variants[2:]})]})
    [result] = smoke_sweep(spec, settings, tmp_path / "state")
    assert (result.variant, result.model) == ("q", "include/models/adder-3m")
    assert result.problem.startswith("its recipe failed: no quantization venv at ")
