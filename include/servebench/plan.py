"""The plan: a sweep spec checked against everything it names and expanded into units.

A **unit** is one (target, variant): one server launched, every cell of the sweep's workloads and
load points measured on it, its golden sets run, the server stopped. A **host** is the machine a
unit runs on (``Provisioner.host_key``): a host's units run one after another in one mapped bench
task of the DAG, and different hosts' tasks run side by side. The plan is made once, by the plan
task, before anything is provisioned (a problem is a ``PlanError`` naming the file and the field);
the tasks after it receive it as JSON (``Plan.to_xcom``) and read it back typed
(``Plan.from_xcom``).
"""

from __future__ import annotations

import datetime as dt
import logging

from pydantic import BaseModel, ConfigDict

from servebench.config import LongContextWorkload, SweepSpec, TargetSpec, VariantSpec, load_sweep
from servebench.config.quantize import QuantizedCheckpoint
from servebench.connections import store_problems
from servebench.errors import GoldenSetError, PlanError
from servebench.evals.golden import load_golden_set
from servebench.provision import get_provisioner
from servebench.quantize.checks import recipe_problems
from servebench.quantize.inputs import checkpoint_for
from servebench.settings import Settings, get_settings
from servebench.stacks import get_stack
from servebench.tokenizer import tokenizer_problem
from servebench.workloads import (
    TEMPLATE_OVERHEAD_MAX,
    draw_prompt_seed,
    long_context_tokens,
    max_sequence_tokens,
)

log = logging.getLogger(__name__)


def unit_id(target: str, variant: str) -> str:
    return f"{target}--{variant}"


# how the reason of a refused unit's cells begins (``Unit.refused``)
REFUSED = "refused at plan: "


class Unit(BaseModel):
    """One (target, variant) of the plan: a server brought up once, its cells measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    variant: str
    stack: str
    provision: str  # the target's provision kind
    unit_id: str
    host: str  # the machine it runs on (``Provisioner.host_key``): one unit at a time there
    # a recipe variant's checkpoint, made by the quantize step (``servebench.quantize``)
    quantized: QuantizedCheckpoint | None = None
    # why the plan refused it (``Provisioner.refusals``: this worker's hardware cannot run
    # it): never launched nor quantized, its cells stored failed with this reason
    refused: str | None = None


class Plan(BaseModel):
    """A sweep ready to run: its spec, validated, and its units; what every task after the
    plan task is given."""

    model_config = ConfigDict(extra="forbid")

    sweep_file: str
    run_date: dt.date  # the logical date's day (UTC): partitions every row of the run
    spec: SweepSpec
    sweep_hash: str
    sampling_hash: str
    prompt_seed: int  # the run's prompts (workloads.prompt_key); a release gate's reps share it
    units: list[Unit]
    n_cells: int
    warnings: list[str] = []
    # cell id -> its measured request count where ``load.auto_requests`` sized it away from
    # its workload's (``trends.sizing.size_night``); a cell not here sends its workload's
    requests: dict[str, int] = {}
    gate: dict | None = None  # a release gate's params (``release_gate``), where it is one

    def to_xcom(self) -> dict:
        """The plan as JSON for the tasks after it."""
        return self.model_dump(mode="json")

    @classmethod
    def from_xcom(cls, value: Plan | dict) -> Plan:
        return value if isinstance(value, Plan) else cls.model_validate(value)

    def unit(self, unit_id_: str) -> Unit:
        return next(u for u in self.units if u.unit_id == unit_id_)

    def target_of(self, unit: Unit) -> TargetSpec:
        return self.spec.target(unit.target)

    def variant_of(self, unit: Unit) -> VariantSpec:
        """The unit's variant as it is launched: a recipe variant's ``model`` is its quantized
        checkpoint (``quantized`` keeps the base and the recipe's hash)."""
        variant = next(v for v in self.target_of(unit).variants if v.name == unit.variant)
        return variant if unit.quantized is None else variant.launching(unit.quantized)

    def hosts(self) -> list[str]:
        """The hosts the units run on, in the plan's order (one bench task each)."""
        return list(dict.fromkeys(u.host for u in self.units))

    def units_on(self, host: str) -> list[Unit]:
        return [u for u in self.units if u.host == host]

    def provision_kinds(self) -> list[str]:
        return sorted({t.provision_kind for t in self.spec.targets})

    def expected_cells(self) -> list[tuple[str, str, str, str]]:
        """(target, variant, workload, load point) of every cell the run must publish."""
        return [(u.target, u.variant, w.name, p.label) for u in self.units
                for w in self.spec.workloads_for(u.target)
                for p in self.spec.load.points_for(w)]


def make_plan(sweep: str | None = None, run_date: dt.date | None = None,
              settings: Settings | None = None) -> Plan:
    """Validate the sweep and everything it names (stacks, provisioners, tokenizers, lengths,
    golden sets, the result store); expand it to units. Every problem is raised at once."""
    settings = settings or get_settings()
    path = settings.resolve(sweep or settings.sweep)
    return plan_spec(load_sweep(path), str(path), run_date=run_date, settings=settings)


def plan_spec(spec: SweepSpec, path: str, *, run_date: dt.date | None = None,
              settings: Settings | None = None, gate: dict | None = None) -> Plan:
    """:func:`make_plan` of a spec already read (``path``: where it came from, for the
    messages); ``gate``: the release gate's params, for a gate's narrowed spec."""
    settings = settings or get_settings()
    problems, warnings, refused = _problems(spec, path, settings)
    if problems:
        raise PlanError(f"{path}: sweep cannot run:\n  " + "\n  ".join(problems))
    units = [Unit(target=t.name, variant=v.name, stack=t.stack, provision=t.provision_kind,
                  unit_id=unit_id(t.name, v.name),
                  host=get_provisioner(t.provision_kind).host_key(t),
                  quantized=checkpoint_for(spec, v, settings) if v.recipe else None,
                  refused=refused.get((t.name, v.name)))
             for t in spec.targets for v in t.variants]
    n_cells = sum(len(spec.load.points_for(w))
                  for u in units for w in spec.workloads_for(u.target))
    log.info("plan: %d units on %d hosts, %d cells from %s", len(units),
             len({u.host for u in units}), n_cells, path)
    for warning in warnings:
        log.warning("plan: %s", warning)
    return Plan(sweep_file=str(path), run_date=run_date or dt.datetime.now(dt.UTC).date(),
                spec=spec, sweep_hash=spec.spec_hash(),
                sampling_hash=spec.sampling.spec_hash(),
                prompt_seed=draw_prompt_seed(spec.load.prompt_seed), units=units,
                n_cells=n_cells, warnings=warnings, gate=gate)


def _problems(spec: SweepSpec, path: str, settings: Settings
              ) -> tuple[list[str], list[str], dict[tuple[str, str], str]]:
    """(problems, warnings, refused) of a sweep, each naming the file and the field; refused:
    per (target, variant), why this worker's hardware cannot run it (also a warning)."""
    problems, longest, warnings, refused = [], {}, [], {}
    for w_idx, workload in enumerate(spec.workloads):
        try:
            longest[workload.name] = max_sequence_tokens(workload, settings.project_root)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: field workloads[{w_idx}](name={workload.name}): {exc}")
    for t_idx, target in enumerate(spec.targets):
        where = f"{path}: field targets[{t_idx}](name={target.name})"
        try:
            adapter = get_stack(target.stack)
        except KeyError as exc:
            problems.append(f"{where}.stack: {exc.args[0]}")
            continue
        for problem in adapter.sampling_problems(spec.sampling):
            problems.append(f"{path}: field sampling: {target.stack} (target {target.name}): "
                            f"{problem}")
        provisioner = get_provisioner(target.provision_kind)
        for problem in provisioner.check_target(target, settings):
            problems.append(f"{where}: {problem}")
        for v_idx, variant in enumerate(target.variants):
            at = f"{where}.variants[{v_idx}](name={variant.name})"
            for problem in provisioner.check(target, variant, adapter, settings):
                problems.append(f"{at}: {target.stack}: {problem}")
            refusals = provisioner.refusals(target, variant, adapter, settings)
            if refusals:
                refused[(target.name, variant.name)] = REFUSED + "; ".join(refusals)
                warnings.append(f"{at}: {target.stack}: refused, its cells stored failed: "
                                + "; ".join(refusals))
            if variant.recipe is not None:
                bad, doubts = recipe_problems(spec, target, variant, settings)
                problems += [f"{at}.{problem}" for problem in bad]
                warnings += [f"{at}.{doubt}" for doubt in doubts]
            if not adapter.forces_length(variant):
                warnings.append(
                    f"{at}: {target.stack} cannot force exact output lengths "
                    f"({adapter.natural_length_reason}): its perf cells run at natural length "
                    "(length_control natural), compared only with their own history")
            problem = tokenizer_problem(target.stack, adapter.tokenize_api,
                                        variant.tokenizer or variant.model,
                                        settings.project_root, variant.revision)
            if problem:
                problems.append(f"{at}.tokenizer: {problem}")
            outside = adapter.image_problem(variant.image) if variant.image else None
            if outside:  # it may well run; what it does with our flags is unchecked
                warnings.append(f"{at}.image: {variant.image}: {outside}")
            runs = {w.name for w in spec.workloads_for(target.name)}
            for workload in spec.workloads_for(target.name):
                if isinstance(workload, LongContextWorkload):
                    try:
                        long_context_tokens(workload, variant.max_model_len)
                    except ValueError as exc:
                        problems.append(f"{at}.max_model_len: {exc}")
            for name, tokens in longest.items():
                if name in runs and tokens is not None \
                        and tokens + TEMPLATE_OVERHEAD_MAX > variant.max_model_len:
                    problems.append(
                        f"{at}.max_model_len: {variant.max_model_len} is too short for workload "
                        f"{name!r} ({tokens} tokens plus the chat template)")
    for g_idx, ref in enumerate(spec.golden_sets):
        try:
            load_golden_set(settings.resolve(ref.path))
        except GoldenSetError as exc:
            problems.append(f"{path}: field golden_sets[{g_idx}](name={ref.name}).path: {exc}")
    problems += store_problems(settings)
    return problems, warnings, refused
