"""Recipes made real (servebench.quantize): adder-3m quantized by llm-compressor in
.venv-quant -- W4A16 by GPTQ on 64 sums (a preset, careful), W4A16 by round to nearest at
group 256 without calibration (careless), W8A8 INT8 by round to nearest (a team's recipe
file) -- through the pipeline's quantize step, once (a second step finds them in the cache),
then each served by vLLM's CPU build through the bench step (bench.host.bench_unit, as the
nightly runs it): every cell ok, the golden set answered, the rows naming the base model and
the recipe's hash, the launch naming the quantized checkpoint; the gate sees the careless
recipe's damage against the careful one and passes the INT8 one."""

import json
from pathlib import Path

import pytest
from servebench.bench.host import bench_unit
from servebench.config import parse_sweep
from servebench.evals.gate import gate_columns
from servebench.pipeline import quantize_recipes
from servebench.plan import plan_spec
from servebench.provision.local import LocalProvisioner
from servebench.results.store import ResultStore
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.stacks.vllm import cpu_flags

pytestmark = pytest.mark.integration

BASE = "include/models/adder-3m"
COMMON = {"model": BASE, "quant": "compressed-tensors", "max_num_seqs": 4,
          "max_model_len": 512, "threads": 1}
CALIBRATION = "include/calibration/adder-sums.jsonl"  # none of the golden set's sums
RECIPE_FILE = """\
quant_stage:
  quant_modifiers:
    QuantizationModifier:
      targets: [Linear]
      ignore: [lm_head]
      scheme: W8A8
"""


def test_recipes_are_made_once_and_served_by_vllms_cpu_build(tmp_path, local_sweep):
    (tmp_path / "w8a8-rtn.yaml").write_text(RECIPE_FILE)
    variants = [
        {"name": "w4a16-gptq", **COMMON, "dtype": "bfloat16",  # the CPU build's W4A16: bf16
         "recipe": {"scheme": "W4A16", "method": "gptq", "group_size": 128,
                    "calibration": {"dataset": CALIBRATION, "samples": 64, "seq_len": 16}}},
        # the CPU build's W8A8 in the target's one dtype (with AMX its kernel computes in
        # bfloat16 or half only)
        {"name": "w8a8-rtn", **COMMON, "dtype": "bfloat16",
         "recipe": {"file": str(tmp_path / "w8a8-rtn.yaml")}},
        # careless: round to nearest, no calibration, the coarsest group hidden_size takes
        {"name": "w4a16-careless", **COMMON, "dtype": "bfloat16",
         "recipe": {"scheme": "W4A16", "method": "rtn", "group_size": 256}},
    ]
    settings = get_settings().model_copy(update={
        "cache": tmp_path / "cache", "results_uri": str(tmp_path / "data"),
        "work_dir": tmp_path / "runs"})
    if not (settings.quant_venv / "bin" / "python").exists():
        pytest.fail(f"no quantization venv at {settings.quant_venv}: run `make quant`")
    data = local_sweep([{"name": "adder-vllm", "stack": "vllm", "baseline": "w4a16-gptq",
                         "golden_sets": ["addition"], "variants": variants}],
                       input_tokens=32, output_tokens=8, num_requests=8, concurrency=2)
    plan = plan_spec(parse_sweep(data, "quantized.yaml"), "quantized.yaml", settings=settings)
    # W4A16 runs on AVX-512F CPUs only (this kind of worker's CPUs vary): refused elsewhere
    refused = {u.variant for u in plan.units if u.refused}
    assert refused == (set() if "avx512f" in cpu_flags() else {"w4a16-gptq", "w4a16-careless"})
    made = quantize_recipes(plan, "q1", settings)
    assert sorted(made) == sorted(u.quantized.recipe_hash for u in plan.units if not u.refused)
    assert all(m["seconds"] > 0 for m in made.values()), made
    again = quantize_recipes(plan, "q1", settings)  # the cache has both: nothing is made
    assert {m["seconds"] for m in again.values()} == {0.0}

    store = ResultStore(settings.results_uri)
    base_bytes = (PROJECT_ROOT / BASE / "model.safetensors").stat().st_size
    formats = {"w4a16-gptq": "pack-quantized", "w8a8-rtn": "int-quantized",
               "w4a16-careless": "pack-quantized"}
    for unit in plan.units:
        provisioner = LocalProvisioner(tmp_path / "state", settings)
        if unit.refused:
            summary = bench_unit(plan, unit, provisioner, "q1", settings, store)
            assert summary["failed"] == summary["cells"] == 1, summary
            [cell] = store.read_scratch("q1")[unit.unit_id]["cells"].to_pylist()
            assert "avx512f" in cell["reason"], cell["reason"]
            continue
        checkpoint = Path(unit.quantized.path)
        config = json.loads((checkpoint / "config.json").read_text())
        assert config["quantization_config"]["format"] == formats[unit.variant]
        assert (checkpoint / "model.safetensors").stat().st_size < base_bytes
        assert (checkpoint / "recipe.yaml").is_file() and (checkpoint / "quantize.log").is_file()

        summary = bench_unit(plan, unit, provisioner, "q1", settings, store)
        assert summary["ok"] == summary["cells"] == 1, summary
        rows = store.read_scratch("q1")[unit.unit_id]
        [cell] = rows["cells"].to_pylist()
        assert cell["status"] == "ok", cell["reason"]
        assert cell["model"] == BASE and cell["recipe_hash"] == unit.quantized.recipe_hash
        assert str(checkpoint) in json.loads(cell["launch_args"])
        evals = rows["evals"].to_pylist()
        assert len(evals) == 200
        right = sum(bool(e["correct"]) for e in evals)
        # f32 answers 194 (servebench run, 2026-12-04): a sum or two may flip either way
        assert right >= 188, f"{unit.variant}: {right}/200 sums right"
    if refused:
        return
    # the gate against the careful recipe: the careless one's damage is seen (served here on
    # 2026-12-05: 191 of 200, 3 flipped to wrong and none to right, "below the 99% floor, but
    # 200 items cannot confirm the drop"), the careful INT8 one passes
    evals = [e for rows in store.read_scratch("q1").values() for e in rows["evals"].to_pylist()]
    gates = gate_columns(plan.spec, evals)
    careless = gates[("adder-vllm", "w4a16-careless")]
    assert careless["gate_verdict"] in ("inconclusive", "fail"), careless["gate_reason"]
    assert "below the 99% floor" in careless["gate_reason"]
    assert gates[("adder-vllm", "w8a8-rtn")]["gate_verdict"] == "pass"
