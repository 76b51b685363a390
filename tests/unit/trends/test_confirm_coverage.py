"""``trends.confirm.judge`` where the truth is known: its 95% interval holds a suspect's true
change about 95 times in 100, a null suspect (the night was one launch's excursion) is
rarely confirmed, and a 3x slowdown is. Suspects drawn as ``benchmarks/confirm_coverage.py``
draws them (each night's host factor shared by both sides, 14%; each launch its own, 9%;
docs/trends.md), on seeds other than those its figures in the docs come from."""

import importlib.util
import math
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "confirm_coverage_bench", Path(__file__).parents[3] / "benchmarks" / "confirm_coverage.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

LOCAL = {"nights": 7, "launches": 3, "launch": 0.09, "host_sd": 0.14, "drift": 0.03}
SEEDS = range(40_000, 40_300)


def _verdicts(step: float) -> list[tuple[object, float]]:
    return [bench.trial(seed, step, **LOCAL) for seed in SEEDS]


def test_the_interval_holds_the_truth_as_often_as_it_says():
    verdicts = _verdicts(0.0)
    held = sum(math.log1p(v.low) <= truth <= math.log1p(v.high) for v, truth in verdicts)
    # 95.7% on the docs' seeds; 300 draws of a true 95% fall within 91-98.5% all but 1 in 1000
    assert 0.91 * len(SEEDS) <= held <= 0.985 * len(SEEDS)
    # the null's excursions posted as confirmed regressions: 2.3% on the docs' seeds
    assert sum(v.verdict == "confirmed" for v, _ in verdicts) <= 0.05 * len(SEEDS)


def test_a_variant_three_times_slower_is_confirmed():
    # the +109% [-1, +339] of a 3x slower victim on a noisy host, before its t took the
    # baseline nights' degrees of freedom: 98.7% confirmed on the docs' seeds
    confirmed = sum(v.verdict == "confirmed" for v, _ in _verdicts(1.0))
    assert confirmed >= 0.95 * len(SEEDS)


def test_a_true_step_is_rarely_dismissed_as_one_launchs_excursion():
    # the night shows more than the true +30% (it was raised for being far off): 0.7%
    # dismissed on the docs' seeds, 8.6% when the relaunches had to reach all of the night
    dismissed = sum(v.verdict == "dismissed" for v, _ in _verdicts(0.30))
    assert dismissed <= 0.03 * len(SEEDS)


def test_a_night_whose_cause_left_before_the_morning_is_dismissed_more_often_than_not():
    # twice its level by a neighbour's job gone by the relaunches: 65.0% on the docs' seeds
    gone = [bench.trial(seed, 0.0, left=1.0, **LOCAL)[0].verdict for seed in SEEDS]
    assert gone.count("dismissed") >= 0.5 * len(SEEDS)
    assert gone.count("confirmed") <= 0.05 * len(SEEDS)
