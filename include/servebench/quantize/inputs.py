"""What a recipe's checkpoint is made from, and the hash that names it.

A recipe variant's checkpoint lives in ``$SERVEBENCH_CACHE/quantized/<recipe_hash>/``; the
hash covers everything the output depends on: the base checkpoint's files (``provenance.
file_sha256``: weights, configs, tokenizer; a hub id not on disk by its id and revision), the
recipe's canonical JSON, the recipe file's bytes, the calibration data's bytes, the tools (the
pins of requirements-quant.txt) and the script that drives them (``oneshot.py``). A change to
any of them makes the checkpoint anew and moves the cells' ``recipe_hash``, which trends
attribution names as a cause; nothing else does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from servebench.config import SweepSpec
from servebench.config.quantize import QuantizedCheckpoint, RecipeSpec
from servebench.config.variants import VariantSpec
from servebench.hub import is_hub_id
from servebench.provenance import file_sha256
from servebench.settings import Settings

ONESHOT = Path(__file__).with_name("oneshot.py")
REQUIREMENTS = "requirements-quant.txt"
HASH_CHARS = 16


@dataclass(frozen=True)
class RecipeInputs:
    """A recipe variant's inputs, resolved on this worker."""

    base: str  # a checkpoint folder (absolute) or a hub id
    recipe: RecipeSpec
    revision: str | None
    recipe_file: Path | None
    calibration: Path | None


def resolve(spec: SweepSpec, variant: VariantSpec, settings: Settings) -> RecipeInputs:
    """The files ``variant``'s recipe reads: its base checkpoint, recipe file and calibration
    data (a golden set of ``spec`` by name, else a path)."""
    recipe = variant.recipe
    assert recipe is not None, variant.name
    local = settings.resolve(variant.base_model)
    base = variant.base_model if is_hub_id(variant.base_model) else str(local)
    calibration = None
    if recipe.calibration is not None:
        name = recipe.calibration.dataset
        known = {g.name: g.path for g in spec.golden_sets}
        calibration = settings.resolve(known.get(name, name))
    return RecipeInputs(base=base, recipe=recipe, revision=variant.revision,
                        recipe_file=settings.resolve(recipe.file) if recipe.file else None,
                        calibration=calibration)


def _bytes_sha256(path: Path | None) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else None


def tool_pins(settings: Settings) -> list[str]:
    """The pinned packages of the quantization venv (requirements-quant.txt's lines)."""
    try:
        text = (settings.project_root / REQUIREMENTS).read_text()
    except FileNotFoundError:
        return []
    return sorted(line.split("#", 1)[0].strip() for line in text.splitlines()
                  if line.split("#", 1)[0].strip())


def recipe_hash(inputs: RecipeInputs, settings: Settings) -> str:
    """The hash of everything a recipe's output depends on (the module doc)."""
    base_files = file_sha256(Path(inputs.base)) if Path(inputs.base).exists() else None
    payload = {
        "base": base_files or f"hub:{inputs.base}@{inputs.revision or 'main'}",
        "recipe": inputs.recipe.model_dump(mode="json"),
        "recipe_file": _bytes_sha256(inputs.recipe_file),
        "calibration": _bytes_sha256(inputs.calibration),
        "tools": tool_pins(settings),
        "script": _bytes_sha256(ONESHOT),
    }
    text = json.dumps(payload, sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:HASH_CHARS]


def checkpoint_for(spec: SweepSpec, variant: VariantSpec, settings: Settings
                   ) -> QuantizedCheckpoint:
    """Where ``variant``'s recipe puts its checkpoint, named by the hash of its inputs."""
    inputs = resolve(spec, variant, settings)
    digest = recipe_hash(inputs, settings)
    return QuantizedCheckpoint(base=variant.base_model, recipe_hash=digest,
                               path=str(settings.cache / "quantized" / digest))
