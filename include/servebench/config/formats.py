"""The quantized formats a variant's ``quant`` may name, in one table: for each, what its
checkpoint's ``config.json`` states (``quant_method``), the llm-compressor preset schemes that
make it (``SCHEMES``, each naming its format), and which GPU engine serves it with which value
of its quantization flag or refuses it, and why. The spec, the quantize step and the stack
adapters all read it; it imports only the standard library. Adding a format or a scheme is a
row here and a line in docs/stacks.md ("Quantized formats"), which says what each engine reads
and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

VLLM, SGLANG, TGI, TRTLLM = "vllm", "sglang", "tgi", "trtllm"
HF_ENGINES = (VLLM, SGLANG, TGI, TRTLLM)
NO_FLAG = dict.fromkeys(HF_ENGINES)  # every GPU engine serves it, with no quantization flag
# the name of llm-compressor's format, whatever the scheme: it agrees with every recipe
COMPRESSED_TENSORS = "compressed-tensors"

Kind = Literal["precision", "checkpoint", "online", "engine"]


@dataclass(frozen=True)
class Format:
    """One ``quant`` name. ``kind``: ``precision``, weights as stored (no quantization_config;
    ``dtype`` the one the name says); ``checkpoint``, quantized ahead of time (its config.json
    states ``quant_method``); ``online``, a 16-bit checkpoint quantized as it loads, or one
    already quantized so (config.json states ``quant_method`` or nothing); ``engine``, an
    engine's own method or kernel (a lever: not checked against the checkpoint). ``serve``:
    engine -> the value of its quantization flag (None: no flag, the checkpoint's own is read);
    an engine not named does not serve it. ``refuse``: engine -> why it cannot."""

    quant: str
    kind: Kind
    serve: dict[str, str | None]
    quant_method: str | None = None
    dtype: str | None = None
    refuse: dict[str, str] = field(default_factory=dict)

    @property
    def checkpoint_methods(self) -> frozenset[str | None] | None:
        """The quant_methods a local checkpoint's config.json may state under this name (None
        in it: no quantization_config); None: not checked."""
        return {"precision": frozenset({None}), "checkpoint": frozenset({self.quant_method}),
                "online": frozenset({None, self.quant_method}), "engine": None}[self.kind]


TRTLLM_READER = "_torch/model_config.py load_hf_quant_config at 1.3.0rc3"
TRTLLM_NO_INT8 = ("trtllm's PyTorch backend has no INT8 W8A8 linear method "
                  "(_torch/modules/linear.py get_quant_method), and reads any 8-bit "
                  "compressed-tensors group as FP8")
TRTLLM_NO_AUTO = ("an AutoAWQ/AutoGPTQ checkpoint: trtllm's PyTorch backend reads no awq or gptq "
                  f"quant_method ({TRTLLM_READER}) and has no GPTQ linear method; quantize with "
                  "ModelOpt (quant w4a16_awq)")


def _precision(quant: str, dtype: str | None) -> Format:
    return Format(quant, "precision", NO_FLAG, dtype=dtype)


def _named(quant: str, *engines: str) -> Format:
    """An engine's own method: ``engines`` take the name as their quantization flag's value."""
    return Format(quant, "engine", dict.fromkeys(engines, quant))


# The sources each row was read from are in docs/stacks.md ("Quantized formats") and beside
# each adapter's use of it. vLLM and SGLang refuse a --quantization that disagrees with the
# checkpoint's quantization_config, so a pre-quantized checkpoint gets none there; TGI's
# --quantize is the checkpoint's own quant_method; TensorRT-LLM takes no flag at all.
FORMATS: tuple[Format, ...] = (
    _precision("none", None), _precision("bf16", "bfloat16"),
    _precision("bfloat16", "bfloat16"), _precision("f16", "float16"),
    _precision("fp16", "float16"), _precision("float16", "float16"),
    # AutoAWQ's format (hugging-quants/...-AWQ-INT4)
    Format("awq", "checkpoint", {VLLM: None, SGLANG: None, TGI: "awq"}, quant_method="awq",
           refuse={TRTLLM: TRTLLM_NO_AUTO}),
    # AutoGPTQ's / GPTQModel's (hugging-quants/...-GPTQ-INT4)
    Format("gptq", "checkpoint", {VLLM: None, SGLANG: None, TGI: "gptq"}, quant_method="gptq",
           refuse={TRTLLM: TRTLLM_NO_AUTO}),
    # llm-compressor's, whatever the scheme
    Format(COMPRESSED_TENSORS, "checkpoint",
           {VLLM: None, SGLANG: None, TGI: COMPRESSED_TENSORS}, quant_method=COMPRESSED_TENSORS,
           refuse={TRTLLM: "name the scheme: trtllm reads 8-bit FP8 compressed-tensors only "
                           f"(quant w8a8_fp8; {TRTLLM_READER})"}),
    # llm-compressor INT4 weights (GPTQ or AWQ), pack-quantized
    Format("w4a16", "checkpoint", {VLLM: None, SGLANG: None, TGI: COMPRESSED_TENSORS},
           quant_method=COMPRESSED_TENSORS,
           refuse={TRTLLM: "a compressed-tensors W4A16 checkpoint: trtllm reads 8-bit "
                           f"compressed-tensors only ('Unsupported quant_bits: 4', "
                           f"{TRTLLM_READER})"}),
    # INT8 weights and activations, int-quantized
    Format("w8a8_int8", "checkpoint", {VLLM: None, SGLANG: None, TGI: COMPRESSED_TENSORS},
           quant_method=COMPRESSED_TENSORS, refuse={TRTLLM: TRTLLM_NO_INT8}),
    # FP8 weights and activations, float-quantized; trtllm: per-channel or block weight scales
    # only (FP8-dynamic): a per-tensor one (RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8) fails as
    # it loads
    Format("w8a8_fp8", "checkpoint", {**NO_FLAG, TGI: COMPRESSED_TENSORS},
           quant_method=COMPRESSED_TENSORS),
    # a 16-bit checkpoint quantized as it loads, or a quant_method fp8 one; trtllm's is
    # ModelOpt FP8 (nvidia/Llama-3.1-8B-Instruct-FP8), or block-scaled fp8
    Format("fp8", "online", {VLLM: "fp8", SGLANG: "fp8", TGI: "fp8", TRTLLM: None},
           quant_method="fp8"),
    # naming a kernel pins it (a lever, not a format)
    _named("awq_marlin", VLLM, SGLANG), _named("gptq_marlin", VLLM, SGLANG),
    _named("marlin", TGI),
    _named("bitsandbytes", VLLM, SGLANG, TGI), _named("bitsandbytes-nf4", TGI),
    _named("bitsandbytes-fp4", TGI), _named("eetq", TGI), _named("exl2", TGI),
    _named("modelopt", VLLM), _named("modelopt_fp8", SGLANG), _named("modelopt_fp4", VLLM, SGLANG),
    Format("mxfp4", "engine", {VLLM: "mxfp4", SGLANG: "mxfp4", TRTLLM: None}),  # gpt-oss's
    # ModelOpt's, read by trtllm from hf_quant_config.json
    Format("nvfp4", "engine", {TRTLLM: None}), Format("w4a16_awq", "engine", {TRTLLM: None}),
    Format("w4a8_awq", "engine", {TRTLLM: None}),
    Format("int8_sq", "engine", {}, refuse={TRTLLM: TRTLLM_NO_INT8}),
    Format("experts_int8", "engine", {}, refuse={
        VLLM: "deprecated in vLLM 0.14-0.19: the server refuses to start with it unless "
              "--allow-deprecated-quantization is passed (put both in extra_args to insist)"}),
)


def quant_flags(engine: str) -> dict[str, str | None]:
    """The quant names ``engine`` serves -> its quantization flag's value (None: no flag)."""
    return {f.quant: f.serve[engine] for f in FORMATS if engine in f.serve}


def refused_quants(engine: str) -> dict[str, str]:
    """The quant names ``engine`` knows but cannot serve -> why."""
    return {f.quant: f.refuse[engine] for f in FORMATS if engine in f.refuse}


# a quant name that is a precision says the weights' dtype (the engines' --dtype choices)
QUANT_DTYPES = {f.quant: f.dtype for f in FORMATS if f.dtype}
# a checkpoint quantized ahead of time -> the quant_method its config.json states
PREQUANTIZED = {f.quant: f.quant_method for f in FORMATS if f.kind == "checkpoint"}
# quant name -> the quant_methods a local checkpoint's config.json may state for it
CHECKPOINT_METHODS = {f.quant: f.checkpoint_methods for f in FORMATS
                      if f.checkpoint_methods is not None}

# GGUF's types, llama.cpp's alone but its floats (tools/quantize, the names `make models` uses)
GGUF_QUANTS = frozenset({
    "f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_0", "q5_1", "q4_k_m",
    "q4_k_s", "q4_0", "q4_1", "q3_k_m", "q3_k_s", "q3_k_l", "q2_k", "iq4_xs", "iq4_nl",
})
GGUF_ONLY = GGUF_QUANTS - {"bf16", "f16", "f32"}


@dataclass(frozen=True)
class Scheme:
    """A compressed-tensors preset scheme (``compressed_tensors.quantization.quant_scheme``
    ``PRESET_SCHEMES``) a recipe may name: how it quantizes weights (``weight_bits``,
    ``strategy``), the methods that make it, whether its activations take static scales (round
    to nearest then needs calibration data too), and the quant names its checkpoint goes by."""

    name: str
    weight_bits: int
    strategy: Literal["group", "channel", "tensor"]
    methods: tuple[str, ...]
    format: str | None  # its own quant name (None: none but compressed-tensors)
    static_activations: bool = False

    @property
    def quants(self) -> tuple[str, ...]:
        return (*([self.format] if self.format else []), COMPRESSED_TENSORS)


# the methods a recipe applies a scheme by: gptq, awq, rtn (round to nearest,
# llm-compressor's QuantizationModifier), smoothquant+gptq (SmoothQuant's smoothing, then
# GPTQ). AWQ scales for weight-only int quantization; SmoothQuant moves activation outliers
# into the weights, which only helps where activations are int8.
METHODS = ("gptq", "awq", "rtn", "smoothquant+gptq")
SCHEMES: tuple[Scheme, ...] = (
    Scheme("W4A16", 4, "group", ("gptq", "awq", "rtn"), "w4a16"),
    Scheme("W4A16_ASYM", 4, "group", ("gptq", "awq", "rtn"), "w4a16"),
    Scheme("W8A8", 8, "channel", ("gptq", "rtn", "smoothquant+gptq"), "w8a8_int8"),
    Scheme("W8A16", 8, "group", ("gptq", "awq", "rtn"), None),
    Scheme("FP8", 8, "tensor", ("rtn",), "w8a8_fp8", static_activations=True),
    Scheme("FP8_DYNAMIC", 8, "channel", ("rtn",), "w8a8_fp8"),
)
SCHEME_BY_NAME = {s.name: s for s in SCHEMES}


def scheme_problem(scheme: str, quant: str) -> str | None:
    """Why a checkpoint of preset ``scheme`` cannot be named ``quant`` (None: it can, or the
    scheme is none of the table's)."""
    row = SCHEME_BY_NAME.get(scheme)
    if row is None or quant.lower() in row.quants:
        return None
    return (f"scheme {scheme!r} disagrees with quant {quant!r}: its checkpoint is quant "
            f"{' or '.join(row.quants)}")


# a scheme named in an llm-compressor recipe file (a modifier's or a config group's)
SCHEME_LINE = re.compile(r"^\s*scheme:\s*['\"]?([A-Za-z0-9_]+)", flags=re.MULTILINE)


def file_schemes(text: str) -> list[str]:
    """Every ``scheme:`` an llm-compressor recipe file's text names, in order."""
    return SCHEME_LINE.findall(text)
