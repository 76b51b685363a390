"""What every model of the sweep spec shares: an unknown field is an error, and a read spec
is frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
