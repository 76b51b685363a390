"""The confirm task's work: the night's suspects (``trends.confirm``) re-measured the same
morning, each suspect variant relaunched interleaved with its reference on the same host
(ABBA: reference, suspect, suspect, reference, ...), only its suspect cells, no golden set;
the verdicts attached to the run as its ``confirmations`` and folded into its ``changes``.
``pipeline.confirm`` is the DAG's entry to it."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field

from servebench.bench.runner import VariantRunner
from servebench.connections import open_store
from servebench.plan import Plan
from servebench.provision import get_provisioner
from servebench.provision.interface import confirm_session
from servebench.quantize.make import make_variant
from servebench.results.schema import rows_to_table
from servebench.settings import Settings
from servebench.trends.annotations import load_annotations
from servebench.trends.attribution import attribute
from servebench.trends.confirm import (
    Judgement,
    Session,
    confirmation_row,
    estimate_s,
    find_suspects,
    judge,
    sessions_for,
    suspect_nights,
    with_verdicts,
    within_budget,
)
from servebench.trends.nightly import (
    baseline_starts,
    detector_settings,
    group_findings,
    load_nights,
)

log = logging.getLogger(__name__)

Cell = tuple[str, str]  # (workload, load point label)


@dataclass
class Relaunched:
    """One session's relaunches: per side and cell, each launch's row (None: no ok cell)."""

    suspect: dict[Cell, list[dict | None]] = field(default_factory=dict)
    reference: dict[Cell, list[dict | None]] = field(default_factory=dict)
    seconds: float = 0.0
    failure: str | None = None  # why nothing was measured
    # the host canary around each relaunch (servebench.canary), per side: its units row's
    # canary columns, kept with the confirmation rows
    canary: dict[str, list[dict]] = field(default_factory=dict)


def confirm_night(plan: Plan, summary: dict, settings: Settings, *, dag_id: str = "",
                  try_number: int = 1) -> dict:
    """The confirm task: tonight's suspects found, the ones within ``trends.confirm``'s budget
    re-measured, the verdicts attached (``confirmations``; ``changes`` rewritten by
    ``trends.confirm.with_verdicts``). The summary with its verdict and alert counts."""
    conf = plan.spec.trends.confirm
    run_id = summary["run_id"]
    if conf is None:
        return {**summary, "confirmations": {}}
    store = open_store(settings)
    runs, cells, series = load_nights(store, run_id)
    tonight = int(runs["night"].iloc[-1])
    night_of = dict(zip(runs["run_id"], runs["night"], strict=True))
    alerts = store.read_table("changes", run_ids=[run_id]).to_pylist()
    annotations = load_annotations(settings.resolve(settings.annotations))
    starts = baseline_starts(store, runs, series, annotations)
    detector = detector_settings(runs["spec_json"].iloc[-1])
    min_change = detector.min_rel_change
    suspects = find_suspects(series, alerts, starts, night_of, tonight,
                             sigmas=conf.suspect_sigmas, min_change=min_change,
                             baselines={t.name: t.baseline for t in plan.spec.targets
                                        if t.baseline})
    variants = {t.name: [n for n in dict.fromkeys([t.baseline, *(v.name for v in t.variants)])
                         if n] for t in plan.spec.targets}
    sessions = sessions_for(suspects, variants, cells, runs)
    tonight_cells = cells[cells["run_id"] == run_id]
    units = store.read_table("units", run_ids=[run_id]).to_pandas()
    for session in sessions:
        session.estimate_s = estimate_s(session, units, tonight_cells, conf.launches)
    kept, over = within_budget(sessions, conf.budget_s)
    log.info("confirm %s: %d suspects in %d variants; %d re-measured (~%.0f s of %.0f s), "
             "%d over the budget", run_id, len(suspects), len(sessions), len(kept),
             sum(s.estimate_s for s in kept), conf.budget_s, len(over))
    measured = remeasure(plan, kept, run_id, settings, launches=conf.launches, dag_id=dag_id,
                         try_number=try_number)
    rows = []
    for session in sessions:
        done = measured.get((session.target, session.variant))
        for suspect in session.suspects:
            if done is None:
                judgement = Judgement("over_budget", "not re-measured: over the confirm "
                                      f"budget (~{session.estimate_s:.0f} s; "
                                      f"trends.confirm.budget_s {conf.budget_s:.0f})")
                values, ref_values, seconds, canary = [], None, None, {}
            elif done.failure:
                judgement = Judgement("not_measured", f"not re-measured: {done.failure}")
                values, ref_values, seconds, canary = [], None, done.seconds, {}
            else:
                values = _values(done.suspect, suspect.cell, suspect.metric)
                ref_values = _values(done.reference, suspect.cell, suspect.metric) \
                    if session.reference else None
                judgement = judge(suspect, values, ref_values, series, session.reference,
                                  min_change=min_change, launches=conf.launches)
                if session.reference is None:
                    judgement = _no_reference(judgement, session)
                seconds, canary = done.seconds, done.canary
            log.info("confirm %s: %s", suspect.series_id, judgement.words)
            rows.append(confirmation_row(suspect, judgement, session.reference,
                                         conf.launches, seconds, values, ref_values,
                                         canary=canary))
    causes, by_id = {}, {suspect.series_id: suspect for suspect in suspects}
    for row in rows:
        if row["source"] == "suspect" and row["verdict"] == "confirmed":
            mine = tonight_cells[(tonight_cells["target"] == row["target"])
                                 & (tonight_cells["variant"] == row["variant"])
                                 & (tonight_cells["workload"] == row["workload"])
                                 & (tonight_cells["load_point"] == row["load_point"])]
            # its move began tonight or up to the detector's locate tolerance before (an
            # earlier night's suspect not yet confirmed): a recorded change that near is it;
            # or any night since its baseline began, where a recorded change came that night
            # and every night since stood off its baseline the suspect's way (a quiet
            # series' step the detector's floor let pass: its cause and night, not tonight's)
            suspect = by_id[row["series_id"]]
            causes[row["series_id"]] = attribute(
                cells, runs, mine.iloc[0].to_dict(), tonight, lo=suspect.start,
                hi=tonight, tolerance=detector.locate_tolerance,
                values=suspect_nights(series, suspect, tonight + 1),
                lead=tonight - suspect.start)
    changes = with_verdicts(alerts, rows, runs, causes)
    group_findings(changes)
    ids = {"run_id": run_id, "run_date": summary["run_date"]}
    store.attach(run_id, summary["run_date"], {
        "confirmations": rows_to_table("confirmations", [{**ids, **r} for r in rows]),
        "changes": rows_to_table("changes", [{**r, **ids} for r in changes])})
    verdicts = [r["verdict"] for r in rows]
    kinds = [r["kind"] for r in changes]
    return {**summary, "alerts": {k: kinds.count(k) for k in sorted(set(kinds))},
            "confirmations": {v: verdicts.count(v) for v in sorted(set(verdicts))}}


def _no_reference(judgement: Judgement, session: Session) -> Judgement:
    """A verdict made without a reference says why it had none."""
    if session.why_no_reference and "(no reference" in judgement.words:
        words = judgement.words.replace("none usable", session.why_no_reference)
        return dataclasses.replace(judgement, words=words)
    return judgement


def _values(rows: dict[Cell, list[dict | None]], cell: Cell, metric: str) -> list:
    out = []
    for row in rows.get(cell, []):
        value = row.get(metric) if row else None
        out.append(None if value is None or math.isnan(value) else float(value))
    return out


def remeasure(plan: Plan, sessions: list[Session], run_id: str, settings: Settings, *,
              launches: int, dag_id: str = "", try_number: int = 1
              ) -> dict[tuple[str, str], Relaunched]:
    """Each session's relaunches, by (target, variant), on what ``confirm_session`` gives
    its kind: a kind that pays by the machine relaunches on the machine its units held
    (first releasing the held machines with nothing to re-measure, then each other once its
    own relaunches are done); any other kind on what it acquires again for the run (torn
    down in every path)."""
    out: dict[tuple[str, str], Relaunched] = {}
    by_kind: dict[str, dict[str, list[Session]]] = {}  # kind -> target -> its sessions
    for target in plan.spec.targets:
        by_kind.setdefault(target.provision_kind, {})[target.name] = [
            s for s in sessions if s.target == target.name]
    for kind, targets in by_kind.items():  # first: nothing waits on these machines
        idle = [plan.spec.target(name) for name, mine in targets.items() if not mine]
        cls = get_provisioner(kind)
        if cls.per_host and idle and plan.spec.trends.holds_hosts:
            with confirm_session(cls, run_id, idle, settings, dag_id=dag_id):
                log.info("confirm: nothing to re-measure on %s", [t.name for t in idle])
    for kind, targets in by_kind.items():
        busy = [plan.spec.target(name) for name, mine in targets.items() if mine]
        if not busy:
            continue
        cls = get_provisioner(kind)
        # a machine paid by the host is released as soon as its own relaunches are done
        for group in ([t] for t in busy) if cls.per_host else [busy]:
            with confirm_session(cls, run_id, group, settings, dag_id=dag_id) as provisioner:
                for target in group:
                    problem = provisioner.host_problem(target)
                    for session in targets[target.name]:
                        out[(session.target, session.variant)] = \
                            Relaunched(failure=problem) if problem else relaunch(
                                plan, session, provisioner, run_id, settings,
                                launches=launches, try_number=try_number)
    return out


def relaunch(plan: Plan, session: Session, provisioner, run_id: str, settings: Settings, *,
             launches: int, try_number: int = 1) -> Relaunched:
    """``launches`` relaunches of the session's variant and as many of its reference,
    interleaved ABBA, each measuring the session's cells with the prompts of its repetition
    (both sides of a repetition meet the same ones; tonight's cells were repetition 0)."""
    units = {(u.target, u.variant): u for u in plan.units}
    target = plan.spec.target(session.target)
    sides = {"suspect": plan.variant_of(units[(session.target, session.variant)])}
    if session.reference:
        sides["reference"] = plan.variant_of(units[(session.target, session.reference)])
    for variant in sides.values():
        if variant.quantized is not None:  # the quantize step's, from the cache
            make_variant(plan.spec, variant, settings)
    done, t0 = Relaunched(), time.monotonic()
    only = set(session.cells)
    for rep in range(launches):
        order = ["reference", "suspect"] if rep % 2 == 0 else ["suspect", "reference"]
        for side in (s for s in order if s in sides):
            log.info("confirm: relaunch %d of %s (%s of %s/%s)", rep + 1, sides[side].name,
                     side, session.target, session.variant)
            result = VariantRunner(plan.spec, target, sides[side], run_id=run_id,
                                   settings=settings, provisioner=provisioner,
                                   repetition=rep + 1, prompt_seed=plan.prompt_seed,
                                   try_number=try_number, requests=plan.requests,
                                   only_cells=only, golden=False).run()
            found = {(c["workload"], c["load_point"]): c for c in result.cells}
            done.canary.setdefault(side, []).append(
                {k: v for k, v in result.unit.items() if k.startswith("canary_")})
            for cell in session.cells:
                row = found.get(cell)
                getattr(done, side).setdefault(cell, []).append(
                    row if row and row.get("status") == "ok" else None)
    done.seconds = time.monotonic() - t0
    return done
