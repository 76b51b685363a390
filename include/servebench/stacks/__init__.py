"""Serving-stack adapters; importing this package registers every adapter."""

from servebench.stacks import (  # noqa: F401
    llama_cpp,
    openai_api,
    sglang,
    tgi,
    transformers_serve,
    trtllm,
    vllm,
)
from servebench.stacks.adapter import (
    LaunchSpec,
    StackAdapter,
    get_stack,
    known_stacks,
    stack_options,
)

__all__ = ["LaunchSpec", "StackAdapter", "get_stack", "known_stacks", "stack_options"]
