"""Making a recipe's checkpoint, once: llm-compressor's ``oneshot`` in the quantization venv
(``oneshot.py`` as a subprocess of its python), written to a work folder beside the cache
entry and renamed into place when complete, so a checkpoint in the cache is always whole and
two workers making the same one keep the first. A failure raises ``QuantizeError`` with the
tool's own last lines; its work folder is removed."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

from servebench.config import SweepSpec, VariantSpec
from servebench.config.quantize import QuantizedCheckpoint
from servebench.errors import QuantizeError
from servebench.quantize.inputs import ONESHOT, RecipeInputs, resolve
from servebench.settings import Settings

log = logging.getLogger(__name__)

TIMEOUT_S = 4 * 3600.0  # a large model's GPTQ on a GPU worker takes hours
TAIL_LINES = 12
LOG_NAME = "quantize.log"  # the tool's output, kept beside the checkpoint it made


def _rows(path: Path, samples: int) -> list[dict]:
    """The first ``samples`` JSON rows of a JSONL file."""
    rows = []
    with path.open() as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
                if len(rows) == samples:
                    break
    return rows


def job(inputs: RecipeInputs, output: Path) -> dict:
    """What ``oneshot.py`` is given (its module doc)."""
    recipe = inputs.recipe
    if inputs.recipe_file is not None:
        made = {"yaml": inputs.recipe_file.read_text()}
    else:
        made = {"scheme": recipe.scheme, "method": recipe.method,
                "group_size": recipe.group_size, "ignore": list(recipe.ignore)}
    calibration = None
    if recipe.calibration is not None and inputs.calibration is not None:
        calibration = {"rows": _rows(inputs.calibration, recipe.calibration.samples),
                       "seq_len": recipe.calibration.seq_len}
    return {"base": inputs.base, "output": str(output), "recipe": made,
            "calibration": calibration}


def _tail(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-TAIL_LINES:])


def make_checkpoint(checkpoint: QuantizedCheckpoint, inputs: RecipeInputs,
                    settings: Settings) -> float:
    """Make ``checkpoint`` from ``inputs`` unless the cache has it; the seconds it took (0.0:
    it was there). Raises ``QuantizeError`` with why."""
    final = Path(checkpoint.path)
    if final.is_dir():
        return 0.0
    python = settings.quant_venv / "bin" / "python"
    if not python.exists():
        raise QuantizeError(f"no quantization venv at {settings.quant_venv} "
                            "(SERVEBENCH_QUANT_VENV): run `make quant`")
    final.parent.mkdir(parents=True, exist_ok=True)
    work = final.parent / f".work-{final.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        (work / "job.json").write_text(json.dumps(job(inputs, work / "out")))
        started = time.monotonic()
        log.info("quantizing %s (recipe %s) into %s", checkpoint.base, checkpoint.recipe_hash,
                 final)
        try:
            # one stream, in the order it was written: the traceback is its end
            done = subprocess.run([str(python), str(ONESHOT), str(work / "job.json")],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=TIMEOUT_S, check=False,
                                  env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        except subprocess.TimeoutExpired as exc:
            raise QuantizeError(f"llm-compressor did not finish within {TIMEOUT_S:.0f} s:\n"
                                f"{_tail(str(exc.stdout or ''))}") from None
        seconds = time.monotonic() - started
        if done.returncode != 0:
            raise QuantizeError(f"llm-compressor failed (exit {done.returncode}):\n"
                                f"{_tail(done.stdout)}")
        (work / "out" / LOG_NAME).write_text(done.stdout)
        try:
            (work / "out").rename(final)
        except OSError:  # another worker put the same checkpoint first: it is the same
            if not final.is_dir():
                raise
        log.info("quantized %s in %.1f s", final, seconds)
        return seconds
    finally:
        shutil.rmtree(work, ignore_errors=True)


def make_variant(spec: SweepSpec, variant: VariantSpec, settings: Settings) -> float:
    """:func:`make_checkpoint` of a planned recipe variant (``Plan.variant_of``)."""
    assert variant.quantized is not None, variant.name
    return make_checkpoint(variant.quantized, resolve(spec, variant, settings), settings)
