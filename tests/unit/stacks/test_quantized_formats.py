"""The GPU command line each quantized format needs, on every GPU engine: exact argv.

Formats: W4A16 in AutoAWQ's, AutoGPTQ's and llm-compressor's (compressed-tensors) formats, W8A8
INT8 and FP8 (compressed-tensors), FP8 quantized as the checkpoint loads, and an FP8 KV cache
over 16-bit weights; each served from the hub checkpoint ``include/sweeps/gpu-nightly.yaml``
sweeps. What each engine reads and why is in the table of formats (``config/formats.py``), the
adapters' comments and docs/stacks.md's table.
"""

import json

import pytest
import yaml
from servebench.config import VariantSpec
from servebench.config.formats import PREQUANTIZED
from servebench.settings import Settings
from servebench.stacks import get_stack
from servebench.stacks.trtllm import CONFIG_IN_CONTAINER

BF16 = "meta-llama/Llama-3.1-8B-Instruct"
AWQ = "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
GPTQ = "hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4"
W4A16 = "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16"
W8A8 = "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8"
FP8 = "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"  # per-tensor scales
FP8_DYNAMIC = "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic"  # per-channel, per-token
MODELOPT_FP8 = "nvidia/Llama-3.1-8B-Instruct-FP8"

# format -> (checkpoint, quant, kv_cache_dtype)
FORMATS = {
    "awq": (AWQ, "awq", None),
    "gptq": (GPTQ, "gptq", None),
    "w4a16": (W4A16, "w4a16", None),
    "w8a8-int8": (W8A8, "w8a8_int8", None),
    "w8a8-fp8": (FP8, "w8a8_fp8", None),
    "fp8-online": (BF16, "fp8", None),
    "kv-fp8": (BF16, "bf16", "fp8"),
}


@pytest.fixture
def settings(tmp_path):
    # a vllm_venv without vLLM: its local launch is a GPU worker's `vllm serve`
    return Settings(project_root=tmp_path, work_dir=tmp_path / "runs",
                    vllm_venv=tmp_path / "venv")


def variant(model: str, quant: str, kv: str | None = None) -> VariantSpec:
    return VariantSpec(name="v", model=model, quant=quant, kv_cache_dtype=kv,
                       max_num_seqs=256, max_model_len=8192)


def command(stack: str, fmt: str, settings: Settings) -> list[str]:
    """The server's arguments in its image (the GPU command line), after a clean check."""
    v = variant(*FORMATS[fmt])
    assert get_stack(stack).check(v, settings) == []
    return get_stack(stack).container_launch(v, port=8000, settings=settings).command


def vllm(model: str, dtype: str = "auto", *tail: str) -> list[str]:
    return [model, "--host", "0.0.0.0", "--port", "8000", "--served-model-name", model,
            "--dtype", dtype, "--max-model-len", "8192", "--max-num-seqs", "256",
            "--tensor-parallel-size", "1", "--enable-prefix-caching",
            "--enable-prompt-tokens-details", *tail]


def sglang(model: str, dtype: str = "auto", *tail: str) -> list[str]:
    return ["--model-path", model, "--host", "0.0.0.0", "--port", "8000",
            "--served-model-name", model, "--dtype", dtype, "--context-length", "8192",
            "--max-running-requests", "256", "--tp-size", "1", "--enable-metrics",
            "--enable-cache-report", *tail]


def tgi(model: str, *tail: str) -> list[str]:
    return ["--model-id", model, "--hostname", "0.0.0.0", "--port", "8000",
            "--max-input-tokens", "8191", "--max-total-tokens", "8192",
            "--max-concurrent-requests", "256", "--num-shard", "1", *tail]


def trtllm(model: str) -> list[str]:
    return [model, "--host", "0.0.0.0", "--port", "8000", "--backend", "pytorch",
            "--max_batch_size", "256", "--max_seq_len", "8192", "--tp_size", "1",
            "--extra_llm_api_options", CONFIG_IN_CONTAINER]


@pytest.mark.parametrize(("fmt", "argv"), [
    # a pre-quantized checkpoint: no --quantization, vLLM reads its quantization_config (AWQ
    # and GPTQ onto Marlin by themselves)
    ("awq", vllm(AWQ)), ("gptq", vllm(GPTQ)), ("w4a16", vllm(W4A16)),
    ("w8a8-int8", vllm(W8A8)), ("w8a8-fp8", vllm(FP8)),
    ("fp8-online", vllm(BF16, "auto", "--quantization", "fp8")),
    ("kv-fp8", vllm(BF16, "bfloat16", "--kv-cache-dtype", "fp8")),
])
def test_vllm_command_line_per_format(settings, fmt, argv):
    assert command("vllm", fmt, settings) == argv


@pytest.mark.parametrize(("fmt", "argv"), [
    ("awq", sglang(AWQ)), ("gptq", sglang(GPTQ)), ("w4a16", sglang(W4A16)),
    ("w8a8-int8", sglang(W8A8)), ("w8a8-fp8", sglang(FP8)),
    ("fp8-online", sglang(BF16, "auto", "--quantization", "fp8")),
    ("kv-fp8", sglang(BF16, "bfloat16", "--kv-cache-dtype", "fp8_e4m3")),  # no bare fp8
])
def test_sglang_command_line_per_format(settings, fmt, argv):
    assert command("sglang", fmt, settings) == argv


@pytest.mark.parametrize(("fmt", "argv"), [
    # --quantize is the checkpoint's quant_method, and never comes with --dtype
    ("awq", tgi(AWQ, "--quantize", "awq")), ("gptq", tgi(GPTQ, "--quantize", "gptq")),
    ("w4a16", tgi(W4A16, "--quantize", "compressed-tensors")),
    ("w8a8-int8", tgi(W8A8, "--quantize", "compressed-tensors")),
    ("w8a8-fp8", tgi(FP8, "--quantize", "compressed-tensors")),
    ("fp8-online", tgi(BF16, "--quantize", "fp8")),
    ("kv-fp8", tgi(BF16, "--dtype", "bfloat16", "--kv-cache-dtype", "fp8_e4m3fn")),
])
def test_tgi_command_line_per_format(settings, fmt, argv):
    assert command("tgi", fmt, settings) == argv


@pytest.mark.parametrize(("model", "quant", "kv", "options"), [
    # quantization is the checkpoint's: the command line is the same, the options file says
    # only the KV cache's dtype and the 16-bit weights' dtype
    (MODELOPT_FP8, "fp8", None, {}),
    (FP8_DYNAMIC, "w8a8_fp8", None, {}),
    (BF16, "bf16", "fp8", {"dtype": "bfloat16", "kv_cache_config": {"dtype": "fp8"}}),
])
def test_trtllm_command_line_per_format(settings, model, quant, kv, options):
    v = variant(model, quant, kv)
    assert get_stack("trtllm").check(v, settings) == []
    launch = get_stack("trtllm").container_launch(v, port=8000, settings=settings)
    assert launch.command == trtllm(model)
    expected = {"kv_cache_config": {"enable_block_reuse": True}, "return_perf_metrics": True}
    expected["kv_cache_config"].update(options.pop("kv_cache_config", {}))
    assert yaml.safe_load(launch.files[CONFIG_IN_CONTAINER]) == {**expected, **options}


@pytest.mark.parametrize(("fmt", "why"), [
    ("awq", "reads no awq or gptq quant_method"), ("gptq", "no GPTQ linear method"),
    ("w4a16", "'Unsupported quant_bits: 4'"), ("w8a8-int8", "no INT8 W8A8 linear method"),
])
def test_trtllm_refuses_the_checkpoints_its_pytorch_backend_cannot_read(settings, fmt, why):
    model, quant, _ = FORMATS[fmt]
    [problem] = get_stack("trtllm").check(variant(model, quant), settings)
    assert problem.startswith(f"field quant {quant!r}: ") and why in problem


@pytest.mark.parametrize("stack", ["vllm", "sglang", "tgi"])
def test_every_prequantized_name_is_served_and_read_from_the_checkpoint(settings, stack):
    """vLLM and SGLang refuse a --quantization that disagrees with the checkpoint, so no
    pre-quantized name renders one; TGI's --quantize is the checkpoint's own quant_method."""
    for quant, method in PREQUANTIZED.items():
        v = variant(AWQ, quant)
        assert get_stack(stack).check(v, settings) == [], quant
        argv = get_stack(stack).container_launch(v, port=8000, settings=settings).command
        if stack == "tgi":
            assert argv[argv.index("--quantize") + 1] == method and "--dtype" not in argv
        else:
            assert "--quantization" not in argv, quant


def _checkpoint(root, name: str, quant_config: dict | None) -> str:
    folder = root / name
    folder.mkdir()
    config = {"architectures": ["LlamaForCausalLM"]}
    if quant_config is not None:
        config["quantization_config"] = quant_config
    (folder / "config.json").write_text(json.dumps(config))
    return name


def test_a_local_checkpoint_must_be_what_its_quant_says(settings):
    """The engines serve what config.json states: a quant name that says otherwise fails the
    plan (vLLM would refuse `--quantization fp8` on a compressed-tensors checkpoint)."""
    root = settings.project_root
    ct = _checkpoint(root, "ct-fp8", {"quant_method": "compressed-tensors"})
    old = _checkpoint(root, "ct-old", {"quant_method": "compressed_tensors"})
    awq = _checkpoint(root, "awq", {"quant_method": "awq", "bits": 4})
    plain = _checkpoint(root, "plain", None)
    vllm_stack = get_stack("vllm")
    [wrong] = vllm_stack.check(variant(ct, "fp8"), settings)
    assert wrong == (f"field quant 'fp8': {root / ct}/config.json states quant_method "
                     "'compressed-tensors': say quant compressed-tensors or w4a16 or w8a8_fp8 or "
                     "w8a8_int8 (the engine serves what the checkpoint states)")
    assert vllm_stack.check(variant(ct, "w8a8_fp8"), settings) == []
    assert vllm_stack.check(variant(old, "w8a8_int8"), settings) == []
    assert vllm_stack.check(variant(plain, "fp8"), settings) == []  # quantized as it loads
    assert "say quant awq" in vllm_stack.check(variant(awq, "none"), settings)[0]
    # an unquantized folder under any name: a quantization recipe's base checkpoint is one
    assert get_stack("sglang").check(variant(plain, "w4a16"), settings) == []
    # trtllm's fp8 is ModelOpt's, whose config.json may say modelopt; a hub id is not read
    modelopt = _checkpoint(root, "modelopt", {"quant_method": "modelopt"})
    assert get_stack("trtllm").check(variant(modelopt, "fp8"), settings) == []
    assert vllm_stack.check(variant("org/not-here", "awq"), settings) == []
