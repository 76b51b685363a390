"""Serving-stack adapters; importing this package registers every adapter, and this is where a
stack is looked up by name."""

from servebench.stacks import (  # noqa: F401  (each registers itself)
    llama_cpp,
    openai_api,
    sglang,
    tgi,
    transformers_serve,
    trtllm,
    vllm,
)
from servebench.stacks.adapter import REGISTRY, LaunchSpec, StackAdapter


def get_stack(name: str) -> StackAdapter:
    """The adapter of stack ``name`` (KeyError naming the known ones)."""
    try:
        return REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown stack {name!r}; known stacks: {sorted(REGISTRY)}") from None


def known_stacks() -> list[str]:
    return sorted(REGISTRY)


__all__ = ["LaunchSpec", "StackAdapter", "get_stack", "known_stacks"]
