"""The steps of a nightly run, one function per DAG task; the DAG file only wires them.

plan -> quantize -> provision (setup) -> bench each host's units -> teardown (always)
-> publish -> detect -> confirm -> digest. Steps exchange small JSON (XCom: the plan as ``Plan.to_xcom``);
bulky rows go through the result store's scratch area so any worker can pick them up. The
work of each step lives in its own module (``plan``, ``quantize``, ``bench.host``,
``publish``, ``trends.step``, ``bench.confirm``, ``notify.night``); this one holds the entry points and
``run_sweep``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable

from servebench.bench.confirm import confirm_night
from servebench.bench.host import bench_host
from servebench.bench.rows import cell_id
from servebench.connections import airflow_url, open_store
from servebench.defaults import CLI_DAG_ID
from servebench.errors import QuantizeError
from servebench.notify.night import Night
from servebench.notify.notifier import Notifier, notifier_for
from servebench.plan import Plan, Unit, make_plan
from servebench.provision import get_provisioner, provision_kinds
from servebench.publish import (
    keep_paid_hosts,
    keep_unit_rows,
    publish_run,
    unit_failed_cells,
)
from servebench.quantize.make import make_variant
from servebench.settings import Settings, get_settings
from servebench.trends.sizing import sizable, size_from_store
from servebench.trends.step import detect_night

log = logging.getLogger(__name__)


def plan_run(sweep: str | None = None, run_date: dt.date | None = None,
             settings: Settings | None = None) -> dict:
    """The plan task: the checked sweep, expanded to units (``PlanError`` names every
    problem, before anything is provisioned)."""
    settings = settings or get_settings()
    return sized(make_plan(sweep, run_date, settings), settings).to_xcom()


def sized(plan: Plan, settings: Settings) -> Plan:
    """The plan with its cells' request counts sized (``load.auto_requests``) from the
    sweep's newest judged night in the store (``trends.sizing.size_from_store``), each
    cell's count and why logged; the plan as it was without ``auto_requests``."""
    auto = plan.spec.load.auto_requests
    if auto is None:
        return plan
    cells = [(cell_id(u.target, u.variant, w.name, p), w.num_requests)
             for u in plan.units if not u.refused for w in plan.spec.workloads_for(u.target)
             for p in plan.spec.load.points_for(w) if sizable(w, p)]
    judged, counts = size_from_store(open_store(settings), plan.spec.name, cells, auto)
    added = sum(c.added_s for c in counts)
    log.info("auto_requests: %d of %d cells sized from night %s, +%.0f s of %.0f s budget",
             sum(c.count != c.base for c in counts), len(counts), judged, added, auto.budget_s)
    for c in counts:
        log.info("  %-60s %4d (workload's %d): %s", c.cell_id, c.count, c.base, c.why)
    return plan.model_copy(update={"requests": {c.cell_id: c.count for c in counts
                                                if c.count != c.base}})


def quantize_recipes(plan: Plan | dict, run_id: str, settings: Settings | None = None,
                     on_recipe: Callable[[Unit], None] | None = None) -> dict:
    """The quantize task: each recipe's checkpoint made once, before the units that serve it
    (a checkpoint the cache has is not made again: ``servebench.quantize``). A recipe that
    fails keeps its units' cells failed with the tool's own last lines, which the bench then
    skips; the rest of the night runs. Returns, per recipe hash, its path and seconds or why
    it failed. ``on_recipe`` sees each recipe's first unit before it is made or found."""
    settings, plan = settings or get_settings(), Plan.from_xcom(plan)
    made: dict[str, dict] = {}
    for unit in plan.units:
        if unit.quantized is None or unit.refused:  # a refused unit is never served
            continue
        digest = unit.quantized.recipe_hash
        if digest not in made:
            if on_recipe:
                on_recipe(unit)
            try:
                seconds = make_variant(plan.spec, plan.variant_of(unit), settings)
                made[digest] = {"path": unit.quantized.path, "seconds": round(seconds, 1)}
            except QuantizeError as exc:
                log.error("recipe %s of %s failed: %s", digest, unit.unit_id, exc)
                made[digest] = {"failed": str(exc)}
        if "failed" in made[digest]:
            reason = (f"quantizing {unit.quantized.base} by its recipe ({digest}) failed: "
                      f"{made[digest]['failed']}")
            keep_unit_rows(open_store(settings), plan, unit, run_id,
                           {"cells": unit_failed_cells(plan, unit, run_id, reason)})
    return made


def provision(plan: Plan | dict, run_id: str, settings: Settings | None = None,
              dag_id: str = "") -> dict:
    """The setup task: each provision kind the plan's targets use acquires what they need
    (a kind that pays by the machine only says where its hosts will be: each host's bench
    task acquires its own, ``host_session``); returns each kind's state for the bench and
    teardown tasks."""
    settings, plan = settings or get_settings(), Plan.from_xcom(plan)
    kinds: dict[str, list] = {}
    for target in plan.spec.targets:
        kinds.setdefault(target.provision_kind, []).append(target)
    state, t0 = {}, time.monotonic()
    for kind, targets in kinds.items():
        cls = get_provisioner(kind)
        if cls.per_host:
            state[kind] = cls.where(targets, settings)
            log.info("%s hosts are acquired when their units are due: %s", kind,
                     [t.name for t in targets])
            continue
        state[kind] = cls.acquire(run_id, targets, settings, dag_id=dag_id)
        log.info("provisioned %s for %s", kind, [t.name for t in targets])
    return {"run_id": run_id, "kinds": state, "acquire_s": time.monotonic() - t0}


def teardown(provisioned: dict | None, run_id: str, settings: Settings | None = None,
             plan: Plan | dict | None = None, *, spare_held: bool = False) -> list:
    """Every kind tears down what the run still holds (with ``spare_held``, not the machines
    held for the same morning's relaunches: :func:`release_held` ends those). Works without
    the setup task's output (it failed, or was cleared): each kind the plan uses (every kind,
    without a plan) then finds the run's leftovers from the run id. A kind that fails is
    raised after the others tore theirs down."""
    settings = settings or get_settings()
    plan = Plan.from_xcom(plan) if plan is not None else None
    states = (provisioned or {}).get("kinds")
    if not states:
        states = {kind: None for kind in (plan.provision_kinds() if plan else provision_kinds())}
    stopped, paid, errors = _end_each(states, run_id, settings, spare_held=spare_held)
    if stopped:
        log.warning("teardown stopped what the run left: %s", stopped)
    if paid and plan:  # the publish prices them (it runs after this task)
        keep_paid_hosts(open_store(settings), plan, run_id, paid)
    if errors:
        raise RuntimeError("teardown could not stop everything: " + "; ".join(errors))
    return stopped


def _end_each(states: dict[str, dict | None], run_id: str, settings: Settings, *,
              spare_held: bool = False, paid_hosts: bool = True
              ) -> tuple[list, list[dict], list[str]]:
    """Each kind's ``teardown`` on its state: what was stopped, the machines each paid for
    (``Provisioner.paid_hosts``, where asked), and each kind that failed with why (logged
    with its traceback; the others still end theirs)."""
    stopped, paid, errors = [], [], []
    for kind, state in states.items():
        provisioner = get_provisioner(kind).attach(run_id, state, settings)
        try:
            stopped += provisioner.teardown(spare_held=spare_held)
            if paid_hosts:
                paid += [{**host, "provision": kind} for host in provisioner.paid_hosts()]
        except (OSError, RuntimeError) as exc:  # the others must still tear theirs down
            log.exception("tearing down %s failed", kind)
            errors.append(f"{kind}: {exc}")
    return stopped, paid, errors


def teardown_run(provisioned: dict | None, run_id: str, plan: Plan | dict | None,
                 settings: Settings | None = None) -> dict:
    """The DAG's teardown task: :func:`teardown`, timed; what the publish records of setup
    and teardown (``acquire_s``, ``teardown_s``) and what was stopped. A machine its bench
    task held for the same morning's relaunches is spared (``Provisioner.hold``): it is
    priced to now at publish, its minutes after are the confirmation's."""
    t0 = time.monotonic()
    plan = Plan.from_xcom(plan) if plan is not None else None
    stopped = teardown(provisioned, run_id, settings, plan=plan,
                       spare_held=plan is not None and plan.spec.trends.holds_hosts)
    return {"stopped": stopped, "acquire_s": (provisioned or {}).get("acquire_s"),
            "teardown_s": time.monotonic() - t0}


def release_held(provisioned: dict | None, run_id: str, plan: Plan | dict | None,
                 settings: Settings | None = None) -> list:
    """The release task, after the confirm in every path: each kind paid by the machine
    ends what the run still holds (the machines held for the relaunches that the confirm
    did not release: it failed, was killed, or never ran). What it ended; nothing without a
    plan (nothing was provisioned, so nothing is held)."""
    if plan is None:
        return []
    settings, plan = settings or get_settings(), Plan.from_xcom(plan)
    states = (provisioned or {}).get("kinds") or {}
    stopped, _, errors = _end_each({kind: states.get(kind) for kind in plan.provision_kinds()
                                    if get_provisioner(kind).per_host}, run_id, settings,
                                   paid_hosts=False)
    if stopped:
        log.warning("released what the confirm left held: %s", stopped)
    if errors:
        raise RuntimeError("the release could not end everything: " + "; ".join(errors))
    return stopped


def aggregate_and_publish(plan: Plan | dict, run_id: str, logical_date: dt.datetime | None,
                          dag_id: str, started_at: dt.datetime | None = None,
                          settings: Settings | None = None, torn_down: dict | None = None,
                          nightly: bool = True) -> dict:
    """The publish task (``publish.publish_run``); ``torn_down`` is :func:`teardown_run`'s
    answer (setup and teardown times); ``nightly``: whether the run is a night of its series
    (``trends.series.counts_as_night`` of the DAG run)."""
    settings = settings or get_settings()
    return publish_run(open_store(settings), Plan.from_xcom(plan), run_id, dag_id=dag_id,
                       logical_date=logical_date, started_at=started_at, times=torn_down,
                       nightly=nightly)


def detect(summary: dict, settings: Settings | None = None) -> dict:
    """The detect task: the published night judged against the nights before it, its
    ``changes`` attached (``trends.judge.detect_night``); the summary with its alert counts."""
    return detect_night(summary, settings or get_settings())


def confirm(plan: Plan | dict, summary: dict, settings: Settings | None = None, *,
            dag_id: str = "", try_number: int = 1) -> dict:
    """The confirm task: the night's suspects re-measured the same morning by interleaved
    relaunches on their hosts (``bench.confirm.confirm_night``); the summary with its
    verdict counts and its alert counts after them."""
    return confirm_night(Plan.from_xcom(plan), summary, settings or get_settings(),
                         dag_id=dag_id, try_number=try_number)


def write_report(run_id: str, settings: Settings | None = None) -> str:
    """(Re)write the HTML report of committed run ``run_id`` beside the results; where."""
    settings = settings or get_settings()
    store = open_store(settings)
    return Night.load(store, run_id).put_report(store, airflow_url(settings))


def send_digest(summary: dict, settings: Settings | None = None,
                notifier: Notifier | None = None) -> str:
    """The digest task: the digest and the report kept beside the results, the digest
    announced (``notifier``, default: the deployment's); where it went."""
    settings = settings or get_settings()
    store = open_store(settings)
    return Night.load(store, summary["run_id"]).tell(
        store, notifier or notifier_for(settings), airflow_url=airflow_url(settings))


def run_sweep(sweep: str | None = None, run_id: str | None = None, *,
              on_recipe: Callable[[Unit], None] | None = None,
              on_units: Callable[[Plan], None] | None = None,
              on_unit: Callable[[Unit], None] | None = None,
              on_unit_done: Callable[[Unit], None] | None = None,
              on_cell: Callable[[dict], None] | None = None,
              on_units_done: Callable[[], None] | None = None) -> dict:
    """The nightly DAG's steps in this process, in its order: plan (``SpecError`` before
    anything is provisioned), quantize (each recipe's checkpoint), provision, each host's units (a crashed unit becomes failed
    cells with its error), teardown in every path, publish, detect, confirm, digest. Its runs are a
    history of their own (dag_id ``servebench-cli``), so ad-hoc runs never enter the nightly
    trends. The hooks see the recipes and units go by (``on_recipe`` each recipe's first unit
    before its checkpoint is made or found, ``on_units`` gets the plan before the first,
    ``on_units_done`` comes after the last, whatever happened). Returns the detect step's
    summary with ``stopped`` (what the teardown found left) and ``digest`` (where it went)."""
    now = dt.datetime.now(dt.UTC)
    run_id = run_id or f"cli__{now.isoformat(timespec='seconds')}"
    plan = sized(make_plan(sweep, run_date=now.date()), get_settings())
    quantize_recipes(plan, run_id, on_recipe=on_recipe)
    provisioned = None
    try:
        provisioned = provision(plan, run_id, dag_id=CLI_DAG_ID)
        if on_units:
            on_units(plan)
        try:
            for host in plan.hosts():  # one after another: this process is every host's client
                bench_host(plan, host, provisioned, run_id, dag_id=CLI_DAG_ID, on_unit=on_unit,
                           on_unit_done=on_unit_done, on_cell=on_cell)
        finally:
            if on_units_done:
                on_units_done()
    finally:
        torn_down = teardown_run(provisioned, run_id, plan)
    try:
        summary = aggregate_and_publish(plan, run_id, now, CLI_DAG_ID, started_at=now,
                                        torn_down=torn_down)
        summary = confirm(plan, detect(summary), dag_id=CLI_DAG_ID)
    finally:  # what was held for the relaunches, in every path
        torn_down["stopped"] += release_held(provisioned, run_id, plan)
    return {**summary, "stopped": torn_down["stopped"], "digest": send_digest(summary)}
