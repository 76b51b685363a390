"""The rows one unit makes: each cell's identity, the row every cell starts from, failed cells,
cost, and the quality number every perf row carries (or the reason it has none).

Whatever happens to a unit, it returns rows: a variant that fails to launch becomes failed cells
with the reason; a cell that raises becomes one failed cell; a cell without a quality number is
invalid.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from servebench.config import LoadPoint, SweepSpec, TargetSpec, VariantSpec
from servebench.cost import cost_fields
from servebench.endpoint import Endpoint
from servebench.loadgen.modes import LOAD_MODES
from servebench.provenance import file_sha256, measuring_code
from servebench.provision.interface import Provisioner
from servebench.settings import Settings
from servebench.stacks.adapter import StackAdapter


@dataclass
class VariantResult:
    """Rows for the ``cells``, ``requests`` and ``evals`` tables from one variant."""

    cells: list[dict] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    unit: dict = field(default_factory=dict)  # the ``units`` row: where, phase times


def length_control(exact: bool) -> str:
    """A cell's ``length_control``: ``exact`` (every answer as long as the workload asked) or
    ``natural`` (answers end where the model ends them, capped at that length: a stack that
    cannot force lengths). Natural cells are compared only with their own history."""
    return "exact" if exact else "natural"


def cell_identity(spec: SweepSpec, target: TargetSpec, variant: VariantSpec, workload: str,
                  point: LoadPoint) -> dict:
    """The cells columns that say which cell a row is -- the same for a measured cell, one that
    failed on the host and one whose bench task left nothing (``pipeline``)."""
    return {
        "cell_id": cell_id(target.name, variant.name, workload, point),
        "target": target.name, "stack": target.stack, "variant": variant.name,
        "model": variant.base_model, "quant": variant.quant,
        "recipe_hash": variant.quantized.recipe_hash if variant.quantized else None,
        "workload": workload, "load_point": point.label, "load_mode": point.mode,
        "concurrency": point.concurrency, "request_rate": point.request_rate,
        "arrival": spec.load.arrival if LOAD_MODES[point.mode].drawn_arrivals else None,
        "sampling_hash": spec.sampling.spec_hash(),
        "price_per_hour": target.price_per_hour(spec.price_per_hour),
    }


def cell_id(target: str, variant: str, workload: str, point: LoadPoint) -> str:
    return f"{target}/{variant}/{workload}/{point.label}"


def failed_cell(row: dict, reason: str) -> dict:
    """A cell row that measured nothing: its identity (``cell_identity`` and what else is
    known), failed, with why. Every failed cell is made here."""
    return {**row, "status": "failed", "reason": reason}


class UnitRows:
    """A unit's rows as they are made: what every cell row says of where and on what it ran,
    the failed cells, each row's cost, and the quality number the golden set gives them all."""

    def __init__(self, spec: SweepSpec, target: TargetSpec, variant: VariantSpec, *,
                 settings: Settings, provisioner: Provisioner, adapter: StackAdapter,
                 on_cell: Callable[[dict], None] | None = None):
        self.spec, self.target, self.variant = spec, target, variant
        self.settings, self.provisioner, self.adapter = settings, provisioner, adapter
        self.on_cell = on_cell  # told of each cell row as it is made (progress bars)
        self.hardware = provisioner.hardware(target)
        self.price_per_hour = provisioner.price_per_hour(target, spec.price_per_hour)
        self.result = VariantResult()
        self.endpoint: Endpoint | None = None  # the variant's server, while it is measured
        self.engine_version: str | None = None  # set as the unit starts, and once launched

    def base_row(self, workload: str, point: LoadPoint, argv: list[str] | None) -> dict:
        # a recipe variant's series is its base model's: its recipe_hash names the rest
        model_path = self.settings.resolve(self.variant.base_model)
        return {
            **cell_identity(self.spec, self.target, self.variant, workload, point),
            "price_per_hour": self.price_per_hour,  # the host's it ran on
            "engine": self.adapter.engine,
            "engine_version": self.engine_version,
            "engine_notes": self.engine_notes(),
            "launch_args": json.dumps(argv) if argv else None,
            **(self.provisioner.placement(self.endpoint) if self.endpoint is not None
               else {}),
            "model_file_sha256": file_sha256(model_path),
            "measuring_code": measuring_code(type(self.adapter), type(self.provisioner)),
            "hardware": self.hardware,
        }

    def engine_notes(self) -> str | None:
        """What the cells' numbers cannot show about the engine: the stack's known limits,
        and a version outside the releases its adapter was checked against."""
        notes = self.adapter.known_limits(self.variant, self.spec.sampling)
        outside = self.adapter.version_problem(self.engine_version)
        if outside:
            notes.append(outside)
        return "; ".join(notes) or None

    def failed_cells(self, reason: str, argv: list[str] | None) -> None:
        for workload in self.spec.workloads_for(self.target.name):
            for point in self.spec.load.points_for(workload):
                self.failed_cell(workload.name, point, argv, reason)

    def failed_cell(self, workload: str, point: LoadPoint, argv: list[str] | None,
                    reason: str) -> None:
        self.add_cell(failed_cell(self.base_row(workload, point, argv), reason))

    def add_cell(self, row: dict) -> None:
        self.result.cells.append(row)
        if self.on_cell is not None:
            self.on_cell(row)

    def keep(self, row: dict, requests: list[dict]) -> None:
        """A measured cell: its row and its requests' rows."""
        self.add_cell(row)
        self.result.requests.extend(requests)

    def without_quality(self, reason: str) -> None:
        """Every perf number travels with a quality number: without one a measured cell is
        invalid, this reason added to any it already had (a failed cell keeps its own)."""
        for row in self.result.cells:
            if row.get("status") in ("ok", "invalid"):
                row.update(status="invalid", reason="; ".join(filter(None, [
                    row.get("reason"), f"no quality number: {reason}"])))

    def cost(self, row: dict) -> dict:
        return cost_fields(price_per_hour=self.price_per_hour,
                           duration_s=row["duration_s"],
                           output_tokens=row["output_tokens_total"], n_ok=row["n_ok"],
                           accuracy=row.get("accuracy"))
