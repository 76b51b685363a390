"""Stack adapters: launch rendering and request dialect (every sampling knob explicit)."""

import json

import pytest
from servebench.config import SamplingSpec, VariantSpec
from servebench.settings import Settings
from servebench.stacks import get_stack, known_stacks

SAMPLING = SamplingSpec(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0,
                        seed=7)
MESSAGES = [{"role": "user", "content": "12+34="}]


def test_every_stack_has_its_options_model_in_the_spec():
    from servebench.config import STACK_OPTIONS

    assert sorted(STACK_OPTIONS) == known_stacks()


def test_registry_lists_known_on_unknown():
    assert {"llama_cpp", "transformers"} <= set(known_stacks())
    with pytest.raises(KeyError, match=r"unknown stack 'vlm'; known stacks: \["):
        get_stack("vlm")


def test_llama_cpp_launch(tmp_path):
    settings = Settings(project_root=tmp_path, llama_bin=tmp_path / "bin")
    variant = VariantSpec(name="q8", model="m/adder-q8_0.gguf", quant="q8_0", max_num_seqs=4,
                          max_model_len=512, prefix_caching=False, threads=1,
                          extra_args=["--batch-size", "256"])
    launch = get_stack("llama_cpp").local_launch(variant, host="127.0.0.1", port=8111,
                                                 settings=settings)
    argv = launch.argv
    assert argv[0] == str(tmp_path / "bin" / "llama-server")
    assert argv[argv.index("--model") + 1] == str(tmp_path / "m/adder-q8_0.gguf")
    assert argv[argv.index("--parallel") + 1] == "4"
    assert argv[argv.index("--ctx-size") + 1] == "2048"  # 4 slots x 512
    assert "--no-cache-prompt" in argv and "--metrics" in argv and "--jinja" in argv
    assert argv[argv.index("--threads") + 1] == "1"
    assert argv[-2:] == ["--batch-size", "256"]
    assert launch.served_model == "adder-q8_0"
    assert launch.metrics_path == "/metrics"


def test_llama_cpp_body_sends_every_knob_and_forces_length():
    variant = VariantSpec(name="f16", model="x.gguf", quant="f16")
    body = get_stack("llama_cpp").chat_body(
        served_model="x", messages=MESSAGES, sampling=SAMPLING, max_tokens=32,
        force_length=True, variant=variant)
    # llama-server defaults are top_k=40, min_p=0.05: both must be overridden
    assert body["top_k"] == 0 and body["min_p"] == 0.0
    assert body["ignore_eos"] is True and body["max_tokens"] == 32
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["seed"] == 7 and body["temperature"] == 0.0 and body["repeat_penalty"] == 1.0


def test_llama_cpp_rejects_non_gguf_quant(tmp_path):
    settings = Settings(project_root=tmp_path, llama_bin=tmp_path)
    problems = get_stack("llama_cpp").check(
        VariantSpec(name="a", model="m.safetensors", quant="awq"), settings)
    assert any("not a GGUF type" in p for p in problems)
    assert any("not a .gguf file" in p for p in problems)


def test_transformers_launch_and_body(tmp_path):
    model = tmp_path / "ckpt"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"pad_token_id": 2, "eos_token_id": 1,
                                                   "bos_token_id": 3}))
    settings = Settings(project_root=tmp_path, stacks_venv=tmp_path / "venv")
    variant = VariantSpec(name="f32", model="ckpt", quant="none", dtype="float32", threads=1)
    adapter = get_stack("transformers")
    launch = adapter.local_launch(variant, host="127.0.0.1", port=8222, settings=settings)
    assert launch.env["OMP_NUM_THREADS"] == "1"
    assert launch.argv[:3] == [str(tmp_path / "venv/bin/transformers"), "serve", str(model)]
    assert "--continuous-batching" in launch.argv
    assert launch.argv[launch.argv.index("--dtype") + 1] == "float32"
    assert launch.served_model == str(model)
    body = adapter.chat_body(served_model=launch.served_model, messages=MESSAGES,
                             sampling=SAMPLING, max_tokens=16, force_length=True, variant=variant)
    gen = json.loads(body["generation_config"])
    assert gen["eos_token_id"] == 2  # the pad id: the model never ends early
    assert gen["pad_token_id"] == 2
    assert gen["do_sample"] is False and gen["max_new_tokens"] == 16
    assert body["model"] == str(model) and body["seed"] == 7
    free = adapter.chat_body(served_model=launch.served_model, messages=MESSAGES,
                             sampling=SAMPLING, max_tokens=8, force_length=False, variant=variant)
    # unforced: the checkpoint's own ids travel with the config, or the model never stops
    assert json.loads(free["generation_config"])["eos_token_id"] == 1
    assert json.loads(free["generation_config"])["bos_token_id"] == 3


def test_transformers_rejects_gguf_quant(tmp_path):
    settings = Settings(project_root=tmp_path, stacks_venv=tmp_path)
    problems = get_stack("transformers").check(
        VariantSpec(name="q", model="ckpt", quant="q4_k_m"), settings)
    assert any("quant 'q4_k_m'" in p for p in problems)


def test_llama_cpp_speculative_draft_renders_llama_servers_flags(tmp_path):
    from servebench.config.variants import SpeculativeSpec

    settings = Settings(project_root=tmp_path, llama_bin=tmp_path / "bin")
    variant = VariantSpec(name="spec", model="m/adder-3m-f16.gguf", quant="f16", threads=1,
                          speculative=SpeculativeSpec(method="draft", num_speculative_tokens=4,
                                                      draft_model="m/adder-300k-f16.gguf"))
    argv = get_stack("llama_cpp").local_launch(variant, host="127.0.0.1", port=8111,
                                               settings=settings).argv
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert argv[argv.index("--spec-draft-model") + 1] == str(tmp_path / "m/adder-300k-f16.gguf")
    assert argv[argv.index("--spec-draft-threads") + 1] == "1"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "4"
    # the draft is not on disk: named before anything launches
    problems = get_stack("llama_cpp").local_problems(variant, settings)
    assert any("speculative.draft_model" in p and "make models" in p for p in problems)


def test_llama_cpp_speculative_ngram_and_what_it_refuses(tmp_path):
    from servebench.config.variants import SpeculativeSpec

    settings = Settings(project_root=tmp_path, llama_bin=tmp_path / "bin")
    stack = get_stack("llama_cpp")
    ngram = VariantSpec(name="ng", model="a.gguf", quant="f16",
                        speculative=SpeculativeSpec(method="ngram", num_speculative_tokens=6,
                                                    ngram_max=3))
    argv = stack.local_launch(ngram, host="127.0.0.1", port=1, settings=settings).argv
    assert argv[argv.index("--spec-type") + 1] == "ngram-simple"
    assert argv[argv.index("--spec-ngram-simple-size-m") + 1] == "6"
    assert argv[argv.index("--spec-ngram-simple-size-n") + 1] == "3"
    assert "--spec-draft-model" not in argv and stack.check(ngram, settings) == []
    medusa = VariantSpec(name="m", model="a.gguf", quant="f16",
                         speculative=SpeculativeSpec(method="medusa", draft_model="heads"))
    assert any("speculative.method 'medusa'" in p for p in stack.check(medusa, settings))
    with_min = ngram.model_copy(update={"speculative": SpeculativeSpec(
        method="ngram", ngram_min=2, ngram_max=3)})
    assert any("ngram_min" in p for p in stack.check(with_min, settings))


def test_llama_cpp_container_mounts_a_draft_kept_elsewhere(tmp_path):
    from servebench.config.variants import SpeculativeSpec

    settings = Settings(project_root=tmp_path, llama_bin=tmp_path / "bin")
    variant = VariantSpec(name="spec", model="m/t.gguf", quant="f16", speculative=SpeculativeSpec(
        method="draft", draft_model="drafts/d.gguf"))
    launch = get_stack("llama_cpp").container_launch(variant, port=8000, settings=settings)
    assert launch.volumes == {str(tmp_path / "m"): "/models", str(tmp_path / "drafts"): "/draft"}
    cmd = launch.command
    assert cmd[cmd.index("--spec-draft-model") + 1] == "/draft/d.gguf"
    assert cmd[cmd.index("--spec-draft-ngl") + 1] == "999"


def test_a_llama_cpp_spec_variant_is_read_from_a_sweep_file():
    from pathlib import Path

    from servebench.config import load_sweep

    spec = load_sweep(Path(__file__).parents[3] / "include/sweeps/local.yaml")
    llama = spec.target("adder-llamacpp")
    draft = next(v for v in llama.variants if v.name == "f16-spec-draft")
    assert draft.speculative.method == "draft"
    assert draft.speculative.draft_model == "build/models/adder-300k-f16.gguf"
