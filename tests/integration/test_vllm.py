"""vLLM's CPU build (`make vllm`), the engine itself: the command lines the adapter renders are
ones its own parser takes, and a vLLM killed mid-cell is reported as llama-server is. The
nightly DAG test measures its cells (exact lengths, prefix cache on and off, telemetry)."""

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest
import yaml
from engine_variants import (
    VARIANTS,  # tests/engine_variants.py: what the facts test renders
)
from servebench.bench import VariantRunner
from servebench.config import VariantSpec, parse_sweep
from servebench.loadgen.engine import run_load_sync
from servebench.provision.local import LocalProvisioner
from servebench.settings import PROJECT_ROOT, Settings, get_settings
from servebench.stacks import get_stack

pytestmark = pytest.mark.integration


PARSE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
for argv in json.load(sys.stdin):
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    validate_parsed_serve_args(args)
print("parsed")
"""


def test_every_rendered_command_line_parses_with_the_installed_vllm(tmp_path):
    """What ``checked_versions`` claims for 0.32: vLLM 0.32's own parser (the API server's,
    which ``vllm serve`` shares) takes every flag and value the adapter renders, for the GPU
    variants of the engine-facts test, the GPU sweep's quantized and bf16 variants and the
    local sweep's CPU variants."""
    settings = get_settings()
    adapter = get_stack("vllm")
    argvs = []
    gpu = Settings(project_root=tmp_path, vllm_venv=tmp_path / "venv")
    night = parse_sweep(yaml.safe_load((PROJECT_ROOT / "include/sweeps/gpu-nightly.yaml")
                                       .read_text()), "gpu-nightly")
    for variant in [*VARIANTS["vllm"], *night.target("llama8b-vllm").variants]:
        command = adapter.container_launch(variant, port=8000, settings=gpu).command
        argvs.append(["--model", *command])  # `vllm serve MODEL ...` as the API server's
    spec = parse_sweep(yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml")
                                      .read_text()), "local")
    for variant in spec.target("adder-vllm").variants:
        argv = adapter.local_launch(variant, host="127.0.0.1", port=8000,
                                    settings=settings).argv
        # threads: 1, on the first core this worker may use
        assert argv[:3] == ["taskset", "-c", str(min(os.sched_getaffinity(0)))]
        assert argv[4:6] == ["-m", "vllm.entrypoints.openai.api_server"]
        argvs.append(argv[6:])
    out = subprocess.run([str(settings.vllm_venv / "bin" / "python"), "-c", PARSE],
                         input=json.dumps(argvs), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "parsed" in out.stdout, out.stderr[-3000:]


# vLLM's own config check on a checkpoint: which quantization it settles on, or its refusal
VERIFY = """
import json, sys
from pydantic import ValidationError
from vllm.config import ModelConfig
for model, flag in json.load(sys.stdin):
    try:
        print(json.dumps(ModelConfig(model=model, quantization=flag, dtype="bfloat16").quantization))
    except ValidationError as e:
        print(json.dumps("refused: " + str(e)))
"""
# quant_method -> a minimal quantization_config of that format, and vLLM's names for its methods
CHECKPOINTS = {
    "awq": ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
             "version": "gemm"}, {"awq", "auto_awq", "awq_marlin"}),
    "gptq": ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
              "sym": True}, {"gptq", "auto_gptq", "gptq_marlin"}),
    "compressed-tensors": ({"quant_method": "compressed-tensors", "format": "int-quantized",
                            "config_groups": {"group_0": {
                                "targets": ["Linear"],
                                "weights": {"num_bits": 8, "type": "int", "strategy": "channel",
                                            "symmetric": True, "dynamic": False},
                                "input_activations": {"num_bits": 8, "type": "int",
                                                      "strategy": "token", "symmetric": True,
                                                      "dynamic": True}}},
                            "ignore": ["lm_head"]}, {"compressed-tensors"}),
}


def test_vllm_reads_each_prequantized_checkpoint_as_the_adapter_launches_it(tmp_path):
    """The rule the table of formats follows (config/formats.py), shown by the installed vLLM's own
    ModelConfig on adder-3m's config with a quantization_config of each format: the
    --quantization the adapter renders for each pre-quantized name (none) is accepted and
    the checkpoint's method read; the flag a mislabelled variant would carry is refused
    with vLLM's words, which is why the plan refuses it first."""
    from servebench.config.formats import PREQUANTIZED

    adapter = get_stack("vllm")
    settings = get_settings()
    gpu = Settings(project_root=tmp_path, vllm_venv=tmp_path / "venv")
    cases = []
    for method, (quant_config, _) in CHECKPOINTS.items():
        folder = tmp_path / method
        folder.mkdir()
        for f in (PROJECT_ROOT / "include/models/adder-3m").iterdir():
            (folder / f.name).symlink_to(f)
        (folder / "config.json").unlink()
        config = json.loads((PROJECT_ROOT / "include/models/adder-3m/config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config,
                                                        "quantization_config": quant_config}))
        for quant in [q for q, m in PREQUANTIZED.items() if m == method]:
            argv = adapter.container_launch(VariantSpec(name="v", model="m", quant=quant),
                                            port=8000, settings=gpu).command
            flag = argv[argv.index("--quantization") + 1] if "--quantization" in argv else None
            cases.append((method, str(folder), flag))
    cases.append(("refused", str(tmp_path / "compressed-tensors"), "fp8"))
    cases.append(("refused", str(tmp_path / "awq"), "awq_marlin"))  # the CPU build's Marlin
    out = subprocess.run([str(settings.vllm_venv / "bin" / "python"), "-c", VERIFY],
                         input=json.dumps([c[1:] for c in cases]), capture_output=True,
                         text=True, timeout=300, env={**os.environ, "VLLM_NO_USAGE_STATS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    answers = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('"')]
    assert len(answers) == len(cases) == 8, out.stdout
    for (method, _, flag), answer in zip(cases, answers, strict=True):
        if method == "refused":
            assert "does not match the quantization method specified in the `quantization` " \
                   f"argument ({flag})" in answer, answer
        else:
            assert flag is None and answer in CHECKPOINTS[method][1], (method, answer)


def test_a_vllm_killed_mid_cell_fails_its_cells_with_the_signal(tmp_path, local_sweep):
    local = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    [target] = [t for t in local["targets"] if t["name"] == "adder-vllm"]
    data = local_sweep([{**target, "variants": target["variants"][:1]}], input_tokens=64,
                       output_tokens=32, num_requests=400, concurrency=1)
    data["load"]["concurrency"] = [1, 2]  # the second cell meets a dead port
    spec = parse_sweep(data, "test")
    target = spec.targets[0]

    def killed_under_load(*args, **kwargs):  # the first cell is measuring: the server dies
        pid = json.loads(next(tmp_path.glob("*.server.json")).read_text())["pid"]
        timer = threading.Timer(2.0, os.killpg, (pid, signal.SIGKILL))
        timer.start()
        try:
            return run_load_sync(*args, **kwargs)
        finally:
            timer.cancel()

    t0 = time.monotonic()
    result = VariantRunner(spec, target, target.variants[0], run_id="t",
                           settings=get_settings(), provisioner=LocalProvisioner(tmp_path),
                           run_load=killed_under_load).run()
    assert time.monotonic() - t0 < 600
    assert len(result.cells) == 2
    first, second = result.cells
    assert first["status"] in ("failed", "invalid")
    assert "the server died during the cell: adder-vllm--bf16 killed by SIGKILL (-9)" \
        in first["reason"]
    assert second["status"] == "failed"  # never run against the dead port
    assert second["reason"].startswith("the server had died: adder-vllm--bf16 killed by SIGKILL")
    assert result.evals == [] and all(c.get("accuracy") is None for c in result.cells)
    assert not list(tmp_path.glob("*.server.json"))
    # what it held, measured though it died (bench.memory): its log states its KV cache (its
    # /metrics went with it), the checkpoint on disk its weights, and its process tree (API
    # server, engine core, worker: children of the one launched) peaked above a GB
    unit = result.unit
    assert unit["kv_cache_source"].startswith("vLLM's log: CPU KV cache size: ")
    assert unit["kv_cache_tokens"] >= 4 * 512  # the variant's sequences fit
    assert unit["weights_bytes"] == 7152200  # include/models/adder-3m/model.safetensors
    assert unit["peak_rss_bytes"] > 1e9, unit["peak_rss_source"]
    assert int(re.search(r"at its peak (\d+) process", unit["peak_rss_source"])[1]) >= 3
    assert {c["peak_rss_bytes"] for c in result.cells} == {unit["peak_rss_bytes"]}
    # the engine's own processes (API server, engine core) went with it: one process group
    argv = json.loads(first["launch_args"])
    port = argv[argv.index("--port") + 1]
    left = subprocess.run(["pgrep", "-f", "--", f"--port {port}"], capture_output=True)
    assert left.stdout == b"", left.stdout
