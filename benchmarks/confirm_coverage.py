#!/usr/bin/env python3
"""The same morning's verdict (``trends.confirm.judge``) on simulated suspects whose truth is
known: how often its interval holds the true change, and how often a suspect is confirmed,
for a null (the night was one launch's excursion, or a neighbour's job that left before the
morning) and for true steps.

Each trial: ``--nights`` baseline nights of a suspect variant and its reference, each night's
host factor shared by both (``host_sd``) and each launch its own (``launch``, plus 3% from the
requests); tonight's night worse by the step and an excursion; then the morning's relaunches,
ABBA (R S S R R S ...), the host's morning factor shared and its speed drifting from one
relaunch to the next (``drift``, a random walk). The parts are issue 49's measured ones on the
local default: host 14% a night, 9% a launch. Prints one row per seed range and noise.

  .venv/bin/python benchmarks/confirm_coverage.py [--trials 1000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd
from servebench.config.judging import TrendsSpec
from servebench.trends.confirm import Suspect, judge
from servebench.trends.detect import robust_sigma

STEPS = (0.0, 0.15, 0.30, 1.0)  # the suspect's true change, relative
METRIC = "tpot_ms_p50"
MIN_CHANGE = TrendsSpec().min_change  # the spec's default floor


def _series(suspect: np.ndarray, reference: np.ndarray) -> pd.DataFrame:
    rows = [{"series_id": f"t/{variant}/w/c1/{METRIC}#h", "metric": METRIC, "night": night,
             "value": float(v), "target": "t", "stack": "llama_cpp", "variant": variant,
             "workload": "w", "load_point": "c1"}
            for variant, values in (("suspect", suspect), ("reference", reference))
            for night, v in enumerate(values)]
    return pd.DataFrame(rows)


def _order(launches: int) -> list[str]:
    """ABBA as ``bench.confirm`` relaunches: R S S R, R S S R, ... cut to 2 * launches."""
    return (["R", "S", "S", "R"] * launches)[:2 * launches]


def trial(seed: int, step: float, *, nights: int, launches: int, launch: float,
          host_sd: float, drift: float, tails: float = 0.0, left: float | None = None):
    """One suspect's verdict: (judgement, the true log change). ``tails``: the share of
    launches that are a far excursion (three times ``launch``), the heavy tail a shared
    host's stalls give. ``left``: tonight's night that much worse (+1.0: twice), by what
    left before the morning (a neighbour's job), in place of the drawn excursion."""
    rng = np.random.default_rng(seed)

    def noise(n: int) -> np.ndarray:
        far = rng.random(n) < tails
        return rng.normal(0, launch, n) * np.where(far, 3.0, 1.0) + rng.normal(0, 0.03, n)

    host = rng.normal(0, host_sd, nights + 1)
    suspect = 10.0 * np.exp(host + noise(nights + 1))
    reference = 8.0 * np.exp(host + noise(nights + 1))
    truth = math.log1p(step)
    # tonight's night: the step and an excursion that made it a suspect
    excursion = abs(rng.normal(0, launch)) + 0.1
    suspect[-1] = 10.0 * math.exp(truth + (math.log1p(left) if left is not None
                                           else excursion))
    series = _series(suspect, reference)
    level = float(np.median(suspect[:-1]))
    spread = robust_sigma(suspect[:-1])
    found = Suspect(series_id=f"t/suspect/w/c1/{METRIC}#h", target="t", stack="llama_cpp",
                    variant="suspect", workload="w", load_point="c1", metric=METRIC,
                    source="suspect", value=float(suspect[-1]), level=level, noise=spread,
                    start=0, night=nights)
    order = _order(launches)
    morning = rng.normal(0, host_sd) + np.cumsum(rng.normal(0, drift, len(order)))
    at = dict(zip(range(len(order)), morning, strict=True))
    measured = np.exp(np.array([at[i] for i in range(len(order))]) + noise(len(order)))
    values = [float(10.0 * math.exp(truth) * m) for m, side in zip(measured, order,
                                                                    strict=True) if side == "S"]
    refs = [float(8.0 * m) for m, side in zip(measured, order, strict=True) if side == "R"]
    return judge(found, values, refs, series, "reference", min_change=MIN_CHANGE,
                 launches=launches), truth


def summary(first: int, trials: int, **kw) -> dict[str, float]:
    """Per step: the share of trials whose interval held the truth, and of each verdict."""
    out: dict[str, float] = {}
    for step in STEPS:
        covered, verdicts = 0, []
        for seed in range(first, first + trials):
            verdict, truth = trial(seed, step, **kw)
            covered += math.log1p(verdict.low) <= truth <= math.log1p(verdict.high)
            verdicts.append(verdict.verdict)
        out[f"covered {step:+.0%}"] = covered / trials
        for kind in ("confirmed", "dismissed"):
            out[f"{kind} {step:+.0%}"] = verdicts.count(kind) / trials
    gone = [trial(seed, 0.0, left=1.0, **kw)[0].verdict for seed in range(first, first + trials)]
    out["dismissed, a +100% night that left"] = gone.count("dismissed") / trials
    return out


ROWS = (("seeds 0-", 0, {"launch": 0.09, "host_sd": 0.14, "drift": 0.03}),
        ("seeds 20000-", 20_000, {"launch": 0.09, "host_sd": 0.14, "drift": 0.03}),
        ("seeds 30000- (noisier, 5% far launches)", 30_000,
         {"launch": 0.12, "host_sd": 0.20, "drift": 0.05, "tails": 0.05}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--nights", type=int, default=7)
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args()
    # the interval moves with the truth, so one step's coverage is every step's
    head = ["covered +0%", "confirmed +0%", "dismissed +0%",
            *(f"confirmed {s:+.0%}" for s in STEPS[1:]), "dismissed +30%",
            "dismissed, a +100% night that left"]
    print(f"{args.nights} baseline nights, {args.launches} relaunches each side, "
          f"{args.trials} trials a cell")
    print("| seeds | launch | host sd | drift | " + " | ".join(head) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(head))
    for name, first, noise in ROWS:
        got = summary(first, args.trials, nights=args.nights, launches=args.launches, **noise)
        seeds = name.replace("-", f"-{first + args.trials - 1}", 1)
        print(f"| {seeds} | {noise['launch']:.0%} | "
              f"{noise['host_sd']:.0%} | {noise['drift']:.0%} | "
              + " | ".join(f"{got[h]:.1%}" for h in head) + " |")


if __name__ == "__main__":
    main()
