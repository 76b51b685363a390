"""The release gate's decision: interleaved repetitions, paired per repetition, a t-interval
against each metric's threshold; quality from the three-way gate."""

import datetime as dt

import pytest
from servebench.release.gate import (
    ReleaseGateParams,
    decide,
    gate_spec,
    outcome,
    render_verdict,
    verdict_rows,
)
from servebench.results.schema import rows_to_table


def _params(**kw):
    return ReleaseGateParams(target="adder-llamacpp", candidate="q8_0",
                             thresholds={"ttft_ms_p95": 0.10, "output_throughput": 0.10}, **kw)


def _measured(base_ttft, cand_ttft, base_tput, cand_tput, correct=(True, True)):
    cells = []
    for rep, values in enumerate(zip(base_ttft, cand_ttft, base_tput, cand_tput)):
        bt, ct, bp, cp = values
        for variant, ttft, tput in (("f16", bt, bp), ("q8_0", ct, cp)):
            cells.append({"workload": "fixed-64x32", "load_point": "c4", "variant": variant,
                          "repetition": rep, "status": "ok", "ttft_ms_p95": ttft,
                          "output_throughput": tput})
    evals = [{"target": "adder-llamacpp", "variant": v, "golden_set": "addition",
              "item_id": str(i), "correct": ok, "error": None}
             for i in range(100) for v, ok in (("f16", correct[0]), ("q8_0", correct[1]))]
    return {"cells": cells, "evals": evals}


@pytest.fixture(scope="module")
def spec():
    return gate_spec(_params(workloads=["fixed-64x32"], concurrency=[4]))


def test_the_gate_sweep_holds_the_two_variants_and_the_chosen_cells(spec):
    [target] = spec.targets
    assert [v.name for v in target.variants] == ["f16", "q8_0"] and target.baseline == "f16"
    assert [w.name for w in spec.workloads] == ["fixed-64x32"]
    assert [p.label for p in spec.load.points()] == ["c4"]


@pytest.mark.parametrize(("params", "message"), [
    ({"candidate": "q9"}, "param candidate: 'q9' is not a variant"),
    ({"candidate": "f16"}, "the candidate is the baseline"),
    ({"thresholds": {"latency": 0.1}}, "param thresholds: unknown metric(s) ['latency']"),
    ({"workloads": ["nope"]}, "param workloads: ['nope']"),
])
def test_bad_params_name_the_param(params, message):
    chosen = ReleaseGateParams(**{"target": "adder-llamacpp", "candidate": "q8_0", **params})
    with pytest.raises(ValueError) as err:
        gate_spec(chosen)
    assert message in str(err.value)


def test_a_steady_slowdown_beyond_the_threshold_fails(spec):
    got = decide(spec, _params(), _measured([10, 10.5, 10.2], [13, 13.4, 13.1],
                                            [1000, 990, 1010], [995, 985, 1000]))
    ttft = next(r for r in got["perf"] if r["metric"] == "ttft_ms_p95")
    assert ttft["verdict"] == "fail" and ttft["worse_ci_low"] > 0
    assert got["overall"] == "fail"
    assert "**FAIL**" in render_verdict(got, "r1")


def test_within_the_threshold_at_the_interval_end_passes(spec):
    got = decide(spec, _params(), _measured([10, 10.5, 10.2], [10.1, 10.4, 10.3],
                                            [1000, 990, 1010], [1005, 992, 1008]))
    assert {r["verdict"] for r in got["perf"]} == {"pass"}
    assert got["quality"]["gate_verdict"] == "pass" and got["overall"] == "pass"


def test_noise_that_cannot_decide_is_inconclusive_and_needs_a_person(spec):
    got = decide(spec, _params(), _measured([10, 10, 10], [9, 12.5, 10.5],
                                            [1000, 1000, 1000], [1000, 1000, 1000]))
    ttft = next(r for r in got["perf"] if r["metric"] == "ttft_ms_p95")
    assert ttft["verdict"] == "inconclusive" and got["overall"] == "inconclusive"
    assert "NEEDS A PERSON" in render_verdict(got, "r1")
    strict = decide(spec, _params(on_inconclusive="fail"), _measured(
        [10, 10, 10], [9, 12.5, 10.5], [1000, 1000, 1000], [1000, 1000, 1000]))
    assert "FAIL (inconclusive" in render_verdict(strict, "r1")
    assert outcome(got) == "needs_person" and outcome(strict) == "blocked"


def test_the_verdict_is_a_table_row_per_cell_and_metric_and_one_for_quality(spec):
    got = decide(spec, _params(), _measured([10, 10.5, 10.2], [13, 13.4, 13.1],
                                            [1000, 990, 1010], [995, 985, 1000],
                                            correct=(True, False)))
    at = dt.datetime(2026, 12, 4, 9, tzinfo=dt.UTC)
    rows = rows_to_table("gate_verdicts", verdict_rows(got, "gate-1", at)).to_pylist()
    assert [(r["metric"], r["verdict"]) for r in rows] == [
        ("ttft_ms_p95", "fail"), ("output_throughput", "pass"), ("quality", "fail")]
    ttft, _, quality = rows
    assert ttft["worse_ci_low"] > 0 and ttft["threshold"] == 0.10 and ttft["pairs"] == 3
    assert ttft["workload"] == "fixed-64x32" and ttft["load_point"] == "c4"
    assert quality["workload"] is None and quality["worse_mean"] == 1.0  # every answer lost
    assert {(r["run_id"], r["candidate"], r["baseline"], r["outcome"]) for r in rows} == {
        ("gate-1", "q8_0", "f16", "blocked")}


def test_a_quality_drop_fails_whatever_the_speed(spec):
    got = decide(spec, _params(), _measured([10, 10, 10], [8, 8, 8], [1000] * 3, [1200] * 3,
                                            correct=(True, False)))
    assert got["quality"]["gate_verdict"] == "fail" and got["overall"] == "fail"


def test_quality_not_judged_leaves_the_release_to_a_person(spec):
    """A target without a golden set: quality is "not judged", which decides nothing, so even
    a candidate as fast as its baseline waits for a person, told why."""
    from servebench.config import SweepSpec

    [target] = spec.targets
    bare = SweepSpec.model_validate({**spec.model_dump(), "targets": [
        {**target.model_dump(), "golden_sets": []}]})
    got = decide(bare, _params(), _measured([10, 10.5, 10.2], [10.1, 10.4, 10.3],
                                            [1000, 990, 1010], [1005, 992, 1008]))
    assert {r["verdict"] for r in got["perf"]} == {"pass"}
    assert got["quality"]["gate_verdict"] == "not_judged"
    assert got["overall"] == "inconclusive" and outcome(got) == "needs_person"
    text = render_verdict(got, "r1")
    assert "**NEEDS A PERSON**" in text
    assert "- **quality**: not judged -- target has no golden set" in text
    at = dt.datetime(2026, 12, 4, 9, tzinfo=dt.UTC)
    rows = rows_to_table("gate_verdicts", verdict_rows(got, "gate-1", at)).to_pylist()
    assert rows[-1]["metric"] == "quality" and rows[-1]["verdict"] == "not_judged"
