"""One adapter per serving stack, behind one interface, found through a registry.

An adapter turns a :class:`~servebench.config.VariantSpec` into a launch (a local command; a
container launch for provisioned hosts comes with the GPU engines) and speaks the stack's
request dialect: every sampling parameter sent explicitly, and the stack's own way of forcing
an exact output length. Adding a stack is one new module that registers itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from servebench.config import SamplingSpec, VariantSpec
from servebench.settings import Settings


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one variant of a stack, and how to talk to it once started."""

    argv: list[str]
    served_model: str  # the `model` requests must name and responses must return
    health_path: str = "/health"
    metrics_path: str | None = "/metrics"
    env: dict[str, str] = field(default_factory=dict)


class StackAdapter(ABC):
    """A serving stack: launch rendering, request dialect and plan-time checks."""

    name: ClassVar[str]
    engine: ClassVar[str]  # what provenance calls it
    chat_path: ClassVar[str] = "/v1/chat/completions"

    @abstractmethod
    def check(self, variant: VariantSpec, settings: Settings) -> list[str]:
        """Problems that make the variant unrunnable here, found before anything launches."""

    @abstractmethod
    def local_launch(
        self, variant: VariantSpec, *, host: str, port: int, settings: Settings
    ) -> LaunchSpec:
        """The command that serves ``variant`` on ``host:port`` on this machine."""

    @abstractmethod
    def chat_body(
        self,
        *,
        served_model: str,
        messages: list[dict],
        sampling: SamplingSpec,
        max_tokens: int,
        force_length: bool,
        variant: VariantSpec,
    ) -> dict:
        """A streaming chat request; with ``force_length`` exactly ``max_tokens`` come back."""

    def version(self, settings: Settings) -> str:
        """The engine's version string, for provenance."""
        return "unknown"


_REGISTRY: dict[str, type[StackAdapter]] = {}


def register_stack(cls: type[StackAdapter]) -> type[StackAdapter]:
    _REGISTRY[cls.name] = cls
    return cls


def get_stack(name: str) -> StackAdapter:
    from servebench import stacks  # noqa: F401  (imports the adapters so they register)

    try:
        return _REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown stack {name!r}; known stacks: {sorted(_REGISTRY)}") from None


def known_stacks() -> list[str]:
    from servebench import stacks  # noqa: F401

    return sorted(_REGISTRY)


def stream_fields() -> dict:
    """Streaming with a final usage chunk, as every OpenAI-compatible stack understands it."""
    return {"stream": True, "stream_options": {"include_usage": True}}
