"""Attribution: what recorded change explains a series' change. The provenance of the night
before a change and of the change night is compared -- engine version, launch args, model file,
a recipe variant's ``recipe_hash`` (recipe, calibration data, tools), sampling, hardware and
CPU features, the suite's code the cell ran (``measuring_code``: a suite deploy that touched only the digest is no cause), and the cell's own part of the sweep spec
(``cell_spec``: another variant's knob is no cause of this one's change) -- and what changed is
named; when nothing recorded changed, it says so (the host, or noise)."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pandas as pd

from servebench.trends.detect import noise_sigma

CELL_PROVENANCE = ("engine_version", "launch_args", "model_file_sha256", "recipe_hash",
                   "sampling_hash", "hardware", "image", "gpu",
                   "n_requests")  # image: the digest pulled;
# n_requests: how many the cell measured (load.auto_requests sizes it: a percentile of more
# requests is estimated with less small-sample bias, so it may sit apart); gpu: driver, CUDA;
# recipe_hash: what made a recipe variant's checkpoint (servebench.quantize:
# its series stays its base model's, so a recipe change is a change within it, named here);
# and the suite's commit, named only where the cell's measuring_code moved (_suite_diff), and
# the cell's part of the sweep spec (_spec_diff)
SPEC_CHANGES_SHOWN = 4
NOTHING_CHANGED = "nothing recorded changed (the host, or noise)"
RECORDED_STEP_SHARE = 0.75  # a later recorded change, stepping this share as far, is the night
# a drastic night's jump finishes a move that a recorded change up to ``locate_tolerance``
# nights before began, when every night since stood this many of the baseline's sigmas off on
# the jump's side
LEAD_SIGMAS = 2.0

WHERE = ("target", "stack", "variant", "workload", "load_point")  # a cell, within a run


# how a sweep's history is judged and reported: not what any cell measured
_NOT_MEASURED = ("description", "trends", "cross_stack")


def cell_spec(spec: dict, *, target: str, variant: str, workload: str | None) -> dict[str, str]:
    """The part of a sweep spec (its JSON form, as runs store it) that one cell measured, as
    ``{"variant.max_num_seqs": "4", "load.concurrency": "[1, 4]", ...}``: the run-wide
    settings, its target without the other variants, its variant, and its workload (all of
    them where ``workload`` is None: a variant-wide alert). A change elsewhere in the sweep --
    another variant's knob, the alert floor -- is no cause of this cell's change."""
    flat: dict[str, str] = {}
    for key, value in spec.items():
        if key in _NOT_MEASURED or key == "targets":
            continue
        if key == "workloads" and workload is not None:
            value = [w for w in value if isinstance(w, dict) and w.get("name") == workload]
        _flatten(value, key, flat)
    for t in spec.get("targets") or []:
        if t.get("name") != target:
            continue
        # which workloads the target runs is no cause of a cell of one of them
        _flatten({k: v for k, v in t.items() if k not in ("variants", "workloads")}, "target",
                 flat)
        for v in t.get("variants") or []:
            if v.get("name") == variant:
                _flatten(v, "variant", flat)
    return flat


def _flatten(value: object, path: str, out: dict[str, str]) -> None:
    """Dotted paths to leaf values; a list of named items is keyed by name (``workloads[chat]``),
    any other list is one leaf."""
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{path}.{key}", out)
    elif (isinstance(value, list) and value
          and all(isinstance(i, dict) and "name" in i for i in value)):
        for item in value:
            _flatten({k: v for k, v in item.items() if k != "name"}, f"{path}[{item['name']}]",
                     out)
    else:
        out[path] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def matching(cells: pd.DataFrame, row: dict, keys) -> pd.Series:
    """The rows of ``cells`` whose ``keys`` equal ``row``'s."""
    mask = pd.Series(True, index=cells.index)
    for key in keys:
        mask &= cells[key] == row[key]
    return mask


def cell_at(cells: pd.DataFrame, run_id: str, row: dict) -> dict | None:
    keys = WHERE if row.get("workload") else WHERE[:3]  # a variant-wide alert: any of its cells
    found = cells[(cells["run_id"] == run_id) & matching(cells, row, keys)]
    return found.iloc[0].to_dict() if not found.empty else None


def attribute(cells: pd.DataFrame, runs: pd.DataFrame, row: dict, night: int, *, lo: int,
               hi: int, tolerance: int, values: np.ndarray | None = None,
               lead: int = 0) -> tuple[int, str]:
    """(change night, cause): the detector places a change to within ``tolerance`` nights
    (Otava's split and the noise test can land a night off when few nights follow it), so a
    recorded provenance change that near -- the nearest, the detector's own night first -- is
    the change night and its cause. A change raised on the night that decides it can also be
    placed too early, where a few soft nights lean the same way (seen in the local proof:
    throughput placed three and four nights before the slots were cut, on nights 2-15% low):
    with the series' ``values``, the first recorded change later than that, up to tonight,
    where the level steps the same way by RECORDED_STEP_SHARE of the located step or more (a
    recorded change is evidence of its own), is the change night. A drastic night's jump
    (``lead`` nights) can finish a move a recorded change began up to ``lead`` nights before
    it, too little for the evidence test by itself (seen in the local proof: the slowed
    variant's cost +14% and +20% the two nights after its slots were cut, then +58% on a slow
    night of the host): where every night since that change stood LEAD_SIGMAS of the
    baseline's noise off on the jump's side, it is the change night. Else the detector's
    night, with nothing recorded changed. Nights with no value just before the detector's
    night (the series could not show the change on them) are searched for a recorded change
    too, nearest first."""
    for offset in sorted(range(-tolerance, tolerance + 1), key=lambda d: (abs(d), d)):
        candidate = night + offset
        if lo < candidate <= hi:
            cause = recorded_change(cells, runs, row, candidate)
            if cause != NOTHING_CHANGED:
                return candidate, cause
    if values is not None:
        # the nights just before the located one that have no value (cells invalid or failed
        # while the change began): the change may be any of them, and the series could not
        # show it sooner (seen in the local proof: a cut dated two nights late, nothing
        # recorded, its first two nights invalid under a loaded host)
        gap = night - 1
        while gap > lo and not np.isfinite(values[gap]):
            if gap < night - tolerance:
                cause = recorded_change(cells, runs, row, gap)
                if cause != NOTHING_CHANGED:
                    return gap, cause
            gap -= 1
    if values is not None and lead:
        side = np.sign(values[night] - np.nanmedian(values[lo:night]))
        for earlier in range(night - 1, max(lo, night - lead - 1), -1):
            cause = recorded_change(cells, runs, row, earlier)
            if cause == NOTHING_CHANGED:
                continue
            base = values[lo:earlier][np.isfinite(values[lo:earlier])]
            off = (values[earlier:night] - np.median(base)) * side if len(base) >= 4 else None
            # (a night missing, NaN, is no evidence)
            if off is not None and np.all(off > LEAD_SIGMAS * noise_sigma(base)):
                return earlier, cause
            break  # the nearest earlier recorded change began it, or none did
    if values is not None:
        located = _step(values, lo, night)
        for later in range(max(night + tolerance + 1, lo + 1), hi + 1):
            cause = recorded_change(cells, runs, row, later)
            if cause == NOTHING_CHANGED:
                continue
            step = _step(values, lo, later)
            if step * located > 0 and abs(step) >= RECORDED_STEP_SHARE * abs(located):
                return later, cause
            break  # the first later recorded change explains it, or none does
    # the detector's own night was looked at first above, when it lies in (lo, hi]
    return night, (NOTHING_CHANGED if lo < night <= hi
                   else recorded_change(cells, runs, row, night))


def _step(values: np.ndarray, lo: int, night: int) -> float:
    """How far the level moves at ``night``: the median from it on less the median of the
    nights from ``lo`` before it (0 where either side has no value)."""
    before, after = values[lo:night], values[night:]
    if not np.isfinite(before).any() or not np.isfinite(after).any():
        return 0.0
    return float(np.nanmedian(after) - np.nanmedian(before))


def recorded_change(cells: pd.DataFrame, runs: pd.DataFrame, row: dict, night: int) -> str:
    """What the recorded provenance says changed between the night before ``night`` and it."""
    if night == 0:
        return NOTHING_CHANGED
    before_run, after_run = runs.iloc[night - 1], runs.iloc[night]
    before = cell_at(cells, before_run["run_id"], row) or {}
    after = cell_at(cells, after_run["run_id"], row) or {}
    changes = []
    for key, a, b in [(key, before.get(key), after.get(key)) for key in CELL_PROVENANCE]:
        if missing(a) or missing(b) or a == b:
            continue
        if key == "launch_args":
            diff = flag_diff(a, b)
            if diff:
                changes.append(f"launch args {diff}")
            continue
        changes.append(f"{key} {_short(a)} -> {_short(b)}")
    suite = _suite_diff(before_run.get("suite_git_sha"), after_run.get("suite_git_sha"),
                        before.get("measuring_code"), after.get("measuring_code"))
    if suite:
        changes.append(suite)
    spec = _spec_diff(before_run, after_run, row)
    if spec:
        changes.append(f"sweep {spec}")
    return "; ".join(changes) if changes else NOTHING_CHANGED


def _suite_diff(sha_a, sha_b, code_a, code_b) -> str:
    """``suite_git_sha 0123abc -> 4567def (loadgen/client.py, stacks/vllm.py)``: a suite
    change, named where it changed the files the cell ran (``provenance.measuring_code``).
    A deploy that touched only what reports (the digest, the board) ran the same cell and
    is no cause; the same code under another commit is none either. Cells recorded without
    their code (older rows) are compared by the commit alone."""
    if missing(code_a) or missing(code_b):
        if missing(sha_a) or missing(sha_b) or sha_a == sha_b:
            return ""
        return f"suite_git_sha {_short(sha_a)} -> {_short(sha_b)}"
    try:
        old, new = json.loads(code_a), json.loads(code_b)
    except ValueError:
        old, new = {"": code_a}, {"": code_b}
    moved = [path for path in sorted(set(old) | set(new)) if old.get(path) != new.get(path)]
    if not moved:
        return ""
    if len(moved) > SPEC_CHANGES_SHOWN:
        moved = moved[:SPEC_CHANGES_SHOWN] + [f"and {len(moved) - SPEC_CHANGES_SHOWN} more"]
    commits = ("suite_git_sha " + f"{_short(sha_a)} -> {_short(sha_b)}"
               if not (missing(sha_a) or missing(sha_b) or sha_a == sha_b) else "suite code")
    return f"{commits} ({', '.join(moved)})"


def _spec_diff(before_run: pd.Series, after_run: pd.Series, row: dict) -> str:
    """``variant.max_num_seqs 4 -> 1``: what changed, between two runs, in the part of the
    sweep spec ``row``'s cell measured (``cell_spec``); a run without its spec is
    compared by the whole sweep's hash."""
    a, b = before_run.get("spec_json"), after_run.get("spec_json")
    if missing(a) or missing(b):
        h1, h2 = before_run.get("sweep_hash"), after_run.get("sweep_hash")
        return "" if missing(h1) or missing(h2) or h1 == h2 else f"hash {h1} -> {h2}"
    where = (row["target"], row["variant"], row.get("workload") or None)
    old, new = _cell_spec(a, *where), _cell_spec(b, *where)
    # a field the spec gained at its default (null) is not written in older runs' specs: the
    # night a suite adds one (a variant's recipe) is no sweep change
    parts = [f"{key} {_short(old.get(key, '(none)'))} -> {_short(new.get(key, '(none)'))}"
             for key in sorted(set(old) | set(new))
             if old.get(key, "null") != new.get(key, "null")]
    if len(parts) > SPEC_CHANGES_SHOWN:
        parts = parts[:SPEC_CHANGES_SHOWN] + [f"and {len(parts) - SPEC_CHANGES_SHOWN} more"]
    return ", ".join(parts)


@functools.lru_cache(maxsize=256)
def _cell_spec(spec_json: str, target: str, variant: str, workload: str | None) -> dict:
    """``cell_spec`` of a stored spec, parsed once: a night's spec is compared for
    every series and candidate night (read only: the dict is shared)."""
    return cell_spec(json.loads(spec_json), target=target, variant=variant, workload=workload)


# where a server listens changes every night and says nothing about what was measured
PLACEMENT_FLAGS = {"--host", "--port", "-p", "--api-server-count"}


def _flags(argv_json: str) -> dict[str, str]:
    """A launch command as {flag: value} (the binary and the listen address left out)."""
    try:
        argv = json.loads(argv_json)
    except (TypeError, ValueError):
        return {"": str(argv_json)}
    flags: dict[str, str] = {}
    i = 1  # argv[0] is the binary: its version is engine_version's business
    while i < len(argv):
        token = str(argv[i])
        value = ""
        if token.startswith("-") and i + 1 < len(argv) and not str(argv[i + 1]).startswith("--"):
            value = str(argv[i + 1])
            i += 1
        if token not in PLACEMENT_FLAGS:
            flags[token] = value
        i += 1
    return flags


def flag_diff(a: str, b: str) -> str:
    """``--parallel 2 -> 1; +--no-mmap; ---flash-attn``: the flags that changed."""
    before, after = _flags(a), _flags(b)
    parts = []
    for flag in sorted(set(before) | set(after)):
        if flag not in after:
            parts.append(f"-{flag} {before[flag]}".rstrip())
        elif flag not in before:
            parts.append(f"+{flag} {after[flag]}".rstrip())
        elif before[flag] != after[flag]:
            parts.append(f"{flag} {before[flag]} -> {after[flag]}")
    return "; ".join(parts)


def missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _short(value) -> str:
    text = str(value)
    if len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text):
        return text[:12]  # a hash, a commit
    return text if len(text) <= 120 else text[:117] + "..."


