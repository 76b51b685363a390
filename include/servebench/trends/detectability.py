"""What a series can catch: the smallest worse step the detector (``trends.detect``) raises
by the ``min_nights_after``-th night of the step (the first night it can) at least ``POWER``
of the time, at its own false-alarm rate, from the series' own nights run through the
detector's own rules and arithmetic (about 0.07 s a series). How, rule by rule, and how it
was checked: docs/trends.md, "What a series can catch"."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from otava.analysis import compute_change_points
from scipy import stats

from servebench.trends.detect import (
    CHI2_95,
    CHI2_99,
    FIRST_LOOK,
    DetectorSettings,
    Direction,
    baseline_level,
    baseline_noise,
    clean_outliers,
    is_pooled,
    lag1_autocorr,
    recent_noise_factor,
    restart_prior,
    smallest_change,
    standard_error,
    z_needed,
)

POWER = 0.90  # a step the series "catches" is raised at least this often
HIGHEST = 4.0  # steps are searched up to this many times the level (lower is worse: all of it)
OTAVA_RUNS = 24  # runs Otava is run on, evenly spread over the series' own
STEP_UP = 1.05  # where Otava misses a run, the step is searched up by this factor
SCALE_QUANTILES = (0.1, 0.3, 0.5, 0.7, 0.9)  # of the noise's own uncertainty


@dataclass(frozen=True)
class Detectability:
    """A series' noise as the detector reads it, and the smallest worse step it catches."""

    nights: int  # baseline nights the detector judges against
    level: float  # their median
    sigma: float  # robust per-night noise (binomial for a share)
    rho: float  # lag-1 autocorrelation
    step: float  # relative: 0.06 = catches a worse 6% step; inf = no step up to HIGHEST

    @property
    def step_abs(self) -> float:
        """The step in the metric's own unit (for a share: its fraction, 0.05 = 5 points)."""
        return self.step * abs(self.level)


def detectability(values, direction: Direction, *, start: int = 0,
                  binomial_n: int | None = None,
                  settings: DetectorSettings | None = None) -> Detectability | None:
    """What the series ``values`` (nights 0..t, NaN = no value), judged from ``start`` (the
    detector's baseline start: the last change raised, or an annotation), catches from
    night t+1 on; None where the detector could not raise a step within
    ``min_nights_after`` nights (too few nights since ``start``), or at level 0."""
    s = settings or DetectorSettings()
    k = s.min_nights_after
    arr = np.asarray(values, dtype=float)
    present = np.flatnonzero(~np.isnan(arr))
    nights = present[present >= start]
    prior, needed = restart_prior(arr, start, binomial_n, s)
    if len(nights) < max(needed, k):
        return None
    # on the K-th night of a step the detector sees the last ``lookback`` + 1 nights
    before = arr[nights[-(s.lookback + 1 - k):]]
    level = baseline_level(clean_outliers(
        before, baseline_noise(before, prior, binomial_n, s)[0], s.outlier_sigmas), binomial_n)
    if not level:
        return None
    rules = _Rules(before, level, prior, needed, direction, binomial_n, s)
    found = Detectability(nights=len(before), level=level, sigma=rules.sigma0,
                          rho=rules.rho, step=math.inf)
    lo, hi = 0.0, rules.highest
    if np.mean(rules.chance(hi)) < POWER:
        return found
    for _ in range(24):  # bisection to ~1e-7 of the level, rules 1-5
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.mean(rules.chance(mid)) < POWER else (lo, mid)
    if binomial_n:  # a share's pooled counts are judged without Otava (detect.detect)
        return Detectability(nights=found.nights, level=level, sigma=found.sigma,
                             rho=found.rho, step=hi / abs(level))
    # Otava on the runs (a few ms each): the step up until the runs it confirms suffice. A
    # run Otava confirmed stays confirmed at a larger step; one it did not is tried again
    picked = np.unique(np.linspace(0, len(rules.runs) - 1, OTAVA_RUNS).round().astype(int))
    confirmed = np.zeros(len(picked), dtype=bool)
    delta = hi
    while delta <= rules.highest:
        chance = rules.chance(delta)[picked]
        for i in np.flatnonzero(~confirmed):
            if np.sum(chance[confirmed]) + np.sum(chance[i:][~confirmed[i:]]) \
                    < POWER * len(picked):
                break  # not even if Otava confirms every run left
            confirmed[i] = rules.otava(delta, picked[i])
        if np.sum(chance[confirmed]) >= POWER * len(picked):
            return Detectability(nights=found.nights, level=level, sigma=found.sigma,
                                 rho=found.rho, step=delta / abs(level))
        delta *= STEP_UP
    return found


class _Rules:
    """The detector's rules for a step after ``before`` (see the module doc), per run."""

    def __init__(self, before: np.ndarray, level: float, prior: np.ndarray, needed: int,
                 direction: Direction, binomial_n: int | None, s: DetectorSettings):
        self.before, self.level, self.prior, self.n, self.s = before, level, prior, binomial_n, s
        self.k = k = s.min_nights_after
        self.m = m = len(before)
        self.worse = 1.0 if direction == "higher_is_worse" else -1.0
        self.sigma0 = baseline_noise(before, prior, binomial_n, s)[0]
        clean = clean_outliers(before, self.sigma0, s.outlier_sigmas)
        self.factor = 1.0 if binomial_n else \
            recent_noise_factor(before[-s.local_nights:], before, s)
        self.sigma0 *= self.factor
        self.pooled = is_pooled(binomial_n, m)
        self.rho = 0.0 if binomial_n else lag1_autocorr(clean - level)
        # every run of K consecutive nights, as residuals the worse way up
        self.lean = bool(len(prior)) and m + k - 1 < s.min_baseline
        parts = [before / level - 1]
        if self.lean and np.median(prior):
            parts.append(prior / float(np.median(prior)) - 1)
        runs = self.worse * level * np.concatenate(
            [np.lib.stride_tricks.sliding_window_view(p, k) for p in parts if len(p) >= k])
        # ... as the nights to come may stray: the runs of a few nights show less of the
        # noise than there is, so they are spread by how far the noise itself is known from
        # ``m`` nights (sigma / s of a normal sample: sqrt((m - 1) / chi2_{m-1}), at
        # SCALE_QUANTILES)
        scales = np.sqrt((m - 1) / stats.chi2.ppf(SCALE_QUANTILES, max(m - 1, 1)))
        self.runs = np.concatenate([scale * runs for scale in scales])
        # the first look's level: the baseline less its last ``recent`` - K nights
        look = clean[:max(m + k - s.recent, needed)]
        look_level = baseline_level(look, binomial_n)
        self.look_offset = self.worse * (look_level - level)
        self.look_n = len(look)
        self.look_rho = 0.0 if binomial_n else lag1_autocorr(look - look_level)
        self.pre = clean[-s.pre_nights:]
        self.pre_scatter = float(np.sum((self.pre - self.pre.mean()) ** 2))
        self.highest = abs(level) * (HIGHEST if self.worse > 0 else 1.0)
        if binomial_n:
            self.highest = level if self.worse < 0 else 1 - level

    def _sigma(self, after: np.ndarray) -> tuple[np.ndarray, int]:
        """Per run of ``after`` (residuals, the step included): the detector's sigma on the
        K-th night of the step, and the nights it is learnt from."""
        values = self.level + self.worse * after
        moved = np.concatenate([self.before, np.full(self.k - 1, np.median(values))])
        sigma, nights = baseline_noise(moved, self.prior, self.n, self.s)
        sigma = max(sigma, abs(self.level) * 1e-4, 1e-12)
        if self.n:
            return np.full(len(after), sigma), nights
        seg = np.concatenate([np.broadcast_to(self.before, (len(after), self.m)), values],
                             axis=1)
        return sigma * recent_noise_factor(seg[:, -self.s.local_nights:], seg[:, :-1],
                                           self.s), nights

    def chance(self, delta: float) -> np.ndarray:
        """Per run: the chance rules 1-5 pass a step of ``delta``."""
        s, k, m = self.s, self.k, self.m
        after = self.runs + delta  # (runs, K): each night's move the worse way
        sigma, sigma_nights = self._sigma(after)
        floor = smallest_change(sigma, self.level, self.n, s) * abs(self.level)
        after_sigma = sigma
        if self.n:  # a share's noise at its moved level
            p = min(max(self.level + self.worse * delta, 1 / self.n), 1 - 1 / self.n)
            after_sigma = np.maximum(sigma, math.sqrt(p * (1 - p) / self.n))
        wide = np.sum((after - after.mean(axis=1, keepdims=True)) ** 2, axis=1) \
            > CHI2_95[k - 1] * after_sigma ** 2
        judged = np.where(wide, np.maximum(after_sigma, after.std(axis=1, ddof=1)),
                          after_sigma)
        others = after[:, :-1]
        slack = s.last_night_slack * sigma
        last = np.clip(after[:, -1], others.min(axis=1) - slack, others.max(axis=1) + slack)
        mean = (others.sum(axis=1) + last) / k
        margin = np.minimum.reduce([
            mean - np.maximum(z_needed(s, self.n, sigma_nights)
                              * standard_error(sigma, judged, self.rho, k, m,
                                               pooled=self.pooled), floor),
            after.mean(axis=1) - self.look_offset - FIRST_LOOK * s.z_alert
            * standard_error(sigma, sigma, self.look_rho, k, self.look_n,
                             pooled=is_pooled(self.n, self.look_n)),
            after.min(axis=1)])
        # the nights just before the step scatter like the baseline (or nothing passes)
        still = self.pre_scatter / sigma ** 2 <= CHI2_99[len(self.pre) - 1] \
            if len(self.pre) >= 3 else True
        # the baseline level's own error (standard_error without the nights after it)
        return np.where(still, stats.norm.cdf(
            margin / standard_error(sigma, 0.0, self.rho, k, m, pooled=self.pooled)), 0.0)

    def otava(self, delta: float, run: int) -> bool:
        """Whether Otava, shown the baseline and run ``run`` moved by ``delta`` as the
        detector shows them, finds a change point within ``locate_tolerance`` of the step."""
        s = self.s
        after = self.runs[run:run + 1] + delta
        sigma = float(self._sigma(after)[0][0])
        lead = self.prior if self.lean else self.prior[:0]
        seg = np.concatenate([self.before, self.level + self.worse * after[0]])
        shown = np.concatenate([lead, clean_outliers(seg, sigma, s.outlier_sigmas)])
        points, _ = compute_change_points(
            shown.tolist(), window_len=s.window_len, max_pvalue=s.otava_pvalue,
            min_magnitude=smallest_change(sigma, self.level, self.n, s))
        change = len(lead) + self.m
        return any(abs(int(p.index) - change) <= s.locate_tolerance for p in points)
