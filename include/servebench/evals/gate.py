"""The quality gate: each variant against its target's baseline variant, item by item.

Both variants answered the same golden items through the same sampling, so the comparison is
paired. Three numbers decide:

* accuracy with a Wilson score interval (95%), for reporting;
* the exact McNemar test on the discordant items -- b items the baseline got right and the
  variant wrong, c the reverse. Under "no difference" b ~ Binomial(b + c, 1/2); the two-sided
  p-value is scipy's exact binomial test (McNemar 1947; exact form as in Fagerland et al. 2013).
  Pairing is what makes a 200-item set sensitive: flips, not accuracy differences, carry it;
* the relative floor (MLPerf's rule): variant accuracy >= ``floor`` x baseline accuracy.

Verdict -- the gate never says "pass" when it cannot tell:
  fail          a significant drop (p < alpha, b > c) that also breaks the floor;
  pass          an improvement (c >= b), or no significant drop and within the floor;
  inconclusive  the two mixed cases -- a drop beyond the floor the golden set is too small to
                confirm (the reason says roughly how many items would decide it, were the
                flips as frequent), and a significant drop within the floor (real but small:
                the reason names the flipped items) -- and evidence that cannot be trusted:
                items that do not pair up, or too many failed requests on either side.
The release gate treats inconclusive as "needs a person" (or as a failure, configured so).

A speculative variant under greedy sampling must also return, item by item, the answers of the
variant that serves the same weights without speculation (its *twin*, :func:`speculative_twin`):
speculation promises an unchanged output, so one differing answer fails it, naming the items,
whatever its accuracy (:func:`exactness`).

A variant whose target has no golden set is ``not_judged`` (:func:`gate_columns`): nothing was
asked of its answers, which is not evidence too weak to decide; the baseline variant of a
target that has one is ``baseline``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from scipy.stats import binomtest

DEFAULT_ALPHA = 0.01
DEFAULT_FLOOR = 0.99
MAX_ERROR_RATE = 0.05
NOT_JUDGED = "not_judged"  # the target has no golden set
MAX_ITEMS_SUGGESTED = 1_000_000  # beyond this, "no practical golden set would decide it"
FLIPPED_NAMED = 10  # flipped item ids a reason names before "and N more"


@dataclass(frozen=True)
class Outcome:
    """One golden item's result: correct or not, and whether the request itself failed."""

    correct: bool
    error: bool = False


@dataclass(frozen=True)
class GateVerdict:
    verdict: str  # pass | fail | inconclusive
    reason: str
    n_items: int
    accuracy: float
    ci_low: float
    ci_high: float
    baseline_accuracy: float
    relative: float  # accuracy / baseline_accuracy
    worse: int  # b: baseline right, variant wrong
    better: int  # c: baseline wrong, variant right
    p_value: float
    flipped_ids: list[str] = field(default_factory=list)  # the b items, sorted


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    if n == 0:
        return float("nan"), float("nan")
    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mcnemar_exact(worse: int, better: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts."""
    if worse + better == 0:
        return 1.0
    return float(binomtest(worse, worse + better, 0.5, alternative="two-sided").pvalue)


def gate(
    baseline: Mapping[str, Outcome],
    variant: Mapping[str, Outcome],
    *,
    alpha: float = DEFAULT_ALPHA,
    floor: float = DEFAULT_FLOOR,
) -> GateVerdict:
    """Judge ``variant`` against ``baseline``; both map golden item id -> outcome."""
    ids = sorted(set(baseline) & set(variant))
    n = len(ids)
    correct = sum(variant[i].correct for i in ids)
    base_correct = sum(baseline[i].correct for i in ids)
    worse_ids = [i for i in ids if baseline[i].correct and not variant[i].correct]
    better = sum(1 for i in ids if variant[i].correct and not baseline[i].correct)
    accuracy = correct / n if n else float("nan")
    base_acc = base_correct / n if n else float("nan")
    relative = accuracy / base_acc if n and base_acc > 0 else float("nan")
    low, high = wilson_interval(correct, n)
    p = mcnemar_exact(len(worse_ids), better)

    def verdict(kind: str, reason: str) -> GateVerdict:
        return GateVerdict(kind, reason, n, accuracy, low, high, base_acc, relative,
                           len(worse_ids), better, p, worse_ids)

    unpaired = set(baseline) ^ set(variant)
    if n == 0 or unpaired:
        return verdict("inconclusive", f"{len(unpaired)} golden items not answered by both "
                                       f"(paired {n})")
    for name, side in (("baseline", baseline), ("variant", variant)):
        errors = sum(side[i].error for i in ids)
        if errors > MAX_ERROR_RATE * n:
            return verdict("inconclusive", f"{errors}/{n} {name} requests failed")
    b = len(worse_ids)
    flips = f"{b} items flipped to wrong, {better} to right, McNemar p={p:.2g}"
    if b <= better:
        return verdict("pass", f"{relative:.1%} of baseline accuracy, no drop ({flips})")
    significant_drop = p < alpha
    below_floor = not relative >= floor
    if significant_drop and below_floor:
        return verdict("fail", f"accuracy {accuracy:.3f} vs baseline {base_acc:.3f} "
                               f"({relative:.1%} < floor {floor:.0%}); {flips}")
    if below_floor:
        needed = items_to_decide(n, b, better, alpha)
        size = (f"about {needed:,} items would decide it at these flip rates" if needed
                else "no practical golden set would decide it at these flip rates")
        return verdict("inconclusive",
                       f"{relative:.1%} of baseline accuracy, below the {floor:.0%} floor, but "
                       f"{n} items cannot confirm the drop ({flips} >= {alpha}); {size}")
    if significant_drop:
        named = ", ".join(worse_ids[:FLIPPED_NAMED])
        more = f" and {b - FLIPPED_NAMED} more" if b > FLIPPED_NAMED else ""
        return verdict("inconclusive",
                       f"a real but small drop: {relative:.1%} of baseline accuracy, within "
                       f"the {floor:.0%} floor, yet significant ({flips}); flipped to wrong: "
                       f"{named}{more}")
    return verdict("pass", f"{relative:.1%} of baseline accuracy (floor {floor:.0%}), "
                           f"no significant drop ({flips})")


def items_to_decide(n: int, worse: int, better: int, alpha: float) -> int | None:
    """Roughly how many golden items would make the same flip rates significant: the
    smallest n' (a 10% grid) at which the exact McNemar test on ``worse`` and ``better``
    scaled by n'/n has p < alpha; None past MAX_ITEMS_SUGGESTED."""
    scale = 1.0
    while n * scale <= MAX_ITEMS_SUGGESTED:
        scale *= 1.1
        if mcnemar_exact(round(worse * scale), round(better * scale)) < alpha:
            return int(math.ceil(n * scale))
    return None


def speculative_twin(target, variant) -> str | None:
    """The variant of ``target`` that serves ``variant``'s weights (model and quant) without
    speculative decoding -- the baseline where it does --; None if none does."""
    twins = [v.name for v in target.variants
             if v.speculative is None and v.model == variant.model and v.quant == variant.quant
             and v.name != variant.name]
    baseline = target.baseline or target.variants[0].name
    return baseline if baseline in twins else (twins[0] if twins else None)


def exactness(mine: Mapping[str, str | None], theirs: Mapping[str, str | None],
              twin: str) -> tuple[bool, str]:
    """(identical, why): a speculative variant's golden-set answers against its twin's, item
    by item (None: the request failed, which matches nothing)."""
    items = sorted(set(mine) | set(theirs))
    differ = [i for i in items if mine.get(i) is None or mine.get(i) != theirs.get(i)]
    if not differ:
        return True, f"identical answers to {twin} on all {len(items)} items"
    named = ", ".join(differ[:FLIPPED_NAMED])
    more = f" and {len(differ) - FLIPPED_NAMED} more" if len(differ) > FLIPPED_NAMED else ""
    return False, (f"speculation changed {len(differ)} of {len(items)} greedy answers against "
                   f"{twin}: {named}{more}")


def gate_columns(spec, evals: list[dict]) -> dict[tuple[str, str], dict]:
    """Gate every variant of every target against its baseline on the target's first golden
    set (a target without one: every variant ``not_judged``), and a speculative variant's
    answers against its twin's where sampling is greedy; returns the cells-table gate
    columns keyed by (target, variant)."""
    answers: dict[tuple[str, str], dict[str, Outcome]] = {}
    texts: dict[tuple[str, str], dict[str, str | None]] = {}
    for target in spec.targets:
        if not target.golden_sets:
            continue
        headline = target.golden_sets[0]
        for row in evals:
            if row["target"] == target.name and row["golden_set"] == headline:
                key = (target.name, row["variant"])
                failed = row.get("error") is not None
                answers.setdefault(key, {})[row["item_id"]] = Outcome(bool(row["correct"]),
                                                                      failed)
                texts.setdefault(key, {})[row["item_id"]] = \
                    None if failed or row.get("answer") is None else str(row["answer"])
    columns: dict[tuple[str, str], dict] = {}
    for target in spec.targets:
        baseline = target.baseline or target.variants[0].name
        base = answers.get((target.name, baseline))
        for variant in target.variants:
            key = (target.name, variant.name)
            mine = answers.get(key)
            col: dict = {"gate_baseline": baseline}
            if mine:
                correct = sum(o.correct for o in mine.values())
                col["accuracy_ci_low"], col["accuracy_ci_high"] = wilson_interval(
                    correct, len(mine))
            if not target.golden_sets:
                col.update(gate_verdict=NOT_JUDGED, gate_reason="target has no golden set")
            elif variant.name == baseline:
                col.update(gate_verdict="baseline", gate_reason="the reference variant")
            elif not base or not mine:
                missing = "baseline" if not base else "variant"
                col.update(gate_verdict="inconclusive",
                           gate_reason=f"no golden-set results for the {missing}")
            else:
                v = gate(base, mine, alpha=spec.gate.alpha, floor=spec.gate.floor)
                col.update(gate_verdict=v.verdict, gate_reason=v.reason, gate_p_value=v.p_value,
                           gate_relative=v.relative, gate_flipped_ids=v.flipped_ids)
            if variant.speculative is not None and variant.name != baseline and mine:
                col.update(_exactness_columns(spec, target, variant, texts, col))
            columns[key] = col
    return columns


def _exactness_columns(spec, target, variant, texts, col: dict) -> dict:
    """A speculative variant's verdict with its exactness: failed on any changed greedy
    answer; otherwise its gate verdict, the reason saying what was (or was not) checked."""
    twin = speculative_twin(target, variant)
    reason = col.get("gate_reason", "")
    if spec.sampling.temperature != 0:
        return {"gate_reason": f"{reason}; sampling is not greedy: exactness against the "
                               "variant without speculation not checked"}
    if twin is None or (target.name, twin) not in texts:
        why = ("no variant of the target serves its weights without speculation"
               if twin is None else f"no golden-set answers from {twin}")
        return {"gate_verdict": "inconclusive" if col.get("gate_verdict") == "pass"
                else col.get("gate_verdict"),
                "gate_reason": f"{why}: exactness not checked; {reason}"}
    same, why = exactness(texts[(target.name, variant.name)], texts[(target.name, twin)], twin)
    if not same:
        return {"gate_verdict": "fail", "gate_reason": f"{why}; {reason}"}
    return {"gate_reason": f"{why}; {reason}"}


def cross_stack_columns(spec, evals: list[dict]) -> dict[tuple[str, str], dict]:
    """For each cross-stack group: how often each member's answers equal the answer most
    members gave (per golden item, on the headline golden set of its target). A member below
    the group's ``min_agreement`` is flagged ``differs`` with the item ids; with two members
    a disagreement cannot be attributed, so both are flagged."""
    columns: dict[tuple[str, str], dict] = {}
    by_member: dict[str, dict[str, str]] = {}
    for row in evals:
        target = spec.target(row["target"])
        if target.golden_sets and row["golden_set"] == target.golden_sets[0]:
            answer = row["answer"].strip() if row.get("error") is None else None
            by_member.setdefault(f"{row['target']}/{row['variant']}", {})[row["item_id"]] = answer
    for group in spec.cross_stack:
        present = [m for m in group.members if m in by_member]
        items = sorted(set.intersection(*(set(by_member[m]) for m in present))) if present else []
        majority = {}
        for item in items:
            answers = [by_member[m][item] for m in present]
            majority[item] = max(set(answers), key=answers.count)
        for member in group.members:
            target, variant = member.split("/", 1)
            col = {"cross_stack_group": group.name}
            if member not in present or len(present) < 2 or not items:
                col.update(cross_stack_verdict="inconclusive",
                           cross_stack_reason="fewer than two members have golden-set answers")
            else:
                differ = [i for i in items if by_member[member][i] != majority[i]
                          or by_member[member][i] is None]
                agreement = 1 - len(differ) / len(items)
                col.update(cross_stack_agreement=agreement, cross_stack_differing_ids=differ)
                if agreement >= group.min_agreement:
                    col.update(cross_stack_verdict="consistent",
                               cross_stack_reason=f"{agreement:.1%} of answers match the group")
                elif group.precision == "same":
                    col.update(cross_stack_verdict="differs", cross_stack_reason=(
                        f"only {agreement:.1%} of answers match the rest of {group.name} "
                        f"(min {group.min_agreement:.0%}): a correctness bug, not quantization"))
                else:  # different quantizations: where this one parts from the others
                    shown = ", ".join(differ[:5]) + (f" (+{len(differ) - 5} more)"
                                                     if len(differ) > 5 else "")
                    col.update(cross_stack_verdict="differs", cross_stack_reason=(
                        f"only {agreement:.1%} of answers match the rest of {group.name} "
                        f"(min {group.min_agreement:.0%}): its format or engine parts from "
                        f"the others on {shown}"))
            columns[(target, variant)] = col
    return columns
