"""Quantized checkpoints from a recipe: a variant that names a recipe (``config.quantize``)
is served from the checkpoint llm-compressor makes of its base model, made once and cached by
the hash of its inputs.

``inputs``: what a recipe reads and the hash that names its checkpoint (the plan puts it in
each unit: ``Plan.variant_of`` launches it); ``checks``: what the plan refuses; ``make``:
making it once (the pipeline's quantize step, and any bench worker that lacks it);
``oneshot``: the script the quantization venv runs.
"""
