"""The sweep's one sampling spec, applied to every stack and to the golden-set eval."""

from __future__ import annotations

import hashlib
import json

from pydantic import Field

from servebench.config.base import _Strict


class SamplingSpec(_Strict):
    """Sent explicitly to every stack: no engine default is ever relied on."""

    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0: greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, description="0 disables top-k")
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(1.0, gt=0.0)
    seed: int = Field(1234, description="sent to every stack that takes one")

    def spec_hash(self) -> str:
        """Stable hash of the sampling spec, stored on every row for comparability."""
        payload = json.dumps(self.model_dump(), sort_keys=True).encode()
        return hashlib.sha256(payload).hexdigest()[:16]
