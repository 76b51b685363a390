"""Change points in one nightly series: Apache Otava's E-divisive means, made aware of the
series' own noise (robust sigma, autocorrelation, outliers, an evidence test before Otava is
asked, a drastic guard, a restart after each change); a share (accuracy) by its nights'
counts pooled against the baseline's, without Otava. ``detect`` is pure: given nights 0..t
and where the baseline starts, whether night t raises a change; the nightly detect step
(``trends.series.detect_series``) and the replay call exactly this. The rules and why:
docs/trends.md, "How the detector decides"."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from otava.analysis import compute_change_points

from servebench.metric_catalogue import Direction

DIRECTIONS: tuple[str, ...] = ("higher_is_worse", "lower_is_worse")


# 95% quantiles of chi-square with 0..8 degrees of freedom: how far the nights after a change
# may scatter around their own mean, in units of the baseline variance, and still be one level
CHI2_95 = (0.0, 3.84, 5.99, 7.81, 9.49, 11.07, 12.59, 14.07, 15.51)
CHI2_99 = (0.0, 6.63, 9.21, 11.34, 13.28, 15.09, 16.81, 18.48, 20.09)


@dataclass(frozen=True)
class DetectorSettings:
    """The detector's knobs; the defaults are the ones `benchmarks/trends_replay.py` measures."""

    z_alert: float = 3.0  # standard errors the after-mean must move
    # ... for a share, its counts pooled (``baseline_level``): a drop at ``z_pooled``, a
    # gain at ``z_pooled_gain`` -- the false alarms a share's test may cost spent on drops
    z_pooled: float = 3.0
    z_pooled_gain: float = 4.0
    min_sigmas: float = 1.0  # a change smaller than this many per-night sigmas is noise
    min_rel_change: float = 0.005  # ... and never one under 0.5% (continuous metrics)
    outlier_sigmas: float = 3.5
    drastic_sigmas: float = 10.0  # 8-sigma single nights happen ...
    # ... and so does one night of +26% TTFT p50 from a busy host (seen in the local proof):
    # a same-morning alert is for a disaster, +50% (or half the throughput)
    drastic_rel: float = 0.50
    drastic_range: float = 2.0  # ... and this many times the worst night before it
    # a drastic night is raised only when the cell's median E2E or throughput is worse too
    # (trends.nightly), beyond its noise and by this much: a busy host gives nights of
    # E2E p50 +17% and tok/s -17% (seen in the local proof)
    witness_rel: float = 0.20
    min_nights_after: int = 3  # the change night and two nights after it
    wrong_side_every: int = 4  # nights after a change, one per this many may fall back
    pre_nights: int = 6  # nights before a change that must still scatter like the baseline
    last_night_slack: float = 2.0  # sigmas the last night may stand beyond the other nights
    local_nights: int = 14  # recent nights whose own scatter can raise sigma ...
    variance_ratio: float = 2.0  # ... when it is this many times the baseline's
    min_baseline: int = 10  # nights before a series is judged at all
    # ... or after a restart (a change raised, an annotation) this many, the noise carried
    # over, relative to the level, from up to ``prior_nights`` nights before the restart
    restart_baseline: int = 4
    prior_nights: int = 30
    lookback: int = 60  # nights Otava sees
    window_len: int = 30  # Otava's sliding window
    # Otava must see the change itself (it gates recall and false alarms)
    otava_pvalue: float = 0.001
    recent: int = 7  # a change point further back than this is not news
    locate_tolerance: int = 2  # nights between Otava's change point and the noise test's


@dataclass(frozen=True)
class Change:
    """A change that night ``alerted`` raises: the new level starts at night ``night``."""

    night: int
    alerted: int
    before: float
    after: float
    worse: bool
    z: float
    drastic: bool = False

    @property
    def rel_change(self) -> float:
        return self.after / self.before - 1.0 if self.before else math.inf

    @property
    def direction(self) -> str:
        return "worse" if self.worse else "better"


def robust_sigma(x: np.ndarray) -> float:
    """1.4826 times the median absolute deviation: a normal's sigma, unmoved by a few wild
    values. Every robust spread in servebench is this one."""
    return 1.4826 * _mad(np.asarray(x, dtype=float))


def robust_sigma_df(n: int) -> float:
    """The degrees of freedom ``robust_sigma`` of ``n`` normal values is worth, as a sample
    standard deviation's would be: its variance is 1.36 sigma^2 / n against the sample
    deviation's 0.5 sigma^2 / (n - 1), so about 0.37 n (at least 1)."""
    return max(1.0, n * 0.5 / 1.3605)


def noise_sigma(x: np.ndarray) -> float:
    """Robust per-night sigma of a series (see the module doc); 0 for fewer than 4 nights."""
    if len(x) < 4:
        return 0.0
    return robust_sigma(x)


def _mad(v: np.ndarray) -> float:
    return float(np.median(np.abs(v - np.median(v))))


def lag1_autocorr(residuals: np.ndarray) -> float:
    """Lag-1 autocorrelation of a baseline's residuals, bias-corrected, within 0..0.8. Not
    zeroed where a test could not tell it from independent nights: on a 40-night baseline
    a true 0.2 often cannot be told, and taking it as 0 made wander read as change (false
    alarms 0.50 per 100 nights on autocorrelated series against 0.43 kept,
    ``benchmarks/trends_replay.py``)."""
    n = len(residuals)
    if n < 8 or not np.any(residuals):
        return 0.0
    r = residuals - residuals.mean()
    rho = float(np.dot(r[:-1], r[1:]) / np.dot(r, r))
    # the estimate is biased low by about (1 + 4 rho) / n on a short series
    return min(max(rho + (1 + 4 * max(rho, 0.0)) / n, 0.0), 0.8)


def autocorr_factor(rho: float, k: int) -> float:
    """How much more a mean of ``k`` consecutive AR(1) nights varies than one of ``k``
    independent nights: 1 + 2 * sum_{j<k} (1 - j/k) * rho^j (-> (1 + rho) / (1 - rho))."""
    if rho <= 0 or k <= 1:
        return 1.0
    j = np.arange(1, k)
    return float(1 + 2 * np.sum((1 - j / k) * rho ** j))


def clean_outliers(x: np.ndarray, sigma: float, k: float) -> np.ndarray:
    """Replace each night that is more than ``k`` sigma off both its neighbours -- the median
    of the three nights before it and the mean of the (up to) two after it, on the same side
    -- by the mean of the two. The last night has no neighbour after it and is kept."""
    out = x.copy()
    n = len(x)
    if sigma <= 0 or n < 3:
        return out
    padded = np.concatenate([np.full(3, x[0]), x])  # window i: nights i-3 .. i-1
    left = np.median(np.lib.stride_tricks.sliding_window_view(padded, 3), axis=1)[:n]
    nxt = np.concatenate([x[1:], [np.nan]])
    nxt2 = np.concatenate([x[2:], [np.nan, np.nan]])
    right = np.where(np.isnan(nxt2), nxt, (nxt + nxt2) / 2)
    dl, dr = x - left, x - right
    with np.errstate(invalid="ignore"):
        mask = (np.abs(dl) > k * sigma) & (np.abs(dr) > k * sigma) & (dl * dr > 0)
    mask[0] = mask[-1] = False
    out[mask] = (left[mask] + right[mask]) / 2
    return out


def detect(values, direction: Direction, *, start: int = 0, binomial_n: int | None = None,
           settings: DetectorSettings | None = None, same_night: bool = True) -> Change | None:
    """The change, if any, that the last night of ``values`` (nights 0..t, NaN = no data)
    raises, judging only nights from ``start`` on; ``same_night=False`` (a tail statistic,
    ``series.same_night``) leaves out the drastic guard."""
    s = settings or DetectorSettings()
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    arr = np.asarray(values, dtype=float)
    t = len(arr) - 1
    present = np.flatnonzero(~np.isnan(arr))
    nights = present[present >= start]
    if not len(nights) or nights[-1] != t:
        return None
    prior, needed = restart_prior(arr, start, binomial_n, s)
    if len(nights) < needed + 1:
        return None
    offset = max(0, len(nights) - 1 - s.lookback)
    nights = nights[offset:]
    seg = arr[nights]
    n = len(seg)
    sigma, sigma_nights = baseline_noise(seg[:-1], prior, binomial_n, s)
    lean = sigma_nights > n - 1  # on the nights before a restart
    clean = clean_outliers(seg, sigma, s.outlier_sigmas)
    higher_worse = direction == "higher_is_worse"

    base = baseline_level(clean[:-1], binomial_n)
    sigma = max(sigma, abs(base) * 1e-4, 1e-12)
    dev_last = (clean[-1] - base) / sigma
    # a disaster also lies well beyond the worst night the series has had: heavy-tailed
    # metrics (a tail percentile of a few ms) have single nights far out in sigmas
    worst = float(np.max(np.abs(seg[:-1] - base)))
    if same_night and abs(dev_last) > s.drastic_sigmas and base \
            and abs(clean[-1] / base - 1) > max(s.drastic_rel, s.min_rel_change) \
            and abs(clean[-1] - base) > s.drastic_range * worst:
        # the jump may finish a change that began a night or two before (nights already
        # ``outlier_sigmas`` off, on the same side, too few yet for the evidence test): the
        # change begins with the first of them
        side = np.sign(dev_last)
        c = n - 1
        while c > 1 and (seg[c - 1] - base) * side > s.outlier_sigmas * sigma:
            c -= 1
        return Change(int(nights[c]), t, base, float(np.mean(seg[c:])),
                      worse=(dev_last > 0) == higher_worse, z=float(dev_last), drastic=True)

    if binomial_n is None:
        sigma *= recent_noise_factor(seg[-s.local_nights:], seg[:-1], s)
    found = _step(clean, seg, prior if lean else prior[:0], needed, sigma, sigma_nights,
                  binomial_n, higher_worse, s)
    if found is None:
        return None
    c, before_level, after_mean, z = found
    return Change(int(nights[c]), t, before_level, after_mean,
                  worse=(z > 0) == higher_worse, z=z)


def _step(clean: np.ndarray, seg: np.ndarray, lead: np.ndarray, needed: int, sigma: float,
          sigma_nights: int, binomial_n: int | None, higher_worse: bool,
          s: DetectorSettings) -> tuple[int, float, float, float] | None:
    """(change index, level before, mean after, z) of a step that the last night of the
    cleaned nights ``clean`` (``seg`` as measured) raises: the evidence test over the last
    ``min_nights_after``..``recent`` nights, confirmed by Otava (shown ``lead``, the nights
    before a restart, first) -- or, for a share, its counts pooled; else None."""
    n = len(clean)
    ks = range(s.min_nights_after, min(s.recent, n - needed) + 1)
    if not ks:
        return None
    base = baseline_level(clean[:-1], binomial_n)
    min_rel = smallest_change(sigma, base, binomial_n, s)
    if not _worth_a_look(clean, ks, sigma, s, binomial_n):
        return None
    # the evidence test with the change assumed k nights back: Otava (a few ms) runs only
    # when one of them passes
    passing = [(abs(found[2]), n - k, found) for k in ks
               if (found := _evidence(clean, n - k, sigma, min_rel, s, raw=seg,
                                      binomial_n=binomial_n,
                                      sigma_nights=sigma_nights)) is not None]
    if binomial_n:
        # a share's counts are judged pooled (``_evidence``): its noise is known from the item
        # count, and Otava, blind to it, missed half the drops the counts show
        passing = [p for p in passing if ((p[2][2] > 0) == higher_worse)
                   or p[0] >= s.z_pooled_gain]
        if not passing:
            return None
        _, c, found = max(passing, key=lambda p: p[0])
        return (c, *found)
    if not passing:
        return None
    # Otava decides whether and where the series changed; the noise test only refines the
    # night (Otava's split can land a night or two off with so few nights after it)
    # (Otava wants a list: given an ndarray it ignores the window bounds it slides over)
    # (a short baseline after a restart is shown with the nights before it: Otava needs
    # nights on both sides, and finds the restart's own change there too)
    shown = np.concatenate([lead, clean]) if len(lead) else clean
    points, _ = compute_change_points(shown.tolist(), window_len=s.window_len,
                                      max_pvalue=s.otava_pvalue, min_magnitude=min_rel)
    located = {int(cp.index) - len(lead) for cp in points}
    confirmed = [p for p in passing if any(abs(p[1] - i) <= s.locate_tolerance for i in located)]
    if not confirmed:
        return None
    _, c, found = max(confirmed, key=lambda p: p[0])
    return (c, *found)


FIRST_LOOK = 0.8  # the first look asks this share of ``z_alert``


def _worth_a_look(x: np.ndarray, ks: range, sigma: float, s: DetectorSettings,
                  binomial_n: int | None = None) -> bool:
    """A cheap, permissive first look: does the mean of the last k nights, for any k in
    ``ks``, stand near ``z_alert`` (``FIRST_LOOK`` of it) standard errors off the level
    before all of them?"""
    if not ks:
        return False
    before = x[:len(x) - ks[-1]]
    if len(before) < 3:
        return False
    level = baseline_level(before, binomial_n)
    rho = 0.0 if binomial_n else lag1_autocorr(before - level)
    tail = x[len(x) - ks[-1]:]
    sums = np.cumsum(tail[::-1])
    for k in ks:
        se = standard_error(sigma, sigma, rho, k, len(before),
                            pooled=is_pooled(binomial_n, len(before)))
        if abs(sums[k - 1] / k - level) >= FIRST_LOOK * s.z_alert * se:
            return True
    return False


def _evidence(x: np.ndarray, c: int, sigma: float, min_rel: float, s: DetectorSettings,
              lo: int = 0, raw: np.ndarray | None = None, binomial_n: int | None = None,
              sigma_nights: int | None = None) -> tuple[float, float, float] | None:
    """(level before, mean after, z) when nights ``c..`` moved off the median of ``lo..c``
    by ``z_alert`` standard errors (of the baseline noise, or of their own scatter where that
    is wider) and ``min_rel``, every one of them on the moved side; else None."""
    before, after = x[lo:c], x[c:]
    if len(before) < 3 or len(after) < s.min_nights_after:
        return None
    level = baseline_level(before, binomial_n)
    if not level:
        return None
    # a share's binomial noise depends on its level: judge the nights after at theirs
    sigma_after = sigma
    if binomial_n:
        p = min(max(float(np.mean(after)), 1.0 / binomial_n), 1 - 1.0 / binomial_n)
        sigma_after = max(sigma, math.sqrt(p * (1 - p) / binomial_n))
    # nights that moved together scatter around their own mean like the baseline (chi-square,
    # 95%); a change of variance alone scatters them instead. When they scatter wider, the
    # move must stand out against their own scatter: a slowdown often brings noise with it.
    # Judged on the nights as measured (cleaning would smooth the new scatter away), less,
    # from four nights on, one wild night (below).
    measured = (raw if raw is not None else x)[c:]
    if len(measured) >= 4:
        # one night far off the others (outlier_sigmas of their noise), whichever way: a
        # wild night back across the old level too (one the night after a change made 5%
        # steps at 1.2% CV wait three more nights: benchmarks/trends_replay.py --misses);
        # else the one that overshoots the move most
        off = np.abs(measured - np.median(measured))
        wildest = int(np.argmax(off))
        rest = np.delete(measured, wildest)
        if off[wildest] <= s.outlier_sigmas * max(sigma_after, float(rest.std(ddof=1))):
            up = float(np.median(measured)) > level
            wildest = int(np.argmax(measured) if up else np.argmin(measured))
        measured = np.delete(measured, wildest)
    scatter = float(np.sum((measured - measured.mean()) ** 2)) / sigma_after ** 2
    if scatter > CHI2_95[len(measured) - 1]:
        sigma_after = max(sigma_after, float(measured.std(ddof=1)))
    # ... and the nights just before it were still the baseline: a run of nights on one side
    # inside a stretch that already scatters wider is that wider noise, not a new level
    pre = x[max(lo, c - s.pre_nights):c]
    if len(pre) >= 3 and float(np.sum((pre - pre.mean()) ** 2)) / sigma ** 2 > \
            CHI2_99[len(pre) - 1]:
        return None
    # the last night has no night after it to show it is not a wild one: it counts for no
    # more than w sigmas beyond the other nights after the change
    after = after.copy()
    others = after[:-1]
    w = s.last_night_slack * sigma
    after[-1] = min(max(after[-1], others.min() - w), others.max() + w)
    mean = float(after.mean())
    rho = 0.0 if binomial_n else lag1_autocorr(before - level)
    z = (mean - level) / standard_error(sigma, sigma_after, rho, len(after), len(before),
                                        pooled=is_pooled(binomial_n, len(before)))
    if abs(z) < z_needed(s, binomial_n, sigma_nights or len(before)) \
            or abs(mean / level - 1) < min_rel:
        return None
    # the nights after stand on the moved side: every one of up to four, all but one of more
    # (a small step is about a sigma: one night in eight back across the old level is usual)
    wrong = int(np.sum(measured <= level) if z > 0 else np.sum(measured >= level))
    if wrong > (len(measured) - 1) // s.wrong_side_every:
        return None
    return level, mean, z


def infer_binomial_n(values, max_n: int = 5000) -> int | None:
    """The number of items behind a series of proportions given without it: the smallest
    ``n`` (up to ``max_n``) for which every value is a whole count of ``n`` (proportions of
    200 items are multiples of 1/200; rounded to two decimals they read as of 100, which
    only overstates the noise). None where the values are not proportions or fit no such
    ``n`` (averaged, or rounded finer): the series then keeps the continuous noise model."""
    x = np.asarray(values, dtype=float)
    x = np.unique(x[~np.isnan(x)])
    if len(x) < 4 or x.min() < 0 or x.max() > 1:
        return None
    ns = np.arange(1, max_n + 1, dtype=float)[:, None]
    counts = x[None, :] * ns
    fits = np.all(np.abs(counts - np.round(counts)) <= 1e-6 * ns, axis=1)
    return int(ns[np.argmax(fits), 0]) if fits.any() else None


def restart_prior(values: np.ndarray, start: int, binomial_n: int | None,
                  s: DetectorSettings) -> tuple[np.ndarray, int]:
    """(the nights before ``start`` whose relative noise a restarted baseline borrows --
    empty where they are too few to tell it --, how many nights from ``start`` on the
    detector needs before it judges the series). After a restart the noise need not be
    learnt again from scratch: the nights before it (the level before the change raised)
    tell the series' relative noise."""
    present = np.flatnonzero(~np.isnan(values))
    prior = values[present[present < start][-s.prior_nights:]]
    if len(prior) < s.min_baseline or _relative_noise(prior, binomial_n) is None:
        return prior[:0], s.min_baseline
    return prior, s.restart_baseline


def baseline_noise(before: np.ndarray, prior: np.ndarray, binomial_n: int | None,
                   s: DetectorSettings, nights: int | None = None) -> tuple[float, int]:
    """(sigma of one night, how many nights it is learnt from) of the baseline ``before``:
    its own noise (robust, or binomial); on a baseline of fewer than ``min_baseline``
    ``nights`` (default: ``len(before)``) after a restart, at least the relative noise of
    the ``prior`` nights (``restart_prior``) at its level, learnt from both."""
    sigma = _sigma(before, binomial_n)
    nights = len(before) if nights is None else nights
    prior_rel = _relative_noise(prior, binomial_n) if len(prior) else None
    if prior_rel is None or nights >= s.min_baseline:
        return sigma, nights
    return max(sigma, prior_rel * abs(float(np.median(before)))), nights + len(prior)


def recent_noise_factor(recent: np.ndarray, usual: np.ndarray, s: DetectorSettings):
    """How many times sigma grows because the noise itself changed lately: the night-to-night
    changes of the ``recent`` nights (the last ``local_nights``; robust to one step among
    them) against those of the ``usual`` ones (the baseline; the same estimator on both
    sides: night-to-night scatter misreads a series whose nights alternate as noisier than
    its level says), when they scatter ``variance_ratio`` times more; else 1. Series along
    the last axis: 2-D arrays (one series a row) give one factor a row."""
    local = _mads(np.diff(recent, axis=-1))
    usual = _mads(np.diff(usual, axis=-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where((usual > 0) & (local > s.variance_ratio * usual), local / usual, 1.0)
    return float(factor) if np.ndim(factor) == 0 else factor


def _mads(v: np.ndarray):
    """``_mad`` along the last axis."""
    return np.median(np.abs(v - np.median(v, axis=-1, keepdims=True)), axis=-1)


def smallest_change(sigma, level: float, binomial_n: int | None, s: DetectorSettings):
    """The smallest relative change the detector raises at ``level`` with per-night noise
    ``sigma``: ``min_sigmas`` sigmas, and for a continuous metric never under
    ``min_rel_change`` (a share keeps its binomial test). An array of ``sigma`` gives an
    array."""
    if not level:
        return math.inf
    min_rel = s.min_sigmas * np.asarray(sigma, dtype=float) / abs(level)
    if not binomial_n:
        min_rel = np.maximum(min_rel, s.min_rel_change)
    return float(min_rel) if np.ndim(min_rel) == 0 else min_rel


def standard_error(sigma: float, sigma_after, rho: float, after: int, before: int, *,
                   pooled: bool = False):
    """The standard error of (the mean of ``after`` nights of noise ``sigma_after``) minus
    (the median of the ``before`` baseline nights of noise ``sigma`` -- their mean where
    ``pooled``, a share's counts: ``baseline_level``), AR(1) at lag-1 autocorrelation
    ``rho`` (a median varies pi/2 times as much as a mean). An array of ``sigma_after``
    gives an array."""
    level_var = 1.0 if pooled else 1.57
    se = np.sqrt(autocorr_factor(rho, after) * np.square(sigma_after) / after
                 + level_var * autocorr_factor(rho, before) * sigma ** 2 / before)
    return float(se) if np.ndim(se) == 0 else se


POOLED_NIGHTS = 10  # a share's baseline of this many nights is pooled (``baseline_level``)


def is_pooled(binomial_n: int | None, nights: int) -> bool:
    """Whether a baseline of ``nights`` nights is judged by its pooled counts: a share's,
    of ``POOLED_NIGHTS`` nights or more (``baseline_level``)."""
    return bool(binomial_n) and nights >= POOLED_NIGHTS


def baseline_level(x: np.ndarray, binomial_n: int | None) -> float:
    """The level a change is judged against: the median of the baseline nights (one wild
    night moves it little); for a share's baseline of ``POOLED_NIGHTS`` or more, their mean
    -- the nights' counts pooled as one binomial of ``nights x binomial_n`` items, whose
    proportion is known to ``1/sqrt(nights)`` of one night's noise (the same items every
    night: no night is wild but a broken one, which ``clean_outliers`` has already
    replaced). A shorter one, after a restart, keeps the median: a change is dated to
    within a night, and one night of the old level in a mean of four raised a second,
    false, drop days later."""
    return float(np.mean(x)) if is_pooled(binomial_n, len(x)) else float(np.median(x))


def z_needed(s: DetectorSettings, binomial_n: int | None, sigma_nights: int) -> float:
    """Standard errors a move must stand off its baseline. Sigma itself is estimated from
    the baseline (and the nights before a restart, ``sigma_nights`` in all): on a short one,
    ask for more. A share's binomial sigma is known from its count, not estimated: its
    pooled test asks ``z_pooled``."""
    return s.z_pooled if binomial_n else s.z_alert * math.sqrt(1 + 8 / sigma_nights)


def _relative_noise(x: np.ndarray, binomial_n: int | None) -> float | None:
    """The noise of nights ``x`` relative to their level (None at level 0)."""
    level = abs(float(np.median(x)))
    return _sigma(x, binomial_n) / level if level else None


def _sigma(x: np.ndarray, binomial_n: int | None) -> float:
    if binomial_n:
        p = float(np.clip(np.median(x), 1.0 / binomial_n, 1 - 1.0 / binomial_n))
        sigma = math.sqrt(p * (1 - p) / binomial_n)
        return sigma * overdispersion(x, sigma)
    return noise_sigma(x)


def overdispersion(x: np.ndarray, sigma: float, clip: float = 3.5) -> float:
    """How many times the nights ``x`` of a share scatter wider than its binomial ``sigma``
    (the root of their chi-square over its degrees of freedom, each night's deviation
    clipped at ``clip`` sigmas: one broken night is an outlier, not the noise), where that
    is beyond chance (chi-square 99%, Wilson-Hilferty) on ``POOLED_NIGHTS`` nights or more;
    else 1. Nights that move together -- a grader, a template or a host that varies from
    night to night -- make the counts' own binomial noise too narrow, and the pooled test
    (``baseline_level``) would take their scatter for a change."""
    if len(x) < POOLED_NIGHTS or sigma <= 0:
        return 1.0
    r = np.clip((x - np.median(x)) / sigma, -clip, clip)
    df = len(x) - 1
    chi2 = float(np.sum((r - r.mean()) ** 2))
    q99 = df * (1 - 2 / (9 * df) + 2.326 * math.sqrt(2 / (9 * df))) ** 3
    return math.sqrt(chi2 / df) if chi2 > q99 else 1.0
