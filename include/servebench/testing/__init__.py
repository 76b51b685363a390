"""Test and benchmark helpers: a fake OpenAI-compatible streaming server with ground truth.

Names are imported lazily so ``python -m servebench.testing.fake_openai_server`` runs cleanly.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FakeOpenAIServer", "FakeServerConfig", "serve_in_subprocess", "serve_in_thread"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from servebench.testing import fake_openai_server

        return getattr(fake_openai_server, name)
    raise AttributeError(name)
