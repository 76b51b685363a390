"""Apply one recipe with llm-compressor's ``oneshot``: run by the quantization venv's python
(``settings.quant_venv``, requirements-quant.txt), never imported by the library, so it
imports nothing of servebench and its third-party imports are that venv's.

    python oneshot.py JOB.json

JOB: ``base`` (a checkpoint folder or hub id), ``output`` (a folder to create), ``recipe``
(``{"yaml": text}`` of a recipe file, or a preset ``{"scheme", "method", "group_size",
"ignore"}``), ``calibration`` (null, or ``{"rows": [...], "seq_len": n}``: JSONL rows with
``text``, ``prompt`` or chat ``messages``, and a golden item's ``reference`` as the answer).
Writes the compressed checkpoint (compressed-tensors, with llm-compressor's ``recipe.yaml``)
and its tokenizer to ``output``. A failure exits non-zero with the tool's own traceback.
"""

from __future__ import annotations

import json
import sys


def calibration_texts(rows: list[dict], tokenizer) -> list[str]:
    """Each row as the text the model sees: a chat through the checkpoint's template, with the
    reference as the assistant's answer."""
    texts = []
    for row in rows:
        answer = row.get("reference")
        if "text" in row:
            texts.append(row["text"])
        elif "messages" in row:
            messages = list(row["messages"])
            if answer is not None:
                messages.append({"role": "assistant", "content": str(answer)})
            texts.append(tokenizer.apply_chat_template(messages, tokenize=False))
        else:
            texts.append(str(row["prompt"]) + ("" if answer is None else str(answer)))
    return texts


def preset_modifiers(recipe: dict) -> list:
    """The modifiers of a preset recipe: compressed-tensors' preset scheme (its group size
    overridden where given) applied by the method."""
    from compressed_tensors.quantization import preset_name_to_scheme
    from llmcompressor.modifiers.awq import AWQModifier
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier

    scheme = preset_name_to_scheme(recipe["scheme"], ["Linear"])
    if recipe.get("group_size"):
        scheme.weights.group_size = recipe["group_size"]
    quantize = {"targets": ["Linear"], "ignore": recipe["ignore"],
                "config_groups": {"group_0": scheme}}
    method = recipe["method"]
    if method == "gptq":
        return [GPTQModifier(**quantize)]
    if method == "awq":
        return [AWQModifier(**quantize)]
    if method == "smoothquant+gptq":
        return [SmoothQuantModifier(smoothing_strength=0.8),
                GPTQModifier(**quantize)]
    return [QuantizationModifier(**quantize)]  # rtn


def main(job_path: str) -> None:
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.pipelines.cache import IntermediatesCache
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with open(job_path) as f:
        job = json.load(f)
    if not torch.accelerator.is_available():
        # llm-compressor 0.14's AWQ pins its cached activations for host-to-device copies
        # (IntermediatesCache.pin_memory), which raises "Cannot access accelerator device
        # when none is available" on a CPU-only worker, where there is no device to copy to
        IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None
    tokenizer = AutoTokenizer.from_pretrained(job["base"])
    model = AutoModelForCausalLM.from_pretrained(job["base"], dtype="auto")
    recipe = job["recipe"].get("yaml") or preset_modifiers(job["recipe"])
    dataset, calibration = None, job.get("calibration")
    if calibration:
        texts = calibration_texts(calibration["rows"], tokenizer)
        encoded = tokenizer(texts, add_special_tokens=False, truncation=True,
                            max_length=calibration["seq_len"])
        dataset = Dataset.from_dict({"input_ids": encoded["input_ids"],
                                     "attention_mask": encoded["attention_mask"]})
    sizes = {"num_calibration_samples": len(dataset),
             "max_seq_length": calibration["seq_len"]} if dataset is not None else {}
    oneshot(model=model, tokenizer=tokenizer, recipe=recipe, dataset=dataset, **sizes)
    model.save_pretrained(job["output"], save_compressed=True)
    tokenizer.save_pretrained(job["output"])


if __name__ == "__main__":
    main(sys.argv[1])
