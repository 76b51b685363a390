"""The provisioner seam: a sweep picks where its servers come from by its spec alone, and
bad provisioning is a plan-time error naming the file and field."""

import datetime as dt

import pytest
import yaml
from servebench.config import SpecError, load_sweep
from servebench.endpoint import locate
from servebench.pipeline import provision, teardown
from servebench.plan import Plan
from servebench.provision import LaunchError, get_provisioner, provision_kinds
from servebench.provision.local import LocalProvisioner
from servebench.provision.static import StaticProvisioner
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.stacks import get_stack


def _sweep(tmp_path, target: dict):
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["cross_stack"] = []
    data["targets"] = [{"name": "t", "golden_sets": [], **target}]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _variant(**extra):
    return {"name": "v", "model": "m", **extra}


def test_kinds_are_registered_and_an_unknown_one_is_named():
    assert provision_kinds() == ["ec2", "kubernetes", "local", "static"]
    assert get_provisioner("local") is LocalProvisioner
    with pytest.raises(KeyError, match="unknown provision kind 'ec3'"):
        get_provisioner("ec3")


def test_the_default_is_local_and_static_for_a_hosted_api(tmp_path):
    local = load_sweep(_sweep(tmp_path, {"stack": "llama_cpp", "variants": [_variant()]}))
    assert local.targets[0].provision_kind == "local"
    hosted = load_sweep(_sweep(tmp_path, {"stack": "openai_api", "variants": [
        _variant(endpoint={"base_url": "https://api.example.com/v1"})]}))
    assert hosted.targets[0].provision_kind == "static"


@pytest.mark.parametrize(("target", "message"), [
    ({"stack": "llama_cpp", "provision": {"kind": "static"}, "variants": [_variant()]},
     "variant 'v' has no endpoint: with provision kind 'static'"),
    ({"stack": "openai_api", "provision": {"kind": "local"},
      "variants": [_variant(endpoint={"base_url": "https://x/v1"})]},
     "stack 'openai_api' is a hosted API; it can only be provision kind 'static'"),
    ({"stack": "vllm", "variants": [_variant(endpoint={"base_url": "http://box:8000"})]},
     "sets endpoint, which only a target with provision kind 'static' uses"),
    ({"stack": "llama_cpp", "provision": {"kind": "ec3"}, "variants": [_variant()]},
     "field targets[0](name=t).provision"),
])
def test_bad_provisioning_names_the_file_and_field(tmp_path, target, message):
    path = _sweep(tmp_path, target)
    with pytest.raises(SpecError) as err:
        load_sweep(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_a_self_hosted_endpoint_is_not_sent_the_default_api_key(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-the-gpu-box")
    monkeypatch.setenv("BOX_KEY", "box-key")
    spec = load_sweep(_sweep(tmp_path, {"stack": "vllm", "provision": {"kind": "static"},
                                        "variants": [
        _variant(name="open", endpoint={"base_url": "http://box:8000/"}),
        _variant(name="keyed", endpoint={"base_url": "http://box:8001",
                                         "api_key_env": "BOX_KEY"})]}))
    open_, keyed = spec.targets[0].variants
    assert locate(open_.endpoint, default_key_env=False) == ("http://box:8000", {})
    assert locate(keyed.endpoint, default_key_env=False) == (
        "http://box:8001", {"Authorization": "Bearer box-key"})
    # a hosted API's endpoint does default to its provider's key variable
    assert locate(open_.endpoint)[1] == {"Authorization": "Bearer sk-not-for-the-gpu-box"}


def test_an_endpoint_that_never_answers_is_a_launch_error(tmp_path):
    from servebench.provision.local import free_port

    port = free_port()
    spec = load_sweep(_sweep(tmp_path, {"stack": "vllm", "provision": {
        "kind": "static", "health_timeout_s": 0.5}, "variants": [
        _variant(endpoint={"base_url": f"http://127.0.0.1:{port}"})]}))
    target = spec.targets[0]
    prov = StaticProvisioner.attach("r", {}, get_settings())
    with pytest.raises(LaunchError, match=f"127.0.0.1:{port}/health not healthy after 0.5s"):
        prov.launch("t--v", target, target.variants[0], get_stack("vllm"))
    assert prov.hardware(target) == "static endpoint (hardware not recorded)"
    assert prov.engine_version(get_stack("vllm")) == "unknown (static endpoint)"


def test_provision_acquires_per_kind_and_teardown_works_without_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    path = _sweep(tmp_path, {"stack": "llama_cpp", "variants": [_variant()]})
    spec = load_sweep(path)  # the plan's checks are test_plan's: only its targets matter here
    plan = Plan(sweep_file=str(path), run_date=dt.date(2026, 1, 1), spec=spec,
                sweep_hash=spec.spec_hash(), sampling_hash=spec.sampling.spec_hash(),
                prompt_seed=1, units=[], n_cells=0).to_xcom()
    state = provision(plan, "run-1")
    assert set(state["kinds"]) == {"local"}
    assert (tmp_path / "runs" / "run-1").is_dir()
    assert teardown(state, "run-1") == []
    assert teardown(None, "run-1") == []  # the setup task failed: each kind finds its own


def test_a_local_gpu_engine_waits_longer_for_a_hub_checkpoints_first_start(tmp_path):
    """A first start downloads a hub checkpoint: the 300 s setting would fail it mid-fetch."""
    settings = get_settings()
    local = LocalProvisioner(tmp_path, settings)

    def wait(target: dict, stack: str) -> float:
        t = load_sweep(_sweep(tmp_path, {"stack": stack, **target})).targets[0]
        return local.health_timeout_s(t, t.variants[0], get_stack(stack))

    hub = {"variants": [_variant(model="meta-llama/Llama-3.1-8B-Instruct", quant="bf16")]}
    assert wait(hub, "vllm") == 1800.0
    # a checkpoint folder on the worker (the local default's vLLM): the setting
    folder = {"variants": [_variant(model="include/models/adder-3m", quant="none")]}
    assert wait(folder, "vllm") == settings.health_timeout_s
    assert wait({"variants": [_variant(model="build/models/adder-3m-f16.gguf", quant="f16")]},
                "llama_cpp") == settings.health_timeout_s
    # the spec's own wait wins
    assert wait({**hub, "provision": {"kind": "local", "health_timeout_s": 60}}, "vllm") == 60
