"""Annotations: "an expected change on night X for series matching ..." (an engine upgrade, a new
instance type). From that night on, matching series judge only nights after it: the new level
is the new baseline, not a regression.

```yaml
# include/trends/annotations.yaml
- date: 2026-11-20
  match: {target: "llama-*", metric: "ttft_*"}   # fnmatch patterns; a missing key matches all
  note: llama.cpp b7000 -> b7100
```
"""

from __future__ import annotations

import datetime as dt
from fnmatch import fnmatchcase
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servebench.errors import SpecError

MATCH_KEYS = ("target", "stack", "variant", "workload", "load_point", "metric")


class Annotation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    date: dt.date = Field(description="the first night of the expected new level")
    match: dict[str, str] = Field(default_factory=dict,
                                  description=f"fnmatch patterns over {', '.join(MATCH_KEYS)}")
    note: str = Field(description="why the change is expected")

    def matches(self, row: dict) -> bool:
        return all(fnmatchcase(str(row.get(key) or ""), pattern)
                   for key, pattern in self.match.items())


def load_annotations(path: str | Path) -> list[Annotation]:
    """Read an annotations file; a missing file is no annotations."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text()) or []
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, list):
        raise SpecError(f"{path}: expected a list of annotations")
    out = []
    for i, item in enumerate(data):
        try:
            annotation = Annotation.model_validate(item)
        except ValidationError as exc:
            problems = "; ".join(f"field {'.'.join(map(str, e['loc']))}: {e['msg']}"
                                 for e in exc.errors())
            raise SpecError(f"{path}: annotation [{i}]: {problems}") from None
        unknown = sorted(set(annotation.match) - set(MATCH_KEYS))
        if unknown:
            raise SpecError(f"{path}: annotation [{i}]: field match: unknown key(s) {unknown}; "
                            f"known: {list(MATCH_KEYS)}")
        out.append(annotation)
    return out


def reset_night(annotations: list[Annotation], row: dict, dates: list[dt.date]) -> int:
    """The last night (index into ``dates``, the series' nights in order) at which an
    annotation matching ``row`` resets the baseline; 0 when none does."""
    start = 0
    for annotation in annotations:
        if not annotation.matches(row):
            continue
        for night, date in enumerate(dates):
            if date >= annotation.date:
                start = max(start, night)
                break
    return start
