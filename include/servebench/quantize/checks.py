"""What the plan checks of a recipe before anything runs, each problem naming its field
(``recipe.group_size``, ...): where the checkpoint can be made and served, the recipe file
(and that its schemes make the variant's ``quant``) and calibration data it reads, and a group
size that divides the base model's dimensions.
Whether the target's engine and hardware can run the format is the stack adapter's to say
(``StackAdapter.local_problems``: vLLM's CPU build)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from servebench.config import SweepSpec, TargetSpec
from servebench.config.formats import file_schemes, scheme_problem
from servebench.config.variants import VariantSpec
from servebench.hub import hub_cache_dir, is_hub_id
from servebench.quantize.inputs import resolve
from servebench.settings import Settings

# the config.json keys whose sizes are a linear layer's input: every group must fit whole
DIMENSIONS = ("hidden_size", "intermediate_size")
# llm-compressor's modifiers that calibrate on data (without it, oneshot dies deep inside:
# "TypeError: 'NoneType' object is not iterable")
CALIBRATING = ("GPTQModifier", "AWQModifier", "SmoothQuantModifier")


def base_config(model: str, settings: Settings, revision: str | None = None) -> dict | None:
    """The base checkpoint's config.json: its folder's, else the Hugging Face cache's copy of
    a hub id (no download); None where this worker has neither."""
    path: Path | None = settings.resolve(model) / "config.json"
    if not path.is_file() and is_hub_id(model):
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(
            model, "config.json", revision=revision,
            cache_dir=os.environ.get("HF_HUB_CACHE") or str(hub_cache_dir() / "hub"))
        path = Path(found) if isinstance(found, str) else None
    if path is None or not path.is_file():
        return None
    return json.loads(path.read_text())


def dimensions(config: dict) -> dict[str, int]:
    """The input sizes of the model's linear layers that config.json names."""
    dims = {key: int(config[key]) for key in DIMENSIONS if isinstance(config.get(key), int)}
    heads, head_dim = config.get("num_attention_heads"), config.get("head_dim")
    if isinstance(heads, int) and isinstance(head_dim, int):
        dims["num_attention_heads x head_dim"] = heads * head_dim  # o_proj's input
    return dims


def recipe_problems(spec: SweepSpec, target: TargetSpec, variant: VariantSpec,
                    settings: Settings) -> tuple[list[str], list[str]]:
    """(problems, warnings) of ``variant``'s recipe, each starting with its field."""
    recipe = variant.recipe
    assert recipe is not None, variant.name
    problems, warnings = [], []
    if target.provision_kind != "local":
        problems.append(f"recipe: its checkpoint is made on this worker, which provision kind "
                        f"{target.provision_kind!r} cannot serve from: point model at a "
                        "quantized checkpoint (a hub id) instead")
    inputs = resolve(spec, variant, settings)
    if inputs.recipe_file is not None:
        try:
            text = inputs.recipe_file.read_text()
            if not isinstance(yaml.safe_load(text), dict):
                problems.append(f"recipe.file: {inputs.recipe_file} is not an llm-compressor "
                                "recipe (a YAML mapping of stages or modifiers)")
            calibrating = [name for name in CALIBRATING if f"{name}:" in text]
            if calibrating and recipe.calibration is None:
                problems.append(f"recipe.calibration: {inputs.recipe_file}'s "
                                f"{', '.join(calibrating)} calibrates on data: name a dataset")
            for scheme in dict.fromkeys(file_schemes(text)):  # a preset's: the spec checks it
                disagree = scheme_problem(scheme, variant.quant)
                if disagree:
                    problems.append(f"recipe.file: {inputs.recipe_file}'s {disagree}")
        except (OSError, yaml.YAMLError) as exc:
            problems.append(f"recipe.file: cannot read {inputs.recipe_file}: {exc}")
    if inputs.calibration is not None:
        problem = _calibration_problem(inputs.calibration)
        if problem:
            problems.append(f"recipe.calibration.dataset: {recipe.calibration.dataset!r} is "
                            f"neither a golden set of this sweep nor {problem}")
    config = base_config(variant.base_model, settings, variant.revision)
    if config is None:
        warnings.append(f"recipe.group_size: not checked against the model's dimensions: "
                        f"{variant.base_model!r} has no config.json on this worker")
    elif recipe.groups:
        uneven = [f"{name} {size}" for name, size in dimensions(config).items()
                  if size % recipe.groups]
        if uneven:
            problems.append(f"recipe.group_size: {recipe.groups} does not divide the model's "
                            f"{', '.join(uneven)} ({variant.base_model}/config.json)")
    return problems, warnings


def _calibration_problem(path: Path) -> str | None:
    """Why ``path`` is no calibration file (None: JSONL rows with text, prompt or messages)."""
    try:
        with path.open() as f:
            first = next((line for line in f if line.strip()), None)
    except OSError as exc:
        return f"a readable file ({exc.strerror}: {path})"
    if first is None:
        return f"a JSONL file with rows ({path} is empty)"
    try:
        row = json.loads(first)
    except ValueError:
        return f"a JSONL file ({path}: its first line is not JSON)"
    if not isinstance(row, dict) or not {"text", "prompt", "messages"} & set(row):
        return f"a JSONL file of rows with text, prompt or messages ({path})"
    return None
