"""``trends.nightly.beyond_host``: a variant that moved with its host, by more than the host
moved its siblings, is its own change. Its false alarms on like-moving nulls and its catch of
an injected step, on pairs drawn as ``benchmarks/beyond_host.py`` draws them (each night's
host factor shared by both variants, 14%; each launch its own, 9%; docs/trends.md), on seeds
other than those its thresholds were chosen on."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
from servebench.trends.nightly import beyond_host

_spec = importlib.util.spec_from_file_location(
    "beyond_host_bench", Path(__file__).parents[3] / "benchmarks" / "beyond_host.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

SEEDS = range(40_000, 40_400)
LOCAL = {"host": 1.3, "before": 14, "after": 3, "launch": 0.09, "host_sd": 0.14}


def _caught(beyond: float, **kw) -> list[float]:
    said = [bench.pair(seed, beyond, **{**LOCAL, **kw}) for seed in SEEDS]
    return [m for m in said if m is not None and m > 0]


def test_a_host_move_both_variants_share_is_rarely_called_one_variants_own():
    # the host +30% for both: at most 4 in 100 such moves called the victim's own (1.5%
    # measured on held-out seeds, docs/trends.md; the confirm step then relaunches it)
    assert len(_caught(1.0)) <= 0.04 * len(SEEDS)
    # nor where the whole host wandered 20% a night and each launch 12%
    assert len(_caught(1.0, launch=0.12, host_sd=0.20, host=1.4)) <= 0.05 * len(SEEDS)


def test_a_variant_slowed_beyond_its_host_is_caught_with_its_size():
    # the victim +95% where the host moved its sibling +30%: +50% beyond, three nights after
    caught = _caught(1.5)
    assert len(caught) >= 0.85 * len(SEEDS)
    assert 0.40 <= float(np.median(caught)) <= 0.60
    # +30% beyond: caught more often than not
    assert len(_caught(1.3)) >= 0.5 * len(SEEDS)


def test_it_needs_every_like_moving_sibling_and_enough_nights():
    nights = np.arange(17)
    rng = np.random.default_rng(1)
    host = np.where(nights >= 14, 1.3, 1.0) * (1 + 0.01 * rng.normal(size=17))
    mine = pd.DataFrame({"night": nights, "value": 2.0 * host * np.where(nights >= 14, 1.5, 1)})
    sibling = pd.DataFrame({"night": nights, "value": 3.0 * host})
    assert beyond_host(mine, [sibling], 14) > 0.4
    # a second sibling that moved as far as the victim: not beyond the host
    alike = mine.assign(value=mine["value"] * 1.5)
    assert beyond_host(mine, [sibling, alike], 14) is None
    # too few nights before to know the ratio's level
    assert beyond_host(mine[mine["night"] >= 11], [sibling], 14) is None
