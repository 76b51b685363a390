"""The same morning's confirmation, its logic alone: who is a suspect, the verdict from a
suspect's relaunches against its reference's, the budget, and what the verdicts do to the
night's changes."""

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from servebench.trends.confirm import (
    Session,
    Suspect,
    find_suspects,
    judge,
    t_interval,
    with_verdicts,
    within_budget,
)

NIGHTS = 10


def _series(values: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    """(variant, metric) -> nightly values of one cell's series."""
    rows = []
    for (variant, metric), vs in values.items():
        for night, v in enumerate(vs):
            rows.append({"series_id": f"t/{variant}/w/c1/{metric}#h", "metric": metric,
                         "night": night, "value": v, "target": "t", "stack": "llama_cpp",
                         "variant": variant, "workload": "w", "load_point": "c1"})
    return pd.DataFrame(rows)


def _noisy(level: float, n: int = NIGHTS, sd: float = 0.02, seed: int = 1) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level * (1 + sd * rng.standard_normal(n)))


def _suspects(series, alerts=(), sigmas=3.0, min_change=0.05):
    return find_suspects(series, list(alerts), {}, {"tonight": NIGHTS - 1}, NIGHTS - 1,
                         sigmas=sigmas, min_change=min_change)


def test_a_night_beyond_its_noise_is_a_suspect_and_a_quiet_one_is_not():
    series = _series({("slow", "tpot_ms_p50"): _noisy(10)[:-1] + [13.0],
                      ("calm", "tpot_ms_p50"): _noisy(10, seed=2)[:-1] + [10.2],
                      # a tail's one night is not a suspect unless it was raised
                      ("slow", "tpot_ms_p95"): _noisy(20)[:-1] + [30.0]})
    [found] = _suspects(series)
    assert (found.variant, found.metric, found.source) == ("slow", "tpot_ms_p50", "suspect")
    assert found.night == NIGHTS - 1 and found.level == pytest.approx(10, rel=0.05)
    assert found.moved == pytest.approx(np.log(13 / found.level)) and not found.better
    # above its noise but under the sweep's floor: not worth a relaunch
    assert _suspects(series, min_change=0.5) == []


def test_every_regression_raised_tonight_is_a_suspect_first():
    series = _series({("slow", "tpot_ms_p50"): _noisy(10)[:-1] + [13.0],
                      ("slow", "tpot_ms_p95"): _noisy(20)[:-1] + [30.0]})
    alert = {"series_id": "t/slow/w/c1/tpot_ms_p95#h", "kind": "regression", "workload": "w",
             "before": 20.0, "change_run_id": "tonight"}
    found = _suspects(series, [alert])
    assert [(s.metric, s.source) for s in found] == [("tpot_ms_p95", "alert"),
                                                     ("tpot_ms_p50", "suspect")]
    assert found[0].level == 20.0
    # an improvement is re-measured too, asked whether it holds
    better = {**alert, "series_id": "t/slow/w/c1/tpot_ms_p50#h", "kind": "improvement",
              "before": 16.0}
    [found] = _suspects(series, [better])
    assert (found.source, found.better, found.sign) == ("alert", True, -1.0)
    assert found.moved == pytest.approx(np.log(16 / 13))
    # as is a host change, the way it moved
    [found] = _suspects(series, [{**better, "kind": "host_change"}])
    assert found.better and found.alert_kind == "host_change"


def _suspect(value=13.0, level=10.0, metric="tpot_ms_p50", variant="slow",
             better=False) -> Suspect:
    return Suspect(series_id=f"t/{variant}/w/c1/{metric}#h", target="t", stack="llama_cpp",
                   variant=variant, workload="w", load_point="c1", metric=metric,
                   source="alert" if better else "suspect", value=value, level=level,
                   noise=0.2, start=0, night=NIGHTS - 1, better=better,
                   alert_kind="improvement" if better else None)


def _history():
    return _series({("slow", "tpot_ms_p50"): _noisy(10), ("ref", "tpot_ms_p50"): _noisy(8, seed=3),
                    ("slow", "output_throughput"): _noisy(100, seed=4),
                    ("ref", "output_throughput"): _noisy(120, seed=5)})


def _judge(values, ref_values, **kw):
    suspect = kw.pop("suspect", _suspect())
    return judge(suspect, values, ref_values, _history(), "ref", min_change=0.05,
                 launches=len(values))


def test_a_variant_slower_than_its_reference_in_every_relaunch_is_confirmed():
    verdict = _judge([12.5, 12.9, 12.6], [8.0, 8.1, 7.9])
    assert verdict.verdict == "confirmed", verdict.words
    assert 0.2 < verdict.change < 0.35 and verdict.low > 0 and verdict.low < verdict.change \
        < verdict.high
    assert verdict.words.startswith("confirmed: TPOT p50 +")
    assert "against ref, 3 relaunches each side" in verdict.words


def test_a_reference_slower_alike_is_the_host():
    verdict = _judge([12.5, 12.9, 12.6], [10.0, 10.3, 10.1])
    assert verdict.verdict == "host", verdict.words
    assert verdict.level_change > 0.2 and verdict.reference_change > 0.2
    assert verdict.words.startswith("the host: ")


def test_a_night_that_does_not_reproduce_is_dismissed():
    verdict = _judge([10.1, 9.9, 10.2], [8.0, 8.1, 7.9])
    assert verdict.verdict == "dismissed", verdict.words
    assert "did not reproduce (one launch's excursion)" in verdict.words
    assert "the night's +30%" in verdict.words


def test_relaunches_that_scatter_too_widely_are_inconclusive():
    verdict = _judge([9.0, 16.0], [8.0, 8.0])
    assert verdict.verdict == "inconclusive", verdict.words


def test_throughput_is_worse_downwards():
    suspect = _suspect(value=70.0, level=100.0, metric="output_throughput")
    verdict = _judge([75.0, 74.0, 76.0], [121.0, 119.0, 120.0], suspect=suspect)
    assert verdict.verdict == "confirmed", verdict.words
    assert -0.3 < verdict.change < -0.2 and verdict.low < verdict.change < verdict.high < 0
    assert "output tok/s -" in verdict.words


def test_without_a_reference_the_suspect_is_held_to_its_own_nights():
    verdict = judge(_suspect(), [12.5, 12.9, 12.6], None, _history(), None, min_change=0.05,
                    launches=3)
    assert verdict.verdict == "confirmed", verdict.words
    assert "against its own nights" in verdict.words and "3 relaunches," not in verdict.words


def test_an_improvement_is_confirmed_the_way_it_moved_or_dismissed():
    faster = _suspect(value=7.0, better=True)
    verdict = _judge([7.6, 7.4, 7.5], [8.0, 8.1, 7.9], suspect=faster)
    assert verdict.verdict == "confirmed", verdict.words
    assert -0.3 < verdict.change < -0.2 and verdict.low < verdict.change < verdict.high < 0
    assert verdict.words.startswith("confirmed: TPOT p50 -")
    # the night's -30% with the relaunches where its nights were: one launch's excursion
    verdict = _judge([10.1, 9.9, 10.2], [8.0, 8.1, 7.9], suspect=faster)
    assert verdict.verdict == "dismissed", verdict.words
    assert "the night's -30% did not reproduce" in verdict.words
    # both sides faster alike: the host
    verdict = _judge([7.5, 7.4, 7.6], [6.0, 6.1, 5.9], suspect=faster)
    assert verdict.verdict == "host" and "both sides faster" in verdict.words, verdict.words


def test_failed_relaunches_leave_it_inconclusive():
    verdict = _judge([12.5, None, None], [8.0, 8.0, None])
    assert verdict.verdict == "inconclusive" and verdict.pairs == 1


def test_the_interval_widens_with_the_references_own_error():
    mean, lo, hi = t_interval([0.1, 0.12, 0.11])
    _, lo2, hi2 = t_interval([0.1, 0.12, 0.11], extra_se=0.05, extra_df=2)
    assert lo < mean < hi and lo2 < lo and hi2 > hi
    # the reference point's error known from many nights takes the t of their degrees of
    # freedom with the relaunches' (Welch-Satterthwaite), not the three relaunches' alone
    _, lo3, hi3 = t_interval([0.1, 0.12, 0.11], extra_se=0.05, extra_df=30)
    _, lo4, hi4 = t_interval([0.1, 0.12, 0.11], extra_se=0.05)
    assert lo2 < lo3 < lo4 < lo and hi < hi4 < hi3 < hi2
    se = np.sqrt(np.var([0.1, 0.12, 0.11], ddof=1) / 3 + 0.05 ** 2)
    assert hi4 - 0.11 == pytest.approx(stats.norm.ppf(0.975) * se, rel=0.05)
    # relaunches that agree exactly beside an exactly known reference point: the normal's
    *_, hi5 = t_interval([0.1, 0.1, 0.1], extra_se=0.05)
    assert hi5 - 0.1 == pytest.approx(stats.norm.ppf(0.975) * 0.05)
    assert t_interval([0.1])[1] == -np.inf


def test_the_budget_skips_a_session_that_alone_overruns_it():
    sessions = [Session("t", v, "ref", estimate_s=s) for v, s in
                (("a", 100), ("b", 400), ("c", 150))]
    kept, over = within_budget(sessions, 300)
    assert [s.variant for s in kept] == ["a", "c"] and [s.variant for s in over] == ["b"]


def _runs():
    return pd.DataFrame({"run_id": [f"r{i}" for i in range(NIGHTS)],
                         "run_date": [dt.date(2026, 11, 1) + dt.timedelta(days=i)
                                      for i in range(NIGHTS)]})


def _verdict(sid, verdict, source="alert"):
    return {"series_id": sid, "verdict": verdict, "words": f"{verdict}: ...", "source": source,
            "target": "t", "stack": "llama_cpp", "variant": "slow", "workload": "w",
            "load_point": "c1", "metric": "tpot_ms_p50", "level": 10.0, "value": 13.0,
            "night_change_pct": 30.0}


def test_the_verdicts_decide_what_the_night_posts():
    alerts = [{"series_id": "a", "kind": "regression", "cause": "x"},
              {"series_id": "b", "kind": "regression", "cause": "x"},
              {"series_id": "c", "kind": "host_change", "cause": "y"},
              {"series_id": "d", "kind": "newly_failing"},
              {"series_id": "g", "kind": "improvement", "cause": "nothing recorded changed"}]
    verdicts = [_verdict("a", "confirmed"), _verdict("b", "dismissed"), _verdict("c", "host"),
                _verdict("g", "dismissed"),
                _verdict("e", "confirmed", "suspect"), _verdict("f", "dismissed", "suspect")]
    out = {r["series_id"]: r for r in with_verdicts(
        alerts, verdicts, _runs(), {"e": (NIGHTS - 2, "launch args --parallel 4 -> 1")})}
    assert out["a"]["kind"] == "regression" and out["a"]["confirmation"] == "confirmed: ..."
    assert out["b"]["kind"] == "unconfirmed"  # kept as data, never posted as a regression
    assert out["c"]["kind"] == "host_change" and out["c"]["cause"].startswith("the host")
    assert "confirmation" not in out["d"]
    assert out["g"]["kind"] == "unconfirmed"  # an improvement that did not hold, alike
    # a quiet series' suspect the relaunches confirmed is a regression, dated to its
    # recorded change the night before (a suspect then, not yet confirmed)
    assert out["e"]["kind"] == "regression" and out["e"]["nights_since"] == 2
    assert out["e"]["change_run_id"] == f"r{NIGHTS - 2}" and out["e"]["change_pct"] == 30.0
    assert out["e"]["cause"] == "launch args --parallel 4 -> 1"
    assert "f" not in out  # dismissed quiet suspects stay in the confirmations table only
    # with nothing recorded near it, tonight's, and said so
    verdicts = [_verdict("e", "confirmed", "suspect")]
    [tonight] = with_verdicts([], verdicts, _runs(), {})
    assert tonight["nights_since"] == 1 and tonight["change_run_id"] == f"r{NIGHTS - 1}"
    assert tonight["cause"].startswith("nothing recorded changed")


def test_a_variant_slower_than_its_baseline_variant_the_same_night_is_a_suspect():
    """The host's nights move both variants of a target alike (here by up to 25%), which
    hides a +30% night of one of them in its own nights' noise; against the baseline variant
    the same night it stands out. A night both moved together is no one's suspect."""
    host = np.array([1.0, 1.25, 0.8, 1.1, 0.9, 1.2, 0.85, 1.15, 0.95, 0.8])
    ref = 8 * host * np.array(_noisy(1, sd=0.01, seed=6))
    slow = 10 * host * np.array(_noisy(1, sd=0.01, seed=7))
    slow[-1] *= 1.3  # tonight: +30%, on a night the host was 20% faster
    series = _series({("base", "tpot_ms_p50"): list(ref), ("slow", "tpot_ms_p50"): list(slow)})
    assert _suspects(series) == []  # its own nights: +4% of a 15% noise
    [found] = _suspects_against(series)
    assert (found.variant, found.metric, found.source) == ("slow", "tpot_ms_p50", "suspect")
    assert found.relative_sigmas > 3 > found.sigmas and found.against == "base"
    # held to what the baseline variant's night implied: +30%, not its own nights' +4%
    assert found.value / found.level == pytest.approx(1.3, rel=0.03)
    # relaunched: 30% slower than base in each pair, confirmed against it
    verdict = judge(found, [13.0, 13.1, 12.9], [8.0, 8.0, 8.0], series, "base",
                    min_change=0.05, launches=3)
    assert verdict.verdict == "confirmed", verdict.words
    # or not: the night did not reproduce, said against the variant it was held to
    verdict = judge(found, [10.0, 10.1, 9.9], [8.0, 8.0, 8.0], series, "base",
                    min_change=0.05, launches=3)
    assert verdict.verdict == "dismissed" and "% against base did not" in verdict.words
    # the host alone: both 20% faster tonight, as the nights before moved them
    calm = 10 * host * np.array(_noisy(1, sd=0.01, seed=7))
    assert _suspects_against(_series({("base", "tpot_ms_p50"): list(ref),
                                      ("slow", "tpot_ms_p50"): list(calm)})) == []
    # the baseline variant itself has nothing to be held to but its own nights
    faster = _series({("base", "tpot_ms_p50"): list(ref * np.r_[np.ones(9), 1.3]),
                      ("slow", "tpot_ms_p50"): list(calm)})
    assert [s.variant for s in _suspects_against(faster)] == []


def _suspects_against(series):
    return find_suspects(series, [], {}, {"tonight": NIGHTS - 1}, NIGHTS - 1, sigmas=3.0,
                         min_change=0.05, baselines={"t": "base"})


def test_a_suspect_whose_move_began_at_a_recorded_change_nights_ago_is_dated_to_it():
    """A quiet series stepped at a recorded change five nights back, by less than the
    detector raised (the slowed variant's throughput, slots cut on night 14, -25% against its
    baseline variant while the host moved both by up to 25%): tonight it is a suspect against
    the baseline variant, and a confirmed one is that change, dated to its night with its
    cause (``bench.confirm``: ``attribute`` over ``suspect_nights``), not tonight's with
    nothing recorded. Its own values, the host in them, could not date it."""
    from servebench.trends.attribution import NOTHING_CHANGED, attribute
    from servebench.trends.confirm import suspect_nights

    n, cut = 20, 14
    host = 1 + 0.25 * np.sin(np.arange(n) * 1.7)
    ref = 100 * host * np.array(_noisy(1, n, sd=0.01, seed=3))
    slow = 100 * host * np.array(_noisy(1, n, sd=0.01, seed=4))
    slow[cut:] *= 0.75
    series = _series({("base", "output_throughput"): list(ref),
                      ("slow", "output_throughput"): list(slow)})
    [found] = find_suspects(series, [], {}, {}, n - 1, sigmas=3.0, min_change=0.2,
                            baselines={"t": "base"})
    assert (found.variant, found.against, found.start) == ("slow", "base", 0)
    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(n)],
                         "run_date": [dt.date(2026, 11, 1) + dt.timedelta(days=i)
                                      for i in range(n)],
                         "suite_git_sha": "abc", "sweep_hash": "h"})
    where = {"target": "t", "stack": "llama_cpp", "variant": "slow", "workload": "w",
             "load_point": "c1"}
    slots = [4 if i < cut else 1 for i in range(n)]
    cells = pd.DataFrame([{**where, "run_id": f"r{i}", "engine_version": "b1",
                           "launch_args": f'["llama-server", "--parallel", "{slots[i]}"]'}
                          for i in range(n)])
    ratio = suspect_nights(series, found, n)
    assert ratio[:cut] == pytest.approx(1.0, rel=0.05)
    assert ratio[cut:] == pytest.approx(0.75, rel=0.05)

    def dated(values):
        return attribute(cells, runs, where, n - 1, lo=found.start, hi=n - 1, tolerance=2,
                         values=values, lead=n - 1 - found.start)

    assert dated(ratio) == (cut, "launch args --parallel 4 -> 1")
    assert dated(slow) == (n - 1, NOTHING_CHANGED)
