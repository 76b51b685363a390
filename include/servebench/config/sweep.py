"""A whole sweep: its targets, the other modules' sections brought together and the checks
across them (names, references, load points). ``load_sweep`` validates a file and raises
:class:`SpecError` naming the file and the field, before anything launches."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml
from pydantic import Field, ValidationError, model_validator

from servebench.config.base import _Strict
from servebench.config.judging import CrossStackGroup, GateSpec, GoldenSetRef, SLOSpec, TrendsSpec
from servebench.config.load import LoadPoints
from servebench.config.provision import HOSTED_STACKS, Provision
from servebench.config.sampling import SamplingSpec
from servebench.config.variants import VariantSpec, stack_options
from servebench.config.workloads import TraceWorkload, Workload
from servebench.errors import SpecError


class TargetSpec(_Strict):
    """A model served by one stack, in one or more variants; ``baseline`` is the reference.
    ``provision`` says where the servers come from (default: local; static for a hosted
    API)."""

    name: str
    stack: str = Field(description="llama_cpp, transformers, vllm, sglang, tgi, trtllm, "
                                   "openai_api")
    variants: list[VariantSpec] = Field(min_length=1)
    baseline: str | None = Field(None, description="the variant the gate and the levers "
                                                   "compare with (default: the first)")
    golden_sets: list[str] = Field(default_factory=list)
    workloads: list[str] | None = Field(
        None, min_length=1, description="the sweep's workloads (by name) this target's "
        "variants run; default: every one")
    provision: Provision | None = None

    def price_per_hour(self, sweep_price: float) -> float:
        """USD per hour of the host this target runs on: its provision's (ec2: the instance
        type's) where it names one, else the sweep's."""
        own = getattr(self.provision, "price_per_hour", None)
        return sweep_price if own is None else own

    @model_validator(mode="before")
    @classmethod
    def _stack_options(cls, data: object) -> object:
        """Each variant sets only what its stack's options model has (an unknown stack is
        the plan's to report)."""
        if not isinstance(data, dict) or not isinstance(data.get("variants"), list):
            return data
        options = stack_options(str(data.get("stack")))
        if options is None:
            return data
        fields = VariantSpec.model_fields
        for i, variant in enumerate(data["variants"]):
            if isinstance(variant, dict):
                # a knob at its default says nothing (a spec dumped whole and read back)
                lacks = sorted(k for k, v in variant.items() if k not in options.model_fields
                               and not (k in fields and fields[k].get_default(
                                   call_default_factory=True) == v))
                if lacks:
                    raise ValueError(
                        f"variants[{i}](name={variant.get('name')}).{lacks[0]}: stack "
                        f"{data.get('stack')!r} has no option{'s' * (len(lacks) > 1)} "
                        f"{', '.join(lacks)} (its options: {', '.join(options.model_fields)})")
        return data

    @property
    def provision_kind(self) -> str:
        if self.provision is not None:
            return self.provision.kind
        return "static" if self.stack in HOSTED_STACKS else "local"

    @model_validator(mode="after")
    def _check_variants(self) -> TargetSpec:
        names = [v.name for v in self.variants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate variant names {dupes}")
        if self.baseline is not None and self.baseline not in names:
            raise ValueError(f"baseline {self.baseline!r} is not one of the variants {names}")
        kind = self.provision_kind
        if self.stack in HOSTED_STACKS and kind != "static":
            raise ValueError(f"provision.kind {kind!r}: stack {self.stack!r} is a hosted API; "
                             "it can only be provision kind 'static'")
        for variant in self.variants:
            if kind == "static" and variant.endpoint is None:
                raise ValueError(f"variant {variant.name!r} has no endpoint: with provision "
                                 "kind 'static' each variant names the server it measures")
            if kind != "static" and variant.endpoint is not None:
                raise ValueError(f"variant {variant.name!r} sets endpoint, which only a "
                                 f"target with provision kind 'static' uses (this is {kind!r})")
        return self


class SweepSpec(_Strict):
    """A whole sweep: every target x variant x workload x load point, one sampling spec."""

    name: str
    description: str = ""
    sampling: SamplingSpec = SamplingSpec()
    slos: SLOSpec = SLOSpec()
    price_per_hour: float = Field(ge=0, description="USD per hour of the serving host")
    workloads: list[Workload] = Field(min_length=1)
    load: LoadPoints
    golden_sets: list[GoldenSetRef] = Field(default_factory=list)
    gate: GateSpec = GateSpec()
    cross_stack: list[CrossStackGroup] = Field(default_factory=list)
    trends: TrendsSpec = TrendsSpec()
    targets: list[TargetSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_references(self) -> SweepSpec:
        if not self.load.points() and any(not isinstance(w, TraceWorkload)
                                          for w in self.workloads):
            raise ValueError("load: give at least one closed-loop concurrency, open-loop rate, "
                             "max_throughput: true or slo_search (only trace workloads bring "
                             "their own)")
        if self.load.slo_search and not (self.slos.ttft_ms or self.slos.tpot_ms
                                         or self.slos.e2e_ms):
            raise ValueError("load.slo_search: name at least one of slos.ttft_ms, slos.tpot_ms, "
                             "slos.e2e_ms to search within")
        for kind, names in (
            ("workload", [w.name for w in self.workloads]),
            ("target", [t.name for t in self.targets]),
            ("golden set", [g.name for g in self.golden_sets]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"duplicate {kind} names {dupes}")
        variants = {f"{t.name}/{v.name}" for t in self.targets for v in t.variants}
        for group in self.cross_stack:
            unknown = [m for m in group.members if m not in variants]
            if unknown:
                raise ValueError(f"cross_stack group {group.name!r} names {unknown}, which are "
                                 f"not target/variant pairs of this sweep")
        defined = {w.name for w in self.workloads}
        for target in self.targets:
            unknown = [w for w in target.workloads or [] if w not in defined]
            if unknown:
                raise ValueError(f"target {target.name!r} names workloads {unknown} that the "
                                 f"sweep does not define (defined: {sorted(defined)})")
        known = {g.name for g in self.golden_sets}
        for target in self.targets:
            missing = [g for g in target.golden_sets if g not in known]
            if missing:
                raise ValueError(
                    f"target {target.name!r} names golden sets {missing} that the sweep does not "
                    f"define (defined: {sorted(known)})"
                )
        return self

    def spec_hash(self) -> str:
        """What the runs measured: how their history is judged (``trends``) is not part of
        it, so raising the alert floor is not a sweep change that breaks comparability."""
        payload = json.dumps(self.model_dump(mode="json", exclude={"trends"}),
                             sort_keys=True).encode()
        return hashlib.sha256(payload).hexdigest()[:16]

    def workloads_for(self, target: str) -> list[Workload]:
        """The workloads target ``target``'s variants run, in the sweep's order."""
        chosen = self.target(target).workloads
        return [w for w in self.workloads if chosen is None or w.name in chosen]

    def golden_set(self, name: str) -> GoldenSetRef:
        return next(g for g in self.golden_sets if g.name == name)

    def target(self, name: str) -> TargetSpec:
        return next(t for t in self.targets if t.name == name)


def _field_path(loc: tuple, data: object) -> str:
    """Turn a pydantic error location into ``targets[0](name=x).variants[1].quant``."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node):
                node = node[item]
                if isinstance(node, dict) and "name" in node:
                    label += f"(name={node['name']})"
            parts.append(label)
        else:
            # discriminated unions put the tag ('fixed') in the location: it is no field
            if isinstance(node, dict) and node.get("kind") == item and item not in node:
                continue
            node = node.get(item) if isinstance(node, dict) else None
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "<root>"


def parse_sweep(data: object, source: str) -> SweepSpec:
    """Validate a loaded YAML/JSON document; errors name ``source`` and every bad field."""
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: invalid sweep spec ({exc.error_count()} error(s))"]
        for err in exc.errors():
            lines.append(f"  {source}: field {_field_path(err['loc'], data)}: {err['msg']}")
        raise SpecError("\n".join(lines)) from None


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read sweep spec: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    return parse_sweep(data, str(path))
