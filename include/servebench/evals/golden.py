"""Golden sets: JSONL files of items with checkable answers, validated line by line."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servebench.errors import GoldenSetError
from servebench.evals.scorers import known_scorers, validate_reference


class GoldenItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    messages: list[dict] | None = None
    prompt: str | None = None
    reference: str
    scorer: str = "exact"
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_input(self) -> GoldenItem:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("give exactly one of 'messages' or 'prompt'")
        if self.scorer not in known_scorers():
            raise ValueError(f"unknown scorer {self.scorer!r}; known: {known_scorers()}")
        problem = validate_reference(self.scorer, self.reference)  # a bad regex/schema, early
        if problem:
            raise ValueError(problem)
        return self

    def chat_messages(self) -> list[dict]:
        return self.messages if self.messages is not None else [
            {"role": "user", "content": self.prompt}
        ]


def load_golden_set(path: str | Path) -> list[GoldenItem]:
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise GoldenSetError(f"{path}: cannot read golden set: {exc.strerror}") from None
    items, seen = [], set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = GoldenItem.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise GoldenSetError(f"{path}:{number}: not valid JSON: {exc.msg}") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "<item>"
            raise GoldenSetError(f"{path}:{number}: field {field}: {first['msg']}") from None
        if item.id in seen:
            raise GoldenSetError(f"{path}:{number}: duplicate id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise GoldenSetError(f"{path}: golden set is empty")
    return items
