"""A variant's quantization recipe: how its checkpoint is made from the base model it names
(``model``), by llm-compressor's ``oneshot`` in the quantization venv
(``servebench.quantize``).

A recipe is data teams already keep, in one of two forms:

* a preset: a scheme of compressed-tensors' preset table (``W4A16``, ``W4A16_ASYM``, ``W8A8``,
  ``W8A16``, ``FP8``, ``FP8_DYNAMIC``: ``config.formats.SCHEMES``) applied by a method
  (``gptq``, ``awq``, ``rtn``: round to nearest, llm-compressor's ``QuantizationModifier``;
  ``smoothquant+gptq``: SmoothQuant's smoothing, then GPTQ), a group size for the group-wise
  schemes, and what stays unquantized::

      recipe: {scheme: W4A16, method: gptq, group_size: 128, ignore: [lm_head],
               calibration: {dataset: addition, samples: 256, seq_len: 64}}

* an llm-compressor recipe file (YAML, the modifiers it names applied as written)::

      recipe: {file: include/recipes/w8a8.yaml, calibration: {dataset: addition}}

Calibration data is a golden set of the sweep (by name) or a JSONL file (each line a
``text``, a ``prompt``, or chat ``messages``; a golden item's ``reference`` is appended as the
answer). ``QuantizedCheckpoint`` is what the plan makes of a recipe: where its output lives.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from servebench.config.base import _Strict
from servebench.config.formats import METHODS, SCHEME_BY_NAME, SCHEMES

# the table's preset schemes and methods (``config.formats``: a new one is a row there)
Scheme = Literal[tuple(s.name for s in SCHEMES)]  # type: ignore[valid-type]
Method = Literal[METHODS]  # type: ignore[valid-type]
# the methods that fit a scheme, in the table's order
METHOD_SCHEMES: dict[str, tuple[str, ...]] = {
    method: tuple(s.name for s in SCHEMES if method in s.methods) for method in METHODS}


class CalibrationSpec(_Strict):
    """The data a recipe calibrates on: a golden set of the sweep by name, or a JSONL path."""

    dataset: str = Field(description="a golden set of this sweep (its name) or a JSONL file "
                                     "(text, prompt or messages per line)")
    samples: int = Field(256, gt=0, description="rows used (the first ones, in file order)")
    seq_len: int = Field(512, gt=0, description="tokens a row is cut to")


class RecipeSpec(_Strict):
    """How a variant's checkpoint is made from its base model: a preset scheme and method, or
    an llm-compressor recipe file; calibration data where the method needs it."""

    file: str | None = Field(None, description="an llm-compressor recipe YAML (instead of "
                                               "scheme/method)")
    scheme: Scheme | None = Field(None, description="compressed-tensors preset scheme")
    method: Method | None = Field(None, description="gptq, awq, rtn, smoothquant+gptq")
    group_size: int | None = Field(None, gt=0, description="weights per scale (group-wise "
                                   "schemes: W4A16, W4A16_ASYM, W8A16; their preset: 128)")
    ignore: list[str] = Field(default_factory=lambda: ["lm_head"],
                              description="modules left unquantized (names or re: patterns)")
    calibration: CalibrationSpec | None = None

    @model_validator(mode="after")
    def _check_form(self) -> RecipeSpec:
        if self.file is not None:
            preset = [k for k in ("scheme", "method", "group_size") if getattr(self, k)]
            if preset:
                raise ValueError(f"file names the whole recipe: drop {', '.join(preset)}")
            return self
        if self.scheme is None or self.method is None:
            raise ValueError("give scheme and method (a preset), or file (a recipe YAML)")
        if self.scheme not in METHOD_SCHEMES[self.method]:
            raise ValueError(f"method {self.method!r} does not make scheme {self.scheme!r} "
                             f"(it makes {', '.join(METHOD_SCHEMES[self.method])})")
        scheme = SCHEME_BY_NAME[self.scheme]
        if self.group_size is not None and scheme.strategy != "group":
            raise ValueError(f"group_size: scheme {self.scheme!r} quantizes weights per "
                             f"{scheme.strategy}, not in groups")
        needs = self.method != "rtn" or scheme.static_activations
        if needs and self.calibration is None:
            raise ValueError(f"calibration: method {self.method!r} with scheme "
                             f"{self.scheme!r} calibrates on data: name a dataset")
        if not needs and self.calibration is not None:
            raise ValueError(f"calibration: method 'rtn' with scheme {self.scheme!r} uses "
                             "no calibration data")
        return self

    @property
    def weight_bits(self) -> int | None:
        return SCHEME_BY_NAME[self.scheme].weight_bits if self.scheme else None

    @property
    def groups(self) -> int | None:
        """The group size the weights are quantized in (None: not group-wise, or a file)."""
        if self.scheme is None or SCHEME_BY_NAME[self.scheme].strategy != "group":
            return None
        return self.group_size or 128


class QuantizedCheckpoint(_Strict):
    """What the plan makes of a recipe: the checkpoint a unit launches (set by the plan, never
    written in a spec)."""

    base: str = Field(description="the base checkpoint the spec names (its ``model``)")
    recipe_hash: str = Field(description="of the base's files, the recipe, its file's and "
                                         "calibration data's bytes and the tools' pins")
    path: str = Field(description="$SERVEBENCH_CACHE/quantized/<recipe_hash>")
