"""The release gate: a candidate variant against its baseline, measured in one run on one
host, decided on performance and on quality.

The two run in interleaved repetitions (ABBA: baseline, candidate, candidate, baseline, ...),
so drift of the host over the run hits both alike. For each cell (workload x load point) and
each gated metric the repetitions pair up, candidate against baseline of the same
repetition; the relative change ``w`` is signed so that positive is worse (``direction`` from
``servebench.metric_catalogue``), and its mean gets a 95% t-interval over the pairs:

    fail          the interval is above 0 and the mean is beyond the metric's threshold
                  (a real slow-down, larger than allowed)
    pass          the interval's upper end is within the threshold (even the worst plausible
                  change is allowed)
    inconclusive  otherwise: more repetitions, or a quieter host, would decide it

Quality is the three-way gate (``servebench.evals.gate``) on the golden set, answered by the
same servers. The run fails on any fail; an inconclusive is "needs a person" unless the
params say to fail on it: the DAG run then waits for a person's answer in the Airflow UI
(Required actions) and is green only once they approve (a rejection, or no answer, fails it);
who decided, when and what is kept with the verdict (``servebench.release.decision``).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from servebench.bench import VariantRunner
from servebench.config import SLOSpec, SweepSpec, VariantSpec, load_sweep
from servebench.defaults import DEFAULT_SWEEP, RELEASE_GATE_THRESHOLDS
from servebench.errors import ReleaseGateFailed
from servebench.evals.gate import NOT_JUDGED, gate_columns
from servebench.metric_catalogue import TRENDED, metric_label
from servebench.notify.digest import fmt_verdict
from servebench.plan import Plan, plan_spec
from servebench.provision.interface import Provisioner
from servebench.quantize.make import make_variant
from servebench.settings import Settings, get_settings
from servebench.trends.confirm import t_interval
from servebench.workloads import draw_prompt_seed

if TYPE_CHECKING:
    from servebench.notify.notifier import Notifier

log = logging.getLogger(__name__)


class ReleaseGateParams(BaseModel):
    """What a manual release_gate run decides: the DAG's Params form, validated here too."""

    model_config = ConfigDict(extra="forbid")

    sweep: str = Field(DEFAULT_SWEEP,
                       description="the sweep whose sampling, workloads and golden sets apply")
    target: str
    candidate: str = Field(description="the variant to release")
    baseline: str | None = Field(None, description="default: the target's baseline")
    workloads: list[str] | None = Field(None, description="default: all of the sweep's")
    concurrency: list[int] | None = Field(None, description="default: the sweep's")
    repetitions: int = Field(3, ge=2, le=20)
    thresholds: dict[str, float] = Field(
        default_factory=lambda: dict(RELEASE_GATE_THRESHOLDS),
        description="metric -> the largest relative worsening allowed (0.10 = 10%)")
    slos: SLOSpec | None = None
    on_inconclusive: Literal["needs_person", "fail"] = "needs_person"


def gate_spec(params: ReleaseGateParams, settings: Settings | None = None) -> SweepSpec:
    """The sweep narrowed to the gate: the target with baseline and candidate only, the
    chosen workloads and concurrencies, closed loop; errors name the param."""
    settings = settings or get_settings()
    spec = load_sweep(settings.resolve(params.sweep))
    target = spec.target(params.target)
    names = [v.name for v in target.variants]
    baseline = params.baseline or target.baseline or names[0]
    for field, name in (("candidate", params.candidate), ("baseline", baseline)):
        if name not in names:
            raise ValueError(f"param {field}: {name!r} is not a variant of {target.name} "
                             f"({names})")
    if baseline == params.candidate:
        raise ValueError("param candidate: the candidate is the baseline")
    unknown = sorted(set(params.thresholds) - set(TRENDED))
    if unknown:
        raise ValueError(f"param thresholds: unknown metric(s) {unknown}; known: "
                         f"{sorted(TRENDED)}")
    workloads = [w for w in spec.workloads_for(target.name)
                 if params.workloads is None or w.name in params.workloads]
    missing = sorted(set(params.workloads or []) - {w.name for w in workloads})
    if missing:
        raise ValueError(f"param workloads: {missing} not in {params.sweep}")
    variants = [v for v in target.variants if v.name in (baseline, params.candidate)]
    return SweepSpec.model_validate({
        **spec.model_dump(), "name": f"release-gate-{target.name}",
        "workloads": [w.model_dump() for w in workloads],
        # matched closed-loop points only: an SLO search's cells run at loads of their own
        "load": {**spec.load.model_dump(), "rates": [], "slo_search": None,
                 "concurrency": params.concurrency or spec.load.concurrency},
        "slos": (params.slos or spec.slos).model_dump(), "cross_stack": [],
        "targets": [{**target.model_dump(), "baseline": baseline, "workloads": None,
                     "variants": [v.model_dump() for v in variants]}],
    })


def run_repetitions(spec: SweepSpec, params: ReleaseGateParams, run_id: str,
                    provisioner: Provisioner, settings: Settings | None = None,
                    prompt_seed: int | None = None, try_number: int = 1,
                    launched: dict[str, VariantSpec] | None = None) -> dict:
    """Both variants, ``repetitions`` times, interleaved ABBA; {cells, evals} as rows (each
    cell with its ``repetition``). Within a repetition both meet the same prompts; each
    repetition draws its own (``prompt_seed``: the plan's, else one drawn here), and each try
    of the measuring task (``try_number``, from 1) its own again. ``launched``: the variants
    as the plan launches them, by name (``Plan.variant_of``: a recipe's checkpoint)."""
    settings = settings or get_settings()
    prompt_seed = draw_prompt_seed(spec.load.prompt_seed) if prompt_seed is None \
        else prompt_seed
    target = spec.targets[0]
    base = next(v for v in target.variants if v.name == target.baseline)
    cand = next(v for v in target.variants if v.name != target.baseline)
    if launched:
        base, cand = launched[base.name], launched[cand.name]
    cells, evals = [], []
    for rep in range(params.repetitions):
        for variant in ((base, cand) if rep % 2 == 0 else (cand, base)):
            log.info("release gate: repetition %d, %s", rep + 1, variant.name)
            result = VariantRunner(spec, target, variant, run_id=run_id, settings=settings,
                                   provisioner=provisioner, repetition=rep,
                                   prompt_seed=prompt_seed, try_number=try_number).run()
            cells += [{**c, "repetition": rep} for c in result.cells]
            if rep == 0:  # greedy answers: one golden set per variant decides quality
                evals += result.evals
    return {"cells": cells, "evals": evals}


CELL_FIELDS = ("workload", "load_point", "variant", "repetition", "status", "reason",
               *TRENDED)
EVAL_FIELDS = ("target", "variant", "golden_set", "item_id", "correct", "error")


def plan_gate(params: dict, run_date: dt.date, settings: Settings | None = None) -> Plan:
    """The plan task: the params validated, the sweep narrowed to the gate and checked as a
    nightly plan is (a bad param or spec fails here, before anything is provisioned)."""
    chosen = ReleaseGateParams.model_validate({k: v for k, v in params.items()
                                               if v is not None})
    settings = settings or get_settings()
    return plan_spec(gate_spec(chosen, settings), str(settings.resolve(chosen.sweep)),
                     run_date=run_date, settings=settings, gate=chosen.model_dump(mode="json"))


def measure_gate(plan: Plan | dict, provisioned: dict, run_id: str,
                 settings: Settings | None = None, dag_id: str = "",
                 try_number: int = 1) -> dict:
    """The measure task (its try ``try_number``: a cleared task runs again): the repetitions
    on the target's provisioner; the rows the verdict needs (JSON-able, for the task's
    XCom)."""
    from servebench.provision import get_provisioner
    from servebench.provision.interface import host_session

    settings, plan = settings or get_settings(), Plan.from_xcom(plan)
    spec, params = plan.spec, ReleaseGateParams.model_validate(plan.gate)
    target = spec.targets[0]
    kind = target.provision_kind
    # the one host both variants share (a per-host kind's machine, held for the repetitions)
    with host_session(get_provisioner(kind), run_id, (provisioned or {}).get("kinds", {})
                      .get(kind), [target], settings, dag_id=dag_id) as provisioner:
        # a recipe variant's checkpoint: made once (the cache's, where a run made it before)
        launched = {unit.variant: plan.variant_of(unit) for unit in plan.units}
        for variant in launched.values():
            if variant.quantized is not None:
                make_variant(spec, variant, settings)
        # every repetition's prompts from the plan's seed and this try (workloads.prompt_key)
        measured = run_repetitions(spec, params, run_id, provisioner, settings,
                                   prompt_seed=plan.prompt_seed, try_number=try_number,
                                   launched=launched)

    def plain(value):
        return None if isinstance(value, float) and math.isnan(value) else value

    return {"cells": [{k: plain(c.get(k)) for k in CELL_FIELDS} for c in measured["cells"]],
            "evals": [{k: e.get(k) for k in EVAL_FIELDS} for e in measured["evals"]]}


def decide(spec: SweepSpec, params: ReleaseGateParams, measured: dict) -> dict:
    """The verdict: per cell and metric, quality, and overall (see the module doc)."""
    target = spec.targets[0]
    base_name = target.baseline
    cand_name = next(v.name for v in target.variants if v.name != base_name)
    by = {}
    for cell in measured["cells"]:
        by.setdefault((cell["workload"], cell["load_point"]), {}).setdefault(
            cell["variant"], {})[cell["repetition"]] = cell
    perf = []
    for (workload, point), variants in sorted(by.items()):
        for metric, threshold in params.thresholds.items():
            sign = TRENDED[metric].worse_sign
            pairs = []
            for rep, cand in variants.get(cand_name, {}).items():
                base = variants.get(base_name, {}).get(rep)
                if not base or cand.get("status") != "ok" or base.get("status") != "ok":
                    continue
                b, c = base.get(metric), cand.get(metric)
                if b is None or c is None or b == 0 or math.isnan(b) or math.isnan(c):
                    continue  # e.g. goodput 0 on both: nothing to compare
                pairs.append(sign * (c / b - 1.0))
            row = {"workload": workload, "load_point": point, "metric": metric,
                   "threshold": threshold, "pairs": len(pairs)}
            if len(pairs) < 2:
                row.update(verdict="inconclusive", reason=f"{len(pairs)} valid repetition "
                           "pair(s): cells failed or were invalid")
            else:
                mean, lo, hi = t_interval(pairs)
                row.update(worse_mean=mean, worse_ci_low=lo, worse_ci_high=hi)
                if lo > 0 and mean > threshold:
                    row["verdict"] = "fail"
                elif hi <= threshold:
                    row["verdict"] = "pass"
                else:
                    row["verdict"] = "inconclusive"
            perf.append(row)
    quality = gate_columns(spec, measured["evals"]).get((target.name, cand_name), {})
    # quality not judged (the target has no golden set) decides nothing: a person does
    judged = quality.get("gate_verdict", "inconclusive")
    verdicts = [r["verdict"] for r in perf] + [
        "inconclusive" if judged == NOT_JUDGED else judged]
    overall = "fail" if "fail" in verdicts else \
        "inconclusive" if "inconclusive" in verdicts else "pass"
    return {"target": target.name, "candidate": cand_name, "baseline": base_name,
            "repetitions": params.repetitions, "overall": overall, "perf": perf,
            "quality": {k: quality.get(k) for k in ("gate_verdict", "gate_reason",
                                                    "gate_p_value", "gate_relative")},
            "on_inconclusive": params.on_inconclusive}


LEGEND = ("_Positive = worse (slower, less throughput). fail: the interval is above 0 and the "
          "mean beyond what is allowed; pass: even the interval's worst end is within it._")


def render_verdict(decision: dict, run_id: str) -> str:
    """The verdict as Markdown (file and Slack)."""
    word = {"fail": "FAIL", "pass": "PASS", "inconclusive": "NEEDS A PERSON"}[
        decision["overall"]]
    if decision["overall"] == "inconclusive" and decision["on_inconclusive"] == "fail":
        word = "FAIL (inconclusive, and this gate fails on that)"
    q = decision["quality"]
    title = (f"# Release gate: {decision['target']}/{decision['candidate']} vs "
             f"{decision['baseline']}: **{word}**")
    reps = f"{decision['repetitions']} interleaved repetitions on one host"
    out = [title, "", f"- **run**: `{run_id}` ({reps})",
           f"- **quality**: {fmt_verdict(q.get('gate_verdict'))} -- "
           f"{q.get('gate_reason') or ''}", "",
           "| workload | load | metric | worse by (mean) | 95% interval | allowed | verdict |",
           "|---|---|---|---|---|---|---|"]
    for r in decision["perf"]:
        if "worse_mean" in r:
            mean = f"{r['worse_mean']:+.1%}"
            ci = f"[{r['worse_ci_low']:+.1%}, {r['worse_ci_high']:+.1%}]"
        else:
            mean, ci = "n/a", r.get("reason", "")
        out.append(f"| {r['workload']} | {r['load_point']} | {metric_label(r['metric'])} | "
                   f"{mean} | {ci} | {r['threshold']:.0%} | **{r['verdict']}** |")
    out += ["", LEGEND]
    return "\n".join(out) + "\n"


def outcome(decision: dict) -> str:
    """What the verdict means for the release: ``blocked`` (a fail, or an inconclusive this
    gate fails on), ``needs_person`` (inconclusive), ``ship``."""
    if decision["overall"] == "fail" or (decision["overall"] == "inconclusive"
                                         and decision["on_inconclusive"] == "fail"):
        return "blocked"
    return "needs_person" if decision["overall"] == "inconclusive" else "ship"


def verdict_rows(decision: dict, run_id: str, decided_at: dt.datetime) -> list[dict]:
    """The ``gate_verdicts`` rows of a decision: one per (cell, metric), one for quality."""
    common = {"run_id": run_id, "run_date": decided_at.date(), "decided_at": decided_at,
              "target": decision["target"], "baseline": decision["baseline"],
              "candidate": decision["candidate"], "repetitions": decision["repetitions"],
              "overall": decision["overall"], "outcome": outcome(decision)}
    rows = [{**common, **{k: r.get(k) for k in (
        "workload", "load_point", "metric", "threshold", "pairs", "worse_mean", "worse_ci_low",
        "worse_ci_high", "verdict", "reason")}} for r in decision["perf"]]
    q = decision["quality"]
    ratio = q.get("gate_relative")  # the candidate's accuracy / the baseline's
    rows.append({**common, "metric": "quality",
                 "verdict": q.get("gate_verdict") or "inconclusive",
                 "reason": q.get("gate_reason"),
                 # the accuracy lost, relative to the baseline's (positive = worse)
                 "worse_mean": 1.0 - ratio if ratio is not None and not math.isnan(ratio)
                 else None})
    return rows


def conclude(decision: dict, run_id: str, settings: Settings | None = None,
             notifier: Notifier | None = None) -> dict:
    """Keeps the verdict beside the results and announces it (``notifier``, default: the
    deployment's; a notifier that fails is said, never fails the gate: ``notify.notifier``);
    raises :class:`ReleaseGateFailed` when the candidate may not ship. Its ``outcome``
    (``ship`` or ``needs_person``: the DAG then asks a person), where it went (``where``) and
    the verdict's Markdown (``verdict``)."""
    from servebench.connections import open_store
    from servebench.notify.notifier import announce, notifier_for
    from servebench.release.decision import verdict_path
    from servebench.results.schema import rows_to_table

    settings = settings or get_settings()
    markdown = render_verdict(decision, run_id)
    store = open_store(settings)
    now = dt.datetime.now(dt.UTC)
    where = store.put_text(verdict_path(now.date(), run_id), markdown)
    # the verdict as data: the Benchmarks view's "Release gates", anyone's query
    store.append_log("gate_verdicts", now.date(), run_id,
                     rows_to_table("gate_verdicts", verdict_rows(decision, run_id, now)))
    where += announce(notifier or notifier_for(settings), "the release gate's verdict", markdown)
    log.info("release gate verdict: %s (%s)", decision["overall"], where)
    if outcome(decision) == "blocked":
        raise ReleaseGateFailed(f"{decision['target']}/{decision['candidate']} "
                                f"{decision['overall']}: see {where}\n{markdown}")
    return {"outcome": outcome(decision), "where": where, "verdict": markdown}
