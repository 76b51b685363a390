"""Hosts: the machine a target's units run on. A host's units run one after another; a paid
machine (``per_host``) is acquired when its first unit is due and released after its last, in
every path; a crashed unit is kept as its failed cells and the next one runs."""

import datetime as dt

import pytest
import yaml
from servebench import pipeline
from servebench.bench import host as bench_host_module
from servebench.config import load_sweep
from servebench.plan import Plan, Unit, unit_id
from servebench.provision import get_provisioner
from servebench.provision.interface import REGISTRY, Provisioner, host_session
from servebench.publish import keep_unit_rows, unit_failed_cells
from servebench.results.store import ResultStore
from servebench.settings import PROJECT_ROOT, get_settings


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

    def __init__(self, state):
        self.state = state

    @classmethod
    def acquire(cls, run_id, targets, settings, *, dag_id=""):
        cls.calls.append(("acquire", [t.name for t in targets]))
        return {t.name: {"machine": f"m-{t.name}"} for t in targets}

    @classmethod
    def attach(cls, run_id, state, settings):
        return cls(state)

    def release(self, targets):
        self.calls.append(("release", [t.name for t in targets]))
        return [self.state[t.name]["machine"] for t in targets]

    def launch(self, name, target, variant, adapter):
        raise NotImplementedError

    def stop(self, endpoint):
        raise NotImplementedError

    def hardware(self, target):
        return "test machine"

    def teardown(self):
        return []


@pytest.fixture
def paid(monkeypatch):
    monkeypatch.setitem(REGISTRY, PaidMachines.kind, PaidMachines)
    PaidMachines.calls = []
    return PaidMachines


def test_a_per_host_machine_is_released_in_every_path(tmp_path, paid):
    [target] = _spec(tmp_path, [{"name": "g1"}]).targets
    with host_session(paid, "r", {"g1": {"where": "x"}}, [target], get_settings()) as held:
        assert held.state == {"g1": {"machine": "m-g1"}}  # the setup's state, then the host's
    with pytest.raises(RuntimeError, match="mid-unit"):
        with host_session(paid, "r", None, [target], get_settings()):
            raise RuntimeError("mid-unit")
    assert paid.calls == [("acquire", ["g1"]), ("release", ["g1"])] * 2


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
    assert paid.calls == [("acquire", ["g1"]), ("release", ["g1"])]  # g2 not acquired
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
