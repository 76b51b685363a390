"""The quality gate on constructed outcomes, and its statistics against independent formulas."""

import math
import random

import pytest
from scipy.stats import binom, norm
from servebench.evals.gate import Outcome, gate, mcnemar_exact, wilson_interval


def _outcomes(flags, errors=()):
    return {f"i{k:03d}": Outcome(bool(v), k in errors) for k, v in enumerate(flags)}


@pytest.mark.parametrize("worse,better", [(0, 0), (1, 0), (5, 1), (12, 3), (26, 2), (7, 7)])
def test_mcnemar_exact_matches_the_binomial_formula(worse, better):
    # two-sided exact McNemar: 2 * P(X <= min(b, c)), X ~ Bin(b + c, 1/2), capped at 1
    n = worse + better
    want = 1.0 if n == 0 else min(1.0, 2 * binom.cdf(min(worse, better), n, 0.5))
    assert mcnemar_exact(worse, better) == pytest.approx(want, rel=1e-9)


def test_mcnemar_known_table():
    # b=12, c=3 (a textbook-sized table): exact two-sided p = 0.03516
    assert mcnemar_exact(12, 3) == pytest.approx(0.0351563, abs=1e-6)


@pytest.mark.parametrize("k,n", [(0, 10), (96, 100), (191, 200), (50, 50)])
def test_wilson_matches_closed_form(k, n):
    z = norm.ppf(0.975)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = wilson_interval(k, n)
    assert low == pytest.approx(centre - half, abs=1e-9)
    assert high == pytest.approx(centre + half, abs=1e-9)


def test_harsh_quant_drop_fails_with_flipped_ids():
    rng = random.Random(0)
    base = [1] * 192 + [0] * 8  # 0.96
    variant = list(base)
    flip = rng.sample(range(192), 28)  # 28 right answers turn wrong, 2 wrong turn right
    for k in flip:
        variant[k] = 0
    variant[195] = variant[196] = 1
    verdict = gate(_outcomes(base), _outcomes(variant))
    assert verdict.verdict == "fail"
    assert verdict.worse == 28 and verdict.better == 2
    assert verdict.flipped_ids == sorted(f"i{k:03d}" for k in flip)
    assert verdict.p_value < 1e-5
    assert verdict.relative < 0.9


def test_pure_noise_passes():
    # as many random items flip to wrong as to right: accuracies equal, no drop
    rng = random.Random(1)
    base = [int(rng.random() < 0.9) for _ in range(200)]
    variant = list(base)
    right = [k for k in range(200) if base[k]]
    wrong = [k for k in range(200) if not base[k]]
    for k in rng.sample(right, 5) + rng.sample(wrong, 5):
        variant[k] = 1 - variant[k]
    verdict = gate(_outcomes(base), _outcomes(variant))
    assert verdict.verdict == "pass", verdict.reason
    assert verdict.p_value > 0.01


def test_random_flips_that_lose_more_than_they_gain_are_not_called_noise():
    # ten random flips of a 90% set turn ~9 right answers wrong: a drop of ~4 points that
    # 200 items cannot confirm -- the old gate passed it as noise
    rng = random.Random(1)
    base = [int(rng.random() < 0.9) for _ in range(200)]
    variant = list(base)
    for k in rng.sample(range(200), 10):
        variant[k] = 1 - variant[k]
    verdict = gate(_outcomes(base), _outcomes(variant))
    assert (verdict.worse, verdict.better) == (9, 1) and verdict.p_value > 0.01
    assert verdict.verdict == "inconclusive" and "about 243 items" in verdict.reason


def test_a_drop_below_the_floor_too_small_a_set_cannot_confirm_is_inconclusive():
    # 100 items, a 6-point drop: not significant, but not "pass" either
    base = [1] * 90 + [0] * 10
    variant = list(base)
    for k in range(7):
        variant[k] = 0
    variant[95] = 1  # 7 flipped to wrong, 1 to right: 0.84 = 93% of 0.90
    verdict = gate(_outcomes(base), _outcomes(variant))
    assert verdict.relative < 0.99 and verdict.p_value >= 0.01
    assert verdict.verdict == "inconclusive", verdict.reason
    assert "100 items cannot confirm the drop" in verdict.reason
    # at these flip rates (7% and 1% of items), about 195 items would decide it
    assert "about" in verdict.reason and "items would decide it" in verdict.reason
    from servebench.evals.gate import items_to_decide, mcnemar_exact

    needed = items_to_decide(100, 7, 1, 0.01)
    assert mcnemar_exact(round(7 * needed / 100), round(needed / 100)) < 0.01
    assert mcnemar_exact(7, 1) >= 0.01 and needed == 195  # the figure README quotes
    assert items_to_decide(100, 1, 1, 0.01) is None  # equal flips never decide a drop


def test_noise_without_a_drop_below_the_floor_passes():
    base = [1] * 180 + [0] * 20  # 0.90
    variant = list(base)
    variant[0] = 0  # 1 flip to wrong: 0.895 = 99.4%, within the floor, not significant
    verdict = gate(_outcomes(base), _outcomes(variant))
    assert verdict.verdict == "pass" and "no significant drop" in verdict.reason


def test_an_improvement_passes_even_below_the_floor_of_nothing():
    base = [1] * 150 + [0] * 50
    variant = [1] * 170 + [0] * 30  # 20 wrong answers turned right
    verdict = gate(_outcomes(base), _outcomes(variant))
    assert verdict.verdict == "pass" and verdict.better == 20 and "no drop" in verdict.reason


def test_significant_but_within_floor_is_inconclusive_naming_the_items():
    base = [1] * 5000 + [0] * 0
    variant = [1] * 5000
    for k in range(30):  # 0.6% drop, significant on 5000 items, but 99.4% >= 99%
        variant[k] = 0
    verdict = gate(_outcomes(base), _outcomes(variant))
    assert verdict.p_value < 0.01 and verdict.relative >= 0.99
    # real but small: not a failure, not a pass either -- a person decides, with the items
    assert verdict.verdict == "inconclusive", verdict.reason
    assert "real but small drop" in verdict.reason
    assert "i000, i001" in verdict.reason and "and 20 more" in verdict.reason


def test_unpaired_items_or_many_errors_are_inconclusive():
    base = _outcomes([1] * 100)
    short = dict(list(_outcomes([1] * 100).items())[:90])
    assert gate(base, short).verdict == "inconclusive"
    errored = _outcomes([0] * 10 + [1] * 90, errors=set(range(10)))
    verdict = gate(base, errored)
    assert verdict.verdict == "inconclusive" and "requests failed" in verdict.reason


def _spec_with_group(members, min_agreement=0.98, precision="same"):
    import yaml
    from servebench.config import parse_sweep
    from servebench.settings import PROJECT_ROOT

    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["cross_stack"] = [{"name": "g", "members": members, "min_agreement": min_agreement,
                            "precision": precision}]
    return parse_sweep(data, "x")


def _evals(target, variant, answers):
    return [{"target": target, "variant": variant, "golden_set": "addition", "item_id": f"i{k}",
             "answer": a, "error": None} for k, a in enumerate(answers)]


def test_cross_stack_flags_the_member_that_disagrees():
    from servebench.evals.gate import cross_stack_columns

    spec = _spec_with_group(["adder-llamacpp/f16", "adder-llamacpp/q8_0", "adder-transformers/f32"])
    right = [str(k) for k in range(100)]
    buggy = list(right)
    for k in range(0, 100, 10):
        buggy[k] = "wrong"  # a stack-specific bug, e.g. a broken chat template
    evals = (_evals("adder-llamacpp", "f16", right) + _evals("adder-llamacpp", "q8_0", right)
             + _evals("adder-transformers", "f32", buggy))
    cols = cross_stack_columns(spec, evals)
    assert cols[("adder-llamacpp", "f16")]["cross_stack_verdict"] == "consistent"
    bad = cols[("adder-transformers", "f32")]
    assert bad["cross_stack_verdict"] == "differs"
    assert bad["cross_stack_agreement"] == 0.9
    assert bad["cross_stack_differing_ids"] == sorted(f"i{k}" for k in range(0, 100, 10))
    assert bad["cross_stack_reason"].endswith("a correctness bug, not quantization")


def test_a_mixed_precision_group_says_where_a_format_parts_from_the_others():
    """GGUF q4_k_m on llama.cpp against W4A16 GPTQ and AWQ on vLLM: not a bug, a place where
    one quantization answers differently, named item by item."""
    from servebench.evals.gate import cross_stack_columns

    members = ["adder-llamacpp/q4_k_m", "adder-vllm/w4a16-gptq", "adder-vllm/w4a16-awq"]
    spec = _spec_with_group(members, min_agreement=0.95, precision="mixed")
    right = [str(k) for k in range(100)]
    parted = [a if k not in (3, 14, 15, 60, 71, 88, 99) else "x" for k, a in enumerate(right)]
    evals = (_evals("adder-llamacpp", "q4_k_m", parted) + _evals("adder-vllm", "w4a16-gptq", right)
             + _evals("adder-vllm", "w4a16-awq", right))
    cols = cross_stack_columns(spec, evals)
    assert cols[("adder-vllm", "w4a16-awq")]["cross_stack_verdict"] == "consistent"
    q4 = cols[("adder-llamacpp", "q4_k_m")]
    assert q4["cross_stack_verdict"] == "differs" and q4["cross_stack_agreement"] == pytest.approx(0.93)
    assert q4["cross_stack_reason"] == (
        "only 93.0% of answers match the rest of g (min 95%): its format or engine parts from "
        "the others on i14, i15, i3, i60, i71 (+2 more)")


def test_cross_stack_group_must_name_real_variants():
    from servebench.config import SpecError

    with pytest.raises(SpecError, match=r"cross_stack group 'g' names \['nope/f16'\]"):
        _spec_with_group(["adder-llamacpp/f16", "nope/f16"])


def test_a_target_without_a_golden_set_is_not_judged():
    """Nothing was asked of its answers: "not judged", not the "inconclusive" of evidence too
    weak to decide, which a target with a golden set but no results for a variant still is."""
    import yaml
    from servebench.config import parse_sweep
    from servebench.evals.gate import NOT_JUDGED, gate_columns
    from servebench.results.schema import GATE_VERDICT_VALUES
    from servebench.settings import PROJECT_ROOT

    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["cross_stack"] = []
    data["targets"][1]["golden_sets"] = []  # adder-transformers
    spec = parse_sweep(data, "x")
    answered = [{**row, "correct": True} for row in _evals("adder-llamacpp", "f16", ["3"] * 10)]
    cols = gate_columns(spec, answered)
    assert cols[("adder-transformers", "f32")] == {
        "gate_baseline": "f32", "gate_verdict": NOT_JUDGED,
        "gate_reason": "target has no golden set"}
    assert NOT_JUDGED == "not_judged" and NOT_JUDGED in GATE_VERDICT_VALUES
    assert cols[("adder-llamacpp", "f16")]["gate_verdict"] == "baseline"
    assert cols[("adder-llamacpp", "q8_0")]["gate_verdict"] == "inconclusive"
    assert cols[("adder-llamacpp", "q8_0")]["gate_reason"] == \
        "no golden-set results for the variant"


def _spec_with_speculation(temperature=0.0):
    import yaml
    from servebench.config.sweep import parse_sweep

    return parse_sweep(yaml.safe_load(f"""
name: s
price_per_hour: 1
sampling: {{temperature: {temperature}}}
workloads: [{{kind: fixed, name: w, input_tokens: 8, output_tokens: 4, num_requests: 2}}]
load: {{concurrency: [1]}}
golden_sets: [{{name: g, path: g.jsonl}}]
targets:
  - name: t
    stack: llama_cpp
    baseline: f16
    golden_sets: [g]
    variants:
      - {{name: f16, model: a.gguf, quant: f16}}
      - {{name: spec, model: a.gguf, quant: f16, speculative: {{method: ngram}}}}
      - {{name: lone, model: b.gguf, quant: f16, speculative: {{method: ngram}}}}
"""), "s.yaml")


def _answers(variant, answers):
    return [{"target": "t", "variant": variant, "golden_set": "g", "item_id": f"i{k}",
             "answer": a, "correct": a == "ok", "error": None} for k, a in enumerate(answers)]


def test_a_speculative_variant_with_its_twins_answers_says_so():
    from servebench.evals.gate import gate_columns

    evals = _answers("f16", ["ok", "ok", "no"]) + _answers("spec", ["ok", "ok", "no"])
    col = gate_columns(_spec_with_speculation(), evals)[("t", "spec")]
    assert col["gate_verdict"] == "pass"
    assert col["gate_reason"].startswith("identical answers to f16 on all 3 items")


def test_one_changed_greedy_answer_fails_a_speculative_variant_naming_it():
    from servebench.evals.gate import gate_columns

    # a wrong answer turned into another wrong one: accuracy holds, exactness does not
    evals = _answers("f16", ["ok", "ok", "no"]) + _answers("spec", ["ok", "ok", "nope"])
    col = gate_columns(_spec_with_speculation(), evals)[("t", "spec")]
    assert col["gate_verdict"] == "fail"
    assert col["gate_reason"].startswith("speculation changed 1 of 3 greedy answers against "
                                         "f16: i2")


def test_exactness_needs_a_twin_and_greedy_sampling():
    from servebench.evals.gate import gate_columns

    evals = _answers("f16", ["ok", "ok"]) + _answers("lone", ["ok", "ok"]) + \
        _answers("spec", ["ok", "ok"])
    col = gate_columns(_spec_with_speculation(), evals)[("t", "lone")]
    assert col["gate_verdict"] == "inconclusive"
    assert "no variant of the target serves its weights without speculation" in \
        col["gate_reason"]
    hot = gate_columns(_spec_with_speculation(0.7), evals)[("t", "spec")]
    assert hot["gate_verdict"] == "pass" and "not greedy" in hot["gate_reason"]
