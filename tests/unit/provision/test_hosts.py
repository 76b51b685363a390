"""Hosts: the machine a target's units run on. A host's units run one after another; a paid
machine (``per_host``) is acquired when its first unit is due and released after its last, in
every path; a crashed unit is kept as its failed cells and the next one runs."""

import datetime as dt
from typing import ClassVar

import pytest
import yaml
from servebench import pipeline
from servebench.bench import confirm as confirm_module
from servebench.bench import host as bench_host_module
from servebench.bench.confirm import Relaunched, remeasure
from servebench.config import load_sweep
from servebench.plan import Plan, Unit, unit_id
from servebench.provision import get_provisioner
from servebench.provision.interface import REGISTRY, Provisioner, host_session
from servebench.publish import keep_unit_rows, unit_failed_cells
from servebench.results.store import ResultStore
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.trends.confirm import Session


def _spec(tmp_path, targets: list[dict]):
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["cross_stack"] = []
    data["targets"] = [{"golden_sets": [], "stack": "llama_cpp",
                        "variants": [{"name": "a", "model": "m"}, {"name": "b", "model": "m"}],
                        **t} for t in targets]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_sweep(path)


EC2 = {"kind": "ec2", "instance_type": "g6.xlarge", "ami": "ami-1"}


def test_each_paid_instance_is_a_host_and_local_targets_share_this_machine(tmp_path):
    spec = _spec(tmp_path, [{"name": "l1"}, {"name": "l2"},
                            {"name": "g1", "provision": EC2}, {"name": "g2", "provision": EC2},
                            {"name": "k1", "provision": {"kind": "kubernetes"}}])
    keys = {t.name: get_provisioner(t.provision_kind).host_key(t) for t in spec.targets}
    assert keys == {"l1": "local", "l2": "local", "g1": "ec2:g1", "g2": "ec2:g2",
                    "k1": "kubernetes:k1"}
    plan = _plan(spec, "fake")
    units = [u.unit_id for u in plan.units]
    assert plan.hosts() == ["local", "ec2:g1", "ec2:g2", "kubernetes:k1"]
    assert [u.unit_id for u in plan.units_on("local")] == units[:4]  # in the plan's order
    assert [u.unit_id for u in plan.units_on("ec2:g2")] == ["g2--a", "g2--b"]


def _plan(spec, kind: str) -> Plan:
    units = [Unit(target=t.name, variant=v.name, stack=t.stack, provision=kind,
                  unit_id=unit_id(t.name, v.name),
                  host=get_provisioner(t.provision_kind).host_key(t))
             for t in spec.targets for v in t.variants]
    return Plan(sweep_file="sweep.yaml", run_date=dt.date(2026, 12, 4), spec=spec,
                sweep_hash=spec.spec_hash(), sampling_hash=spec.sampling.spec_hash(),
                prompt_seed=1, units=units, n_cells=0)


class PaidMachines(Provisioner):
    """A kind that pays by the machine: records what it was asked, in order."""

    kind = "paid-test"
    per_host = True
    calls: list = []
    gone: ClassVar[set] = set()  # targets whose machine is no longer held

    def __init__(self, state):
        self.state = state

    @classmethod
    def acquire(cls, run_id, targets, settings, *, dag_id=""):
        cls.calls.append(("acquire", [t.name for t in targets]))
        return {t.name: {"machine": f"m-{t.name}"} for t in targets}

    @classmethod
    def attach(cls, run_id, state, settings):
        return cls(state)

    @classmethod
    def held(cls, run_id, state, targets, settings):
        cls.calls.append(("held", [t.name for t in targets]))
        return cls({t.name: {"machine": f"m-{t.name}"} for t in targets
                    if t.name not in cls.gone})

    def host_problem(self, target):
        return None if target.name in self.state else "no host held: it was released"

    def hold(self, targets):
        self.calls.append(("hold", [t.name for t in targets]))
        return [self.state[t.name]["machine"] for t in targets]

    def release(self, targets):
        self.calls.append(("release", [t.name for t in targets]))
        return [self.state[t.name]["machine"] for t in targets if t.name in self.state]

    def launch(self, name, target, variant, adapter):
        raise NotImplementedError

    def stop(self, endpoint):
        raise NotImplementedError

    def hardware(self, target):
        return "test machine"

    def teardown(self, *, spare_held=False):
        self.calls.append(("teardown", "spare held" if spare_held else "all"))
        return []


@pytest.fixture
def paid(monkeypatch):
    monkeypatch.setitem(REGISTRY, PaidMachines.kind, PaidMachines)
    PaidMachines.calls, PaidMachines.gone = [], set()
    return PaidMachines


def test_a_per_host_machine_is_released_in_every_path(tmp_path, paid):
    [target] = _spec(tmp_path, [{"name": "g1"}]).targets
    with host_session(paid, "r", {"g1": {"where": "x"}}, [target], get_settings()) as held:
        assert held.state == {"g1": {"machine": "m-g1"}}  # the setup's state, then the host's
    with pytest.raises(RuntimeError, match="mid-unit"):
        with host_session(paid, "r", None, [target], get_settings()):
            raise RuntimeError("mid-unit")
    assert paid.calls == [("acquire", ["g1"]), ("release", ["g1"])] * 2


def test_a_held_machine_outlives_its_units_until_the_confirm_releases_it(tmp_path, paid,
                                                                        monkeypatch):
    spec = _spec(tmp_path, [{"name": "g1"}, {"name": "g2"}, {"name": "g3"}])
    with host_session(paid, "r", None, spec.targets[:1], get_settings(), hold=True):
        pass
    # kept for the same morning's relaunches
    assert paid.calls == [("acquire", ["g1"]), ("hold", ["g1"])]
    monkeypatch.setattr(confirm_module, "get_provisioner", lambda kind: paid)
    relaunched = []
    monkeypatch.setattr(confirm_module, "relaunch", lambda plan, session, provisioner, *a,
                        **k: relaunched.append(session.target) or Relaunched(seconds=1.0))
    paid.calls, paid.gone = [], {"g3"}
    out = remeasure(_plan(spec, paid.kind), [Session("g2", "b", "a"), Session("g3", "b", "a")],
                    "r", get_settings(), launches=3)
    # g1 has nothing to re-measure: released before the others' relaunches, which run on
    # the machines held for them and release each once its own are done
    assert paid.calls == [("held", ["g1"]), ("release", ["g1"]), ("held", ["g2"]),
                          ("release", ["g2"]), ("held", ["g3"]), ("release", ["g3"])]
    assert relaunched == ["g2"] and out[("g2", "b")].seconds == 1.0
    # a machine no longer held: its suspects say why, nothing relaunched
    assert out[("g3", "b")].failure == "no host held: it was released"


def test_the_teardown_spares_what_is_held_and_the_release_ends_it(tmp_path, paid,
                                                                  monkeypatch):
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    monkeypatch.setattr(pipeline, "get_provisioner", lambda kind: paid)
    spec = _spec(tmp_path, [{"name": "g1"}])
    plan = _plan(spec, paid.kind)
    provisioned = {"kinds": {paid.kind: {}}}
    pipeline.teardown_run(provisioned, "r", plan.to_xcom())
    pipeline.release_held(provisioned, "r", plan.to_xcom())
    assert paid.calls == [("teardown", "spare held"), ("teardown", "all")]
    # a sweep that does not confirm holds nothing: its teardown ends everything
    paid.calls = []
    quiet = plan.model_copy(update={"spec": spec.model_copy(update={
        "trends": spec.trends.model_copy(update={"confirm": None})})})
    pipeline.teardown_run(provisioned, "r", quiet)
    assert paid.calls == [("teardown", "all")]


def test_a_run_wide_kind_is_only_attached(tmp_path, monkeypatch):
    [target] = _spec(tmp_path, [{"name": "l1"}]).targets
    cls = get_provisioner("local")
    monkeypatch.setattr(cls, "acquire", classmethod(lambda *a, **k: pytest.fail("acquired")))
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    with host_session(cls, "r", None, [target], get_settings()) as held:
        assert held.state_dir == tmp_path / "runs" / "r"


def test_a_host_runs_its_units_in_turn_keeps_a_crash_and_a_retry_skips_what_was_kept(
        tmp_path, paid, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    plan = _plan(_spec(tmp_path, [{"name": "g1", "provision": EC2},
                                  {"name": "g2", "provision": EC2}]), paid.kind)
    ran, tries = [], []

    def bench_unit(plan, unit, provisioner, run_id, settings, store, on_cell=None,
                   try_number=1):
        ran.append(unit.unit_id)
        tries.append(try_number)
        assert unit.target in provisioner.state  # on its host's machine
        if unit.unit_id == "g1--a":
            raise RuntimeError("engine fell over")
        keep_unit_rows(store, plan, unit, run_id, {
            "cells": unit_failed_cells(plan, unit, run_id, "kept by the stand-in unit")})
        return {"cells": 1}

    monkeypatch.setattr(bench_host_module, "bench_unit", bench_unit)
    summary = pipeline.bench_host(plan.to_xcom(), "ec2:g1", {"kinds": {}}, "run-1")
    assert ran == ["g1--a", "g1--b"]  # the crash did not stop the host's next unit
    assert summary["units"]["g1--a"] == {
        "failed": "the bench task failed: RuntimeError: engine fell over"}
    # g2 not acquired; g1 held past its units for the same morning's relaunches (the
    # sweep confirms: trends.confirm's default)
    assert paid.calls == [("acquire", ["g1"]), ("hold", ["g1"])]
    store = ResultStore(str(tmp_path / "data"))
    crashed = store.read_scratch("run-1")["g1--a"]["cells"].to_pylist()
    assert {c["status"] for c in crashed} == {"failed"}
    assert "RuntimeError: engine fell over" in crashed[0]["reason"]
    # a retried task: both units are kept, so nothing runs and nothing is acquired
    ran.clear()
    assert pipeline.bench_host(plan, "ec2:g1", None, "run-1")["units"] == {}
    assert ran == [] and len(paid.calls) == 2
    # a host whose first try kept nothing (its worker died mid-unit): the retry runs every
    # unit in its own try, so each draws prompts of its own (workloads.prompt_key)
    assert tries == [1, 1]
    pipeline.bench_host(plan, "ec2:g2", None, "run-1", try_number=2)
    assert ran == ["g2--a", "g2--b"] and tries == [1, 1, 2, 2]
