"""Serving-stack adapters; importing this package registers every adapter."""

from servebench.stacks import llama_cpp, transformers_serve  # noqa: F401
from servebench.stacks import openai_api, sglang, tgi, trtllm, vllm  # noqa: F401
from servebench.stacks.base import LaunchSpec, StackAdapter, get_stack, known_stacks

__all__ = ["LaunchSpec", "StackAdapter", "get_stack", "known_stacks"]
