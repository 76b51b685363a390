"""The load-mode vocabulary: what each kind is, what the sweep spec and the load generator
accept from it, and that no module names a mode outside it."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from servebench.bench.cell import load_spec_for
from servebench.config import LoadPoint, LoadPoints
from servebench.loadgen.arrivals import LoadSpec
from servebench.loadgen.modes import (
    LOAD_MODES,
    LOADGEN_MODES,
    SEARCHED_MODES,
    SWEEP_MODES,
    at_offered_rate,
    is_searched,
)

PACKAGE = Path(__file__).resolve().parents[3] / "include" / "servebench"


def _having(prop: str) -> set[str]:
    return {name for name, mode in LOAD_MODES.items() if getattr(mode, prop)}


def test_the_stored_names_and_what_each_kind_is() -> None:
    # the cells table's load_mode values: history reads them, so they never change
    assert SWEEP_MODES == ("closed", "open", "max", "trace", "slo")
    assert LOADGEN_MODES == ("closed", "open", "max", "schedule")
    assert _having("arrival_driven") == {"open", "max", "trace", "schedule"}
    assert _having("closed_loop") == {"closed"}
    assert _having("drawn_arrivals") == {"open"}
    assert _having("offered_rate") == {"open", "trace"}
    assert _having("sizable") == {"closed", "open", "max"}
    assert SEARCHED_MODES == ("slo",)
    assert {name: mode.runs_as for name, mode in LOAD_MODES.items()} == {
        "closed": "closed", "open": "open", "max": "max", "trace": "schedule", "slo": None,
        "schedule": "schedule"}


def test_a_stored_cell_without_a_known_mode_is_neither_searched_nor_paced() -> None:
    for missing in (None, math.nan, "", "schedule-ish"):
        assert not is_searched(missing) and not at_offered_rate(missing)
    assert is_searched("slo") and at_offered_rate("trace") and not at_offered_rate("max")


def test_a_load_point_is_a_sweep_kind_and_a_load_spec_a_loadgen_mode() -> None:
    for mode in SWEEP_MODES:
        assert LoadPoint(label="x", mode=mode).mode == mode
    with pytest.raises(ValidationError, match="mode must be one of"):
        LoadPoint(label="x", mode="schedule")
    with pytest.raises(ValueError, match="'slo': a search over loads"):
        LoadSpec("slo", concurrency=1)
    with pytest.raises(ValueError, match="'trace': it runs as 'schedule'"):
        LoadSpec("trace", offsets=(0.0,))
    with pytest.raises(ValueError, match="a schedule needs offsets"):
        LoadSpec("schedule")
    assert LoadSpec("schedule", offsets=(0.5, 1.0)).offsets_for(2).tolist() == [0.5, 1.0]
    with pytest.raises(ValueError, match="'slo' point is a search over loads"):
        load_spec_for(LoadPoint(label="slo", mode="slo", concurrency=2), LoadPoints())


# a mode compared with, or passed as, a quoted name: `.mode == "open"`, `load_mode != "slo"`,
# `.get("load_mode", "closed") not in ("open", "trace")`, `mode="closed"`
_COMPARED = re.compile(r"""(\.mode\b|load_mode["']\]?|load_mode["'][^)\n]*\))\s*"""
                       r"""(==|!=|not in|in)\s*\(?\s*["']""")
_PASSED = re.compile(r"""\bmode=["'](\w+)["']""")


def test_no_module_names_a_mode_outside_the_vocabulary() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "modes.py" and path.parent.name == "loadgen":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            passed = [m for m in _PASSED.findall(line) if m in LOAD_MODES]
            if _COMPARED.search(line) or passed:
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert found == []


def test_the_scan_sees_a_repeated_tuple() -> None:
    for line in ('cell.get("load_mode", "closed") not in ("open", "trace")',
                 'if point.mode == "slo":', 'ok[ok["load_mode"] != "slo"]',
                 'LoadPoint(label="c1", mode="closed")'):
        assert _COMPARED.search(line) or _PASSED.search(line), line
    assert not _COMPARED.search("if self.mode in (_CHUNK_SIZE, _CHUNK_DATA):")
    assert [m for m in _PASSED.findall('model_dump(mode="json")') if m in LOAD_MODES] == []
