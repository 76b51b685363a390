"""The sweep spec: the shipped specs validate; bad specs fail naming file and field."""

from pathlib import Path

import pytest
import yaml
from servebench.config import SpecError, load_sweep, parse_sweep

ROOT = Path(__file__).resolve().parents[3]
SWEEPS = sorted((ROOT / "include" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_shipped_sweeps_validate(path):
    spec = load_sweep(path)
    assert spec.targets and spec.workloads


def _local() -> dict:
    return yaml.safe_load((ROOT / "include" / "sweeps" / "local.yaml").read_text())


def test_error_names_file_and_nested_field():
    data = _local()
    data["targets"][0]["variants"][2]["max_num_seqs"] = 0
    with pytest.raises(SpecError) as err:
        parse_sweep(data, "sweeps/bad.yaml")
    msg = str(err.value)
    assert "sweeps/bad.yaml" in msg
    assert "targets[0](name=adder-llamacpp).variants[2](name=q8_0).max_num_seqs" in msg


def test_workload_union_error_names_the_field_not_the_tag():
    data = _local()
    data["workloads"][0]["input_tokens"] = -1
    with pytest.raises(SpecError, match=r"workloads\[0\]\(name=fixed-64x32\)\.input_tokens"):
        parse_sweep(data, "x.yaml")


def test_unknown_field_is_rejected():
    data = _local()
    data["sampling"]["temprature"] = 0.5
    with pytest.raises(SpecError, match=r"sampling\.temprature.*Extra inputs"):
        parse_sweep(data, "x.yaml")


def test_baseline_must_be_a_variant():
    data = _local()
    data["targets"][0]["baseline"] = "bf16"
    with pytest.raises(SpecError, match="baseline 'bf16' is not one of the variants"):
        parse_sweep(data, "x.yaml")


def test_golden_set_reference_must_exist():
    data = _local()
    data["targets"][1]["golden_sets"] = ["trivia"]
    with pytest.raises(SpecError, match=r"golden sets \['trivia'\]"):
        parse_sweep(data, "x.yaml")


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(SpecError, match="cannot read sweep spec"):
        load_sweep(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets: [\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: not valid YAML"):
        load_sweep(bad)


def test_sampling_hash_is_stable_and_sensitive():
    a = parse_sweep(_local(), "a").sampling
    data = _local()
    data["sampling"]["top_p"] = 0.9
    b = parse_sweep(data, "b").sampling
    assert a.spec_hash() == parse_sweep(_local(), "c").sampling.spec_hash()
    assert a.spec_hash() != b.spec_hash()


def test_the_alert_floor_is_not_part_of_what_a_sweep_measured():
    data = _local()
    data["trends"] = {"min_change": 0.2}
    raised = parse_sweep(data, "a")
    assert raised.trends.min_change == 0.2
    assert raised.spec_hash() == parse_sweep(_local(), "b").spec_hash()  # no "sweep changed"
    data["trends"] = {"min_change": 1.5}
    with pytest.raises(SpecError, match=r"trends\.min_change"):
        parse_sweep(data, "c.yaml")
    data["trends"] = {"detect_at_least": 0}
    with pytest.raises(SpecError, match=r"c\.yaml: field trends\.detect_at_least"):
        parse_sweep(data, "c.yaml")


def test_the_docs_hold_the_spec_reference_as_printed():
    from servebench.spec_reference import spec_reference

    page = (ROOT / "docs" / "spec-reference.md").read_text()
    block = page.split("<!-- spec-reference:start -->\n", 1)[1].split(
        "<!-- spec-reference:end -->", 1)[0]
    assert block == spec_reference(), "docs/spec-reference.md is stale: paste " \
                                      "`servebench spec-reference` between its markers"


def test_the_tokenizer_field_says_what_tgi_serves():
    """TGI's router serves POST /tokenize and no detokenize (router/src/server.rs), so prompts
    for it are cut with the checkpoint's tokenizer: the field says why, not that TGI has no
    tokenize endpoint."""
    from servebench.config import VariantOptions
    from servebench.stacks import get_stack

    said = VariantOptions.model_fields["tokenizer"].description
    assert "TGI, which serves /tokenize but no /detokenize" in said
    assert "without a tokenize endpoint" not in said
    assert get_stack("tgi").tokenize_api is None  # why it is among those that need one


def test_the_grace_for_an_unschedulable_pod_names_every_verdict_readiness_knows():
    """Every autoscaler verdict the Kubernetes readiness acts on (the cluster autoscaler's and
    Karpenter's) is in the field's description, each with what it does."""
    from servebench.config import KubernetesProvision
    from servebench.provision.kubernetes import CLUSTER_AUTOSCALER, KARPENTER

    said = KubernetesProvision.model_fields["unschedulable_grace_s"].description
    for reason in [*CLUSTER_AUTOSCALER, *KARPENTER]:
        assert reason in said, reason
    waits, fails = said.split("waits on")
    assert "TriggeredScaleUp" in waits and "Nominated" in waits
    assert "NotTriggerScaleUp" in fails and "Karpenter's FailedScheduling" in fails


def test_a_knob_the_targets_stack_lacks_is_an_error_naming_the_field():
    data = _local()
    llama = next(i for i, t in enumerate(data["targets"]) if t["stack"] == "llama_cpp")
    data["targets"][llama]["variants"][1]["kv_cache_dtype"] = "fp8"
    with pytest.raises(SpecError) as err:
        parse_sweep(data, "sweeps/bad.yaml")
    msg = str(err.value)
    assert "sweeps/bad.yaml" in msg and "variants[1]" in msg and ".kv_cache_dtype" in msg
    assert "stack 'llama_cpp' has no option kv_cache_dtype" in msg
    data["targets"][llama]["variants"][1]["kv_cache_dtype"] = None  # its default: says nothing
    parse_sweep(data, "ok.yaml")
    hosted = {"name": "api", "stack": "openai_api", "variants": [
        {"name": "m", "model": "m", "endpoint": {"base_url": "https://x/v1"},
         "tensor_parallel_size": 2}]}
    with pytest.raises(SpecError, match="stack 'openai_api' has no option tensor_parallel_size"):
        parse_sweep({**_local(), "cross_stack": [], "targets": [hosted]}, "hosted.yaml")


def test_a_target_runs_the_workloads_it_names_and_only_known_ones():
    spec = parse_sweep(_local(), "local.yaml")
    everything = [w.name for w in spec.workloads]
    assert [w.name for w in spec.workloads_for("adder-llamacpp")] == everything
    assert [w.name for w in spec.workloads_for("adder-vllm")] == [
        "fixed-64x32", "shared-prefix-128+16x16"]
    data = _local()
    data["targets"][1]["workloads"] = ["fixed-64x32", "nope"]
    with pytest.raises(SpecError, match=r"target 'adder-transformers' names workloads "
                                        r"\['nope'\] that the sweep does not define"):
        parse_sweep(data, "x.yaml")
