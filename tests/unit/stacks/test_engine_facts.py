"""What the GPU adapters render, checked against each engine's own option lists.

``tests/fixtures/engines/<stack>.yaml`` hold facts read from each engine's source at a named
release (its server CLI options, chat request fields, stream options, metric names, value
choices; the file and version are in each fixture's ``sources``). Every flag, request field,
stream option, metric and option-file key an adapter renders for a spread of variants must be
one the engine has: a renamed or invented flag fails here, not on the first GPU night.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
import yaml
from engine_variants import MODEL, SPEC, VARIANTS, v  # noqa: F401  (tests/engine_variants.py)
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from servebench.config import SamplingSpec, VariantSpec
from servebench.settings import Settings
from servebench.stacks import get_stack

FIXTURES = Path(__file__).parents[2] / "fixtures" / "engines"
HOT = SamplingSpec(temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1,
                   seed=11)
GREEDY = SamplingSpec(temperature=0.0, top_p=1.0, seed=7)


@cache
def facts(stack: str) -> dict:
    return yaml.safe_load((FIXTURES / f"{stack}.yaml").read_text())


STACKS = sorted(VARIANTS)


@pytest.fixture
def settings(tmp_path):
    # vllm_venv without vLLM: the local launch is a GPU worker's `vllm serve`
    return Settings(project_root=tmp_path, work_dir=tmp_path / "runs",
                    vllm_venv=tmp_path / "venv")


def launches(stack: str, settings: Settings) -> list[tuple[VariantSpec, list[str]]]:
    """(variant, argv without the executable) for every variant, local and in a container."""
    adapter = get_stack(stack)
    out = []
    for variant in VARIANTS[stack]:
        problems = adapter.check(variant, settings)
        assert problems == [], f"{stack} rejects a test variant: {problems}"
        out.append((variant, adapter.container_launch(variant, port=8000,
                                                      settings=settings).command))
        out.append((variant, adapter.local_launch(variant, host="127.0.0.1", port=8001,
                                                  settings=settings).argv))
    return out


def flags(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in argv if a.startswith("--")]


def val(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("stack", STACKS)
def test_fixture_names_its_source_and_lies_in_the_checked_range(stack):
    f = facts(stack)
    assert f["engine"] == stack and f["sources"] and f["cli_options"]
    checked = get_stack(stack).checked_versions
    ranges = (checked,) if isinstance(checked, str) else checked
    assert checked and any(Version(f["version"]) in SpecifierSet(r) for r in ranges), (
        f"{stack}: facts read at {f['version']}, adapter checked for {checked}")


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_flag_is_an_engine_option(stack, settings):
    known = set(facts(stack)["cli_options"])
    rendered = {flag for _, argv in launches(stack, settings) for flag in flags(argv)}
    assert rendered - known == set(), f"{stack} has no such options"
    # the spread really exercises the adapter (each renders 10 to 20 distinct options)
    assert len(rendered) >= 10


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_values_are_engine_choices(stack, settings):
    f = facts(stack)
    choice_flags = {
        "vllm": {"--quantization": "quantization_choices",
                 "--kv-cache-dtype": "kv_cache_dtype_choices", "--dtype": "dtype_choices"},
        "sglang": {"--quantization": "quantization_choices",
                   "--kv-cache-dtype": "kv_cache_dtype_choices",
                   "--speculative-algorithm": "speculative_algorithms"},
        "tgi": {"--quantize": "quantize_choices", "--dtype": "dtype_choices",
                "--kv-cache-dtype": "kv_cache_dtype_choices"},
        "trtllm": {"--backend": "backend_choices"},
    }[stack]
    seen = set()
    for _, argv in launches(stack, settings):
        for flag, key in choice_flags.items():
            value = val(argv, flag)
            if value is not None:
                assert value in f[key], f"{stack} {flag} {value!r} not in {f[key]}"
                seen.add(flag)
        if stack == "vllm" and "--speculative-config" in argv:
            method = json.loads(val(argv, "--speculative-config"))["method"]
            assert method in f["speculative_methods"]
            seen.add("--speculative-config")
    assert seen == set(choice_flags) | ({"--speculative-config"} if stack == "vllm" else set())


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("sampling", [HOT, GREEDY], ids=["hot", "greedy"])
@pytest.mark.parametrize("force", [True, False], ids=["forced", "free"])
def test_request_fields_and_stream_options_are_the_engines(stack, sampling, force):
    f = facts(stack)
    adapter = get_stack(stack)
    if adapter.sampling_problems(sampling) or (force and not adapter.can_force_length):
        pytest.skip(f"{stack} rejects this at plan time")
    body = adapter.chat_body(served_model="m", messages=[{"role": "user", "content": "hi"}],
                             sampling=sampling, max_tokens=32, force_length=force, variant=v())
    assert set(body) - set(f["request_fields"]) == set(), f"{stack} has no such fields"
    assert set(body["stream_options"]) - set(f["stream_options_fields"]) == set()


# where each stack's prefix-cache hit rate comes from at the release read
PREFIX_CACHE_SOURCE = {"vllm": "counters", "sglang": "counters",
                       "trtllm": "usage",  # no prompt-token counters in its 1.3.0rc3
                       "tgi": None}  # neither counters nor cached_tokens in usage


@pytest.mark.parametrize("stack", STACKS)
def test_declared_metrics_are_exported_by_the_engine(stack):
    adapter = get_stack(stack)
    metrics = set(facts(stack)["metrics"])
    if PREFIX_CACHE_SOURCE[stack] == "counters":
        assert adapter.prefix_cache_counters and all(
            {c.hits, c.prompt} <= metrics for c in adapter.prefix_cache_counters), metrics
    else:  # nothing declared that the release does not export
        assert adapter.prefix_cache_counters == ()
        assert not [m for m in metrics if "cached" in m]
    # the scheduler telemetry sampled while a cell runs: only what the release exports
    g = adapter.engine_gauges
    declared = {n for n in (g.kv_cache_usage, g.running, g.waiting, g.preemptions,
                            g.spec_accepted, g.spec_drafted) if n}
    assert declared <= metrics, declared - metrics
    if "metrics_path" in facts(stack):
        # the route as registered; the adapter may add the trailing slash a Mount wants
        assert adapter.metrics_path.rstrip("/") == facts(stack)["metrics_path"].rstrip("/")


def test_trtllm_options_file_holds_only_llm_api_fields(settings):
    from servebench.stacks.trtllm import CONFIG_IN_CONTAINER

    allowed = facts("trtllm")["llm_api_options"]
    decoding = {"NGram": "NGram", "DraftTarget": "Draft_Target", "Eagle3": "Eagle3",
                "MTP": "MTP"}  # YAML decoding_type -> the fixture's key for its fields
    seen = set()
    for variant in VARIANTS["trtllm"]:
        opts = yaml.safe_load(get_stack("trtllm").container_launch(
            variant, port=1, settings=settings).files[CONFIG_IN_CONTAINER])
        assert set(opts) <= set(allowed["top_level"]), set(opts) - set(allowed["top_level"])
        assert set(opts["kv_cache_config"]) <= set(allowed["kv_cache_config"])
        spec = opts.get("speculative_config")
        if spec:
            kind = spec.pop("decoding_type")
            seen.add(kind)
            assert set(spec) <= set(allowed["speculative_config"][decoding[kind]]), kind
    assert seen == set(decoding)


def test_tgi_container_keeps_the_image_entrypoint_and_its_hub_cache(settings):
    image = facts("tgi")["image"]
    launch = get_stack("tgi").container_launch(VARIANTS["tgi"][0], port=80, settings=settings)
    assert launch.entrypoint is None and image["entrypoint"] == ["/tgi-entrypoint.sh"]
    hub = image["env"]["HUGGINGFACE_HUB_CACHE"] or image["env"]["HF_HOME"] + "/hub"
    assert hub in launch.volumes.values()
    assert set(launch.env) <= set(facts("tgi")["env_options"])
