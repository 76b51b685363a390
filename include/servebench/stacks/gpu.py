"""What the GPU engines that serve a Hugging Face checkpoint share (vLLM, SGLang, TensorRT-LLM,
TGI): which quants they refuse (GGUF's belong to llama_cpp), the plan-time checks of a variant's
quant, dtype and KV-cache dtype against each engine's own tables, the weights dtype a quant
name implies, and the launch -- the same command line as a local process or in the engine's
container image. Each adapter declares its tables, its command line (``_args``) and what is
its own (speculative decoding, extra files, environment).

A quant name (``config.formats``, the table of them) says what the checkpoint is (a
pre-quantized one: the ``quant_method`` its ``config.json`` states), or asks an engine to
quantize a 16-bit checkpoint as it loads it (``fp8``, ``bitsandbytes``, TGI's ``eetq``). Every
engine here reads a checkpoint's ``quantization_config`` itself, and vLLM and SGLang refuse a
``--quantization`` that disagrees with it ("Quantization method specified in the model config
(compressed-tensors) does not match the quantization method specified in the `quantization`
argument (fp8)": ``ModelConfig._verify_quantization``, vLLM v0.19.1 and v0.32.0
``vllm/config/model.py``, SGLang v0.5.18 ``python/sglang/srt/configs/model_config.py``), so a
pre-quantized checkpoint gets no such flag there; a local checkpoint whose ``config.json``
states another method than its quant name fails the plan.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Collection
from pathlib import Path
from typing import ClassVar

from servebench.config import (
    SamplingSpec,
    VariantSpec,
)
from servebench.config.formats import (
    CHECKPOINT_METHODS,
    GGUF_ONLY,
    PREQUANTIZED,
    QUANT_DTYPES,
)
from servebench.settings import Settings
from servebench.stacks.adapter import (
    ContainerLaunch,
    LaunchSpec,
    StackAdapter,
    chat_request,
    hf_model_in_container,
    vllm_style_sampling,
)


def listen_args(host: str, port: int, served_model: str) -> list[str]:
    """Where the server listens and the name it answers to, in the flags vLLM and SGLang share
    (``--host``, ``--port``, ``--served-model-name``)."""
    return ["--host", host, "--port", str(port), "--served-model-name", served_model]


def checkpoint_args(variant: VariantSpec, quant_flags: dict[str, str | None],
                    quant_flag: str = "--quantization") -> list[str]:
    """Which revision of the checkpoint, and which of the engine's quantization methods reads
    it (``quant_flags``: servebench quant -> the engine's name; None: as stored)."""
    args = ["--revision", variant.revision] if variant.revision else []
    quant = quant_flags.get(variant.quant.lower())
    return [*args, quant_flag, quant] if quant else args


def stated_quant_method(folder: Path) -> tuple[bool, str | None]:
    """``(readable, quant_method)`` of ``folder/config.json``'s ``quantization_config`` (or
    ``compression_config``, compressed-tensors' older key, which TGI and vLLM still read);
    quant_method None: the checkpoint states none (its weights as stored)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):  # no config.json, or not JSON: the engine will say
        return False, None
    if not isinstance(config, dict):
        return False, None
    quant = config.get("quantization_config") or config.get("compression_config") or {}
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if not isinstance(method, str):
        return True, None
    # early compressed-tensors checkpoints spell it with "_" (SGLang's model_config reads both)
    return True, method.lower().replace("compressed_tensors", "compressed-tensors")


def checkpoint_problems(variant: VariantSpec, settings: Settings,
                        methods: dict[str, frozenset[str | None]]) -> list[str]:
    """A local checkpoint quantized otherwise than the variant's quant name allows
    (``methods``: quant name -> the quant_methods its config.json may state, None: none): the
    engines read the checkpoint's, so a flag rendered from the name (vLLM's and SGLang's
    ``--quantization fp8``, TGI's ``--quantize``) is refused and the stored quant would misname
    what was served. An unquantized folder passes under any name (a quantization recipe's
    base checkpoint is one); hub ids and folders not made yet are not read."""
    allowed = methods.get(variant.quant.lower())
    folder = settings.resolve(variant.model)
    if allowed is None or not folder.is_dir():
        return []
    readable, stated = stated_quant_method(folder)
    if not readable or stated is None or stated in allowed:
        return []
    names = sorted(name for name, method in PREQUANTIZED.items() if method == stated)
    return [f"field quant {variant.quant!r}: {folder}/config.json states quant_method "
            f"{stated!r}: say quant {' or '.join(names) or stated} (the engine serves what the "
            "checkpoint states)"]


def weights_dtype(variant: VariantSpec) -> str | None:
    """The variant's ``dtype``, else the one its quant name says (None: the engine's own)."""
    return variant.dtype or QUANT_DTYPES.get(variant.quant.lower())


HUB_COLD_START_S = 1800.0  # the default health wait of EC2 and Kubernetes targets too


class HfGpuStack(StackAdapter):
    """A GPU engine serving a Hugging Face checkpoint (a hub id or a local folder)."""

    default_image: ClassVar[str]  # pin per variant with `image:`
    entrypoint: ClassVar[tuple[str, ...] | None]  # in the image (None: the image's own)
    local_command: ClassVar[tuple[str, ...]]  # the same server as a local process
    shm_size: ClassVar[str] = "16g"  # NCCL between tensor-parallel workers uses /dev/shm
    quants: ClassVar[Collection[str]]  # the quant names it serves
    quant_flag: ClassVar[str] = "--quantization"  # how the quant-table message names it
    refused_quants: ClassVar[dict[str, str]] = {}  # names it knows but cannot serve: why
    checkpoint_methods: ClassVar[dict[str, frozenset[str | None]]] = CHECKPOINT_METHODS
    dtypes: ClassVar[Collection[str]]  # its --dtype choices
    kv_cache_dtypes: ClassVar[Collection[str]]  # the kv_cache_dtype values it takes
    # the request dialect: vLLM's protocol (SGLang and TensorRT-LLM copy it)
    top_k_disabled: ClassVar[int] = -1  # the top_k that turns top-k off
    length_field: ClassVar[str] = "max_tokens"

    def check(self, variant: VariantSpec, settings: Settings) -> list[str]:
        return [*self.precision_problems(variant),
                *checkpoint_problems(variant, settings, self.checkpoint_methods),
                *self.speculative_problems(variant)]

    def cold_start_s(self, variant: VariantSpec, settings: Settings) -> float:
        """A hub checkpoint is downloaded on its first start (an 8B model's 16 GB, a 70B's
        140 GB): as long as a provisioned host's wait. A local folder: the setting alone."""
        return 0.0 if settings.resolve(variant.model).is_dir() else HUB_COLD_START_S

    def precision_problems(self, variant: VariantSpec) -> list[str]:
        problems = []
        quant = variant.quant.lower()
        if quant in GGUF_ONLY:
            problems.append(f"field quant {variant.quant!r}: {self.name} does not serve GGUF "
                            "quants (they belong to llama_cpp)")
        elif quant in self.refused_quants:
            problems.append(f"field quant {variant.quant!r}: {self.refused_quants[quant]}")
        elif quant not in self.quants:
            problems.append(f"field quant {variant.quant!r}: {self.name} {self.quant_flag} "
                            f"knows {sorted(self.quants)}")
        if variant.dtype is not None and variant.dtype not in self.dtypes:
            problems.append(f"field dtype {variant.dtype!r}: {self.name} --dtype takes "
                            f"{sorted(self.dtypes)}")
        kv = variant.kv_cache_dtype
        if kv is not None and kv not in self.kv_cache_dtypes:
            problems.append(f"field kv_cache_dtype {kv!r}: {self.name} takes "
                            f"{sorted(self.kv_cache_dtypes)}")
        return problems

    def speculative_problems(self, variant: VariantSpec) -> list[str]:
        return []

    def local_problems(self, variant: VariantSpec, settings: Settings) -> list[str]:
        """The engine's server is installed where the local provisioner will start it: its
        module in this interpreter's environment, or its program on the PATH."""
        command = tuple(self.local_command)
        if command[:2] == (sys.executable, "-m"):
            module = command[2].split(".")[0]
            if importlib.util.find_spec(module) is None:
                return [f"{self.engine} is not installed in this worker's environment "
                        f"({sys.prefix}): install it on the GPU worker, or serve it in its "
                        "image with provision kind ec2 or kubernetes"]
        elif command and shutil.which(command[0]) is None:
            return [f"{command[0]} is not on this worker's PATH: install {self.engine} on the "
                    "GPU worker, or serve it in its image with provision kind ec2 or kubernetes"]
        return []

    def _args(self, variant: VariantSpec, model: str, *, host: str, port: int) -> list[str]:
        raise NotImplementedError

    def chat_body(self, *, served_model: str, messages: list[dict], sampling: SamplingSpec,
                  max_tokens: int, force_length: bool, variant: VariantSpec) -> dict:
        return {
            **chat_request(served_model=served_model, messages=messages, sampling=sampling,
                           max_tokens=max_tokens, continuous_usage=True,
                           length_field=self.length_field),
            **vllm_style_sampling(sampling, max_tokens=max_tokens, force_length=force_length,
                                  top_k_disabled=self.top_k_disabled),
        }

    # -- what differs per engine around the same launch (defaults: none) --------------------
    def served_model(self, variant: VariantSpec, model: str, folder: bool) -> str:
        """The name the server answers with, serving ``model`` (a folder when ``folder``)."""
        return variant.model

    def env(self, variant: VariantSpec) -> dict[str, str]:
        return {}

    def model_in_container(self, variant: VariantSpec,
                           settings: Settings) -> tuple[str, dict[str, str]]:
        return hf_model_in_container(variant, settings)

    def container_files(self, variant: VariantSpec) -> tuple[dict[str, str], dict]:
        """Files the server reads (path in the container -> text), and ``_args`` keywords."""
        return {}, {}

    def local_files(self, variant: VariantSpec, settings: Settings) -> dict:
        """The same files written on this host: ``_args`` keywords."""
        return {}

    # -- launches ---------------------------------------------------------------------------
    def local_launch(
        self, variant: VariantSpec, *, host: str, port: int, settings: Settings
    ) -> LaunchSpec:
        local = settings.resolve(variant.model)
        model = str(local) if local.exists() else variant.model
        argv = [*self.local_command,
                *self._args(variant, model, host=host, port=port,
                            **self.local_files(variant, settings))]
        return LaunchSpec(argv=argv, served_model=self.served_model(variant, model, local.is_dir()),
                          env=self.env(variant), metrics_path=self.metrics_path)

    def container_launch(
        self, variant: VariantSpec, *, port: int, settings: Settings
    ) -> ContainerLaunch:
        model, volumes = self.model_in_container(variant, settings)
        files, keywords = self.container_files(variant)
        return ContainerLaunch(
            image=variant.image or self.default_image,
            entrypoint=list(self.entrypoint) if self.entrypoint is not None else None,
            command=self._args(variant, model, host="0.0.0.0", port=port, **keywords),
            served_model=self.served_model(variant, model,
                                           settings.resolve(variant.model).is_dir()),
            port=port,
            env=self.env(variant),
            ports={port: port},
            gpus=variant.tensor_parallel_size,
            shm_size=self.shm_size,
            volumes=volumes,
            files=files,
            metrics_path=self.metrics_path,
        )
