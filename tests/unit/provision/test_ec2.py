"""The ec2 provisioner's pure parts: the spec, the idempotency token, the script SSM runs on
the instance, plan-time checks. (The AWS path itself runs against moto and stand-in hosts in
tests/integration/test_ec2_provision.py.)"""

import json

import pytest
import yaml
from servebench.config import SpecError, load_sweep
from servebench.provision.ec2 import Ec2Provisioner
from servebench.provision.ec2.launch import client_token
from servebench.provision.ec2.script import DIGEST_MARK, render_script
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.stacks import get_stack

EC2 = {"kind": "ec2", "instance_type": "g6e.xlarge", "ami": "ami-0123456789abcdef0"}


def _sweep(tmp_path, provision: dict, stack: str = "vllm", **variant):
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["cross_stack"] = []
    data["targets"] = [{"name": "gpu", "stack": stack, "golden_sets": [],
                        "provision": provision,
                        "variants": [{"name": "bf16", "model": "meta-llama/Llama-3.1-8B-Instruct",
                                      **variant}]}]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("provision", "message"), [
    ({"kind": "ec2", "instance_type": "g6e.xlarge"}, "exactly one of ami and launch_template"),
    ({**EC2, "launch_template": "lt-0abc"}, "exactly one of ami and launch_template"),
    ({**EC2, "ami": "my-image"}, "field targets[0](name=gpu).provision.ami"),
    ({**EC2, "market": "reserved"}, "field targets[0](name=gpu).provision.market"),
    ({**EC2, "subnet_id": "10.0.0.0/24"}, "field targets[0](name=gpu).provision.subnet_id"),
])
def test_a_bad_ec2_spec_names_the_file_and_field(tmp_path, provision, message):
    path = _sweep(tmp_path, provision)
    with pytest.raises(SpecError) as err:
        load_sweep(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_the_instance_type_price_wins_over_the_sweep_price(tmp_path):
    spec = load_sweep(_sweep(tmp_path, {**EC2, "price_per_hour": 1.861}))
    assert spec.targets[0].price_per_hour(spec.price_per_hour) == 1.861
    spec = load_sweep(_sweep(tmp_path, EC2))
    assert spec.targets[0].price_per_hour(spec.price_per_hour) == spec.price_per_hour


def test_the_client_token_is_stable_per_run_target_and_attempt():
    token = client_token("scheduled__2026-12-01T02:00:00+00:00", "llama8b-vllm")
    assert token == client_token("scheduled__2026-12-01T02:00:00+00:00", "llama8b-vllm")
    assert len(token) <= 64 and token.isascii()
    assert token != client_token("scheduled__2026-12-01T02:00:00+00:00", "llama8b-vllm", 1)
    assert token != client_token("scheduled__2026-12-02T02:00:00+00:00", "llama8b-vllm")


def test_the_script_relaunches_in_place_and_never_carries_the_token(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", "/home/worker/.cache/huggingface")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_never_in_scripts")
    spec = load_sweep(_sweep(tmp_path, {**EC2, "hf_token_parameter": "/servebench/hf",
                                        "model_cache": "/mnt/nvme/hub"},
                             tensor_parallel_size=2))
    variant = spec.targets[0].variants[0]
    launch = get_stack("vllm").container_launch(variant, port=8000, settings=get_settings())
    lines = render_script(launch, spec.targets[0].provision,
                          hub_cache="/home/worker/.cache/huggingface")
    script = "\n".join(lines)
    # the last variant goes, once the instance store (if any) is set up
    assert next(x for x in lines if x.startswith("docker ")).startswith(
        "docker rm -f servebench-server")
    run = lines[-1]
    assert run.startswith("docker run -d --name servebench-server")
    assert "--gpus 2" in run and "-p 8000:8000" in run
    # the worker's hub cache is the instance's model cache
    assert "-v /mnt/nvme/hub:/root/.cache/huggingface" in run
    assert "/home/worker" not in script
    # vllm's two-word entrypoint: the first is the entrypoint, the rest leads the command
    assert "--entrypoint vllm vllm/vllm-openai:v0.19.1 serve " in run
    # the token is read on the instance, passed by name only
    assert "hf_secret" not in script and "-e HF_TOKEN " in run
    assert "get-parameter --with-decryption --name /servebench/hf" in script
    assert any(line.startswith(f"echo {DIGEST_MARK}") for line in lines)


NVIDIA_SMI = """#!/bin/sh
# an instance's nvidia-smi: two L4s, and the header that names the driver's CUDA version
case "$1" in
  --query-gpu=*) for i in 1 2; do echo 'NVIDIA L4, 550.54.15, 2040 MHz, Disabled'; done ;;
  *) echo '| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |' ;;
esac
"""


def test_the_instances_own_gpus_are_read_by_the_launch_script(tmp_path):
    """The script's GPU lines, run by a shell as on the instance, print what the provisioner
    parses into the cells' ``gpu`` (and nothing, not an error, without nvidia-smi)."""
    import subprocess

    from servebench.provenance import describe_gpus
    from servebench.provision.ec2.script import CUDA_MARK, GPU_MARK

    spec = load_sweep(_sweep(tmp_path, EC2))
    launch = get_stack("vllm").container_launch(spec.targets[0].variants[0], port=8000,
                                                settings=get_settings())
    lines = [line for line in render_script(launch, spec.targets[0].provision,
                                            hub_cache="/nowhere")
             if line.startswith((f"echo {GPU_MARK}", f"echo {CUDA_MARK}"))]
    assert len(lines) == 2
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvidia-smi").write_text(NVIDIA_SMI)
    (tmp_path / "bin" / "nvidia-smi").chmod(0o755)

    def run(path: str) -> dict[str, str]:
        out = subprocess.run(["bash", "-c", "set -eu\n" + "\n".join(lines)], text=True,
                             capture_output=True, check=True, env={"PATH": path}).stdout
        return {m: line[len(m):].strip() for line in out.splitlines()
                for m in (GPU_MARK, CUDA_MARK) if line.startswith(m)}

    got = run(f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert describe_gpus(got[GPU_MARK].split(";"), got[CUDA_MARK]) == \
        "2x NVIDIA L4 (driver 550.54.15, CUDA 12.4, max SM 2040 MHz, MIG Disabled)"
    assert run("/usr/bin:/bin") == {GPU_MARK: "", CUDA_MARK: ""}  # no GPU: nothing said
    assert describe_gpus([""], None) is None


def test_files_are_written_on_the_instance_and_mounted_read_only(tmp_path):
    spec = load_sweep(_sweep(tmp_path, EC2, stack="trtllm"))
    variant = spec.targets[0].variants[0]
    launch = get_stack("trtllm").container_launch(variant, port=8000, settings=get_settings())
    assert launch.files, "trtllm writes its options file"
    lines = render_script(launch, spec.targets[0].provision, hub_cache="/nowhere")
    heredoc = lines.index("SERVEBENCH_EOF")
    assert lines[heredoc - 2].startswith("cat > /opt/servebench/files/0-")
    assert ":ro" in lines[-1]


def test_a_stack_without_a_container_or_a_missing_connection_is_a_plan_problem(tmp_path):
    spec = load_sweep(_sweep(tmp_path, {**EC2, "aws_conn_id": "no_such_aws"},
                             stack="transformers"))
    target = spec.targets[0]
    problems = Ec2Provisioner.check(target, target.variants[0], get_stack("transformers"),
                                    get_settings())
    assert any("has no container launch" in p for p in problems), problems
    spec = load_sweep(_sweep(tmp_path, {**EC2, "aws_conn_id": "no_such_aws"}))
    target = spec.targets[0]
    assert Ec2Provisioner.check(target, target.variants[0], get_stack("vllm"),
                                get_settings()) == []
    assert Ec2Provisioner.check_target(target, get_settings()) == [
        "field provision.aws_conn_id: no Airflow connection 'no_such_aws' (the AWS credentials "
        "and region)"]


def test_the_adapters_own_checks_run_at_plan_for_an_ec2_target(tmp_path):
    """A setting the engine refuses fails the plan, named, not the paid launch (the adapter's
    local_problems are not asked: the engine is in the image, not on the worker)."""
    spec = load_sweep(_sweep(tmp_path, {**EC2, "aws_conn_id": "no_such_aws"},
                             quant="experts_int8"))
    target = spec.targets[0]
    problems = Ec2Provisioner.check(target, target.variants[0], get_stack("vllm"),
                                    get_settings())
    assert any(p.startswith("field quant 'experts_int8'") for p in problems), problems
    assert not any("not installed" in p for p in problems)


def test_fallback_placements_take_the_targets_own_where_unset_and_price_their_own(tmp_path):
    spec = load_sweep(_sweep(tmp_path, {
        **EC2, "subnet_id": "subnet-0a", "market": "spot", "price_per_hour": 0.9,
        "fallbacks": [{"subnet_id": "subnet-0b"},  # another zone, the same instance
                      {"market": "on-demand", "price_per_hour": 1.86},
                      {"instance_type": "g6e.2xlarge", "price_per_hour": 2.24}]}))
    own, zone, on_demand, bigger = spec.targets[0].provision.placements()
    assert (own.instance_type, own.subnet_id, own.market, own.hardware) == \
        ("g6e.xlarge", "subnet-0a", "spot", "aws g6e.xlarge")
    assert (zone.subnet_id, zone.market, zone.price_per_hour, zone.hardware) == \
        ("subnet-0b", "spot", 0.9, "aws g6e.xlarge")
    assert (on_demand.market, on_demand.price_per_hour) == ("on-demand", 1.86)
    # another instance type is other hardware: a trend series of its own
    assert (bigger.instance_type, bigger.hardware, bigger.price_per_hour) == \
        ("g6e.2xlarge", "aws g6e.2xlarge", 2.24)


@pytest.mark.parametrize(("fallback", "message"), [
    ({"instance_type": "g6e.2xlarge"}, "fallbacks[0].price_per_hour"),
    ({"market": "spot"}, "fallbacks[0].price_per_hour"),
])
def test_a_fallback_that_would_be_priced_wrongly_is_a_spec_error(tmp_path, fallback, message):
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_sweep(_sweep(tmp_path, {**EC2, "price_per_hour": 1.86, "fallbacks": [fallback]}))
    with pytest.raises(SpecError, match=r"fallbacks\[0\]\.hardware"):
        load_sweep(_sweep(tmp_path, {**EC2, "hardware": "1x L40S", "fallbacks": [
            {"instance_type": "g6e.2xlarge"}]}))


@pytest.fixture
def account(monkeypatch):
    """An AWS account in moto (in process) behind the ``aws_default`` connection."""
    from moto import mock_aws

    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing-secret",
        "extra": {"region_name": "us-east-1"}}))
    with mock_aws():
        import boto3

        yield boto3.client("iam", region_name="us-east-1"), \
            boto3.client("ssm", region_name="us-east-1")


def test_plan_asks_the_account_for_the_profile_and_the_token_parameter(tmp_path, account):
    iam, ssm = account
    spec = {**EC2, "instance_profile": "gpu-bench", "hf_token_parameter": "/bench/hf"}
    target = load_sweep(_sweep(tmp_path, spec)).targets[0]
    problems = Ec2Provisioner.check_target(target, get_settings())
    # the DryRun refuses the missing profile too (moto: NoSuchEntity; EC2: InvalidParameterValue)
    assert problems[0].startswith("field provision: EC2 would not launch g6e.xlarge")
    assert problems[1:] == [
        "field provision.instance_profile: no instance profile 'gpu-bench' in the account",
        "field provision.hf_token_parameter: no SSM parameter '/bench/hf' in the region (the "
        "instance reads HF_TOKEN from it: a gated model fails to load without it)"]
    iam.create_instance_profile(InstanceProfileName="gpu-bench")
    ssm.put_parameter(Name="/bench/hf", Value="hf_x", Type="SecureString")
    assert "has no role" in Ec2Provisioner.check_target(target, get_settings())[0]
    iam.create_role(RoleName="bench", AssumeRolePolicyDocument="{}")
    iam.add_role_to_instance_profile(InstanceProfileName="gpu-bench", RoleName="bench")
    assert Ec2Provisioner.check_target(target, get_settings()) == []


def test_plan_dry_runs_every_placement_and_names_the_one_ec2_refuses(tmp_path):
    import boto3
    from botocore.stub import Stubber
    from servebench.provision.ec2.checks import _dry_run_problems

    spec = {**EC2, "fallbacks": [{"subnet_id": "subnet-0def"}, {"market": "spot"}]}
    target = load_sweep(_sweep(tmp_path, spec)).targets[0]
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x",
                       aws_secret_access_key="y")
    with Stubber(ec2) as stub:
        stub.add_client_error("run_instances", "DryRunOperation", "Request would have "
                              "succeeded, but DryRun flag is set.", 412)
        stub.add_client_error("run_instances", "InvalidSubnetID.NotFound",
                              "The subnet ID 'subnet-0def' does not exist", 400,
                              expected_params=None)
        stub.add_client_error("run_instances", "UnauthorizedOperation",
                              "You are not authorized to perform this operation.", 403)
        problems = _dry_run_problems(ec2, target.provision, target.name)
    assert problems == [
        "field provision.fallbacks[0]: EC2 would not launch g6e.xlarge (on-demand) in "
        "subnet-0def: InvalidSubnetID.NotFound: The subnet ID 'subnet-0def' does not exist",
        "field provision.fallbacks[1]: EC2 would not launch g6e.xlarge (spot) in the default "
        "subnet: UnauthorizedOperation: You are not authorized to perform this operation."]


def test_the_root_volume_is_sized_on_the_amis_root_device(tmp_path, account):
    import boto3
    from servebench.provision.ec2.launch import _launch

    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images()["Images"][0]
    spec = load_sweep(_sweep(tmp_path, {**EC2, "ami": image["ImageId"], "root_volume_gb": 300,
                                        "root_volume_type": "gp3"})).targets[0].provision
    assert Ec2Provisioner.check_target(load_sweep(_sweep(tmp_path, spec.model_dump()))
                                       .targets[0], get_settings()) == []
    instance = _launch(ec2, spec, spec.placements()[0], token="t", run_id="r", dag_id="d",
                       target="gpu")
    [root] = [m for m in instance["BlockDeviceMappings"]
              if m["DeviceName"] == image["RootDeviceName"]]
    [volume] = ec2.describe_volumes(VolumeIds=[root["Ebs"]["VolumeId"]])["Volumes"]
    assert (volume["Size"], volume["VolumeType"]) == (300, "gp3")
    with pytest.raises(SpecError, match="size the root volume in the template"):
        load_sweep(_sweep(tmp_path, {"kind": "ec2", "instance_type": "g6e.xlarge",
                                     "launch_template": "lt-0abc", "root_volume_gb": 300}))


def test_the_instance_store_is_set_up_first_and_only_where_asked(tmp_path):
    """Its lines run before any docker command (Docker's data moves under it) and touch only
    volumes EC2 names as instance storage; ``instance_store: false`` leaves them out."""
    from servebench.provision.ec2.script import INSTANCE_STORE_MODEL

    spec = load_sweep(_sweep(tmp_path, EC2))
    launch = get_stack("vllm").container_launch(spec.targets[0].variants[0], port=8000,
                                                settings=get_settings())
    lines = render_script(launch, spec.targets[0].provision, hub_cache="/nowhere")
    first_docker = next(i for i, line in enumerate(lines) if line.startswith("docker "))
    assert lines.index("    mkfs.xfs -f \"$dev\"") < first_docker
    [listing] = [line for line in lines if "lsblk" in line]
    assert f"/{INSTANCE_STORE_MODEL}/" in listing
    off = load_sweep(_sweep(tmp_path, {**EC2, "instance_store": False}))
    assert not any("mkfs" in line for line in render_script(
        launch, off.targets[0].provision, hub_cache="/nowhere"))


def test_the_instances_memory_sampler_keeps_the_containers_peak(tmp_path):
    """The launch script's sampler, run by bash as on the instance against a real process tree
    (a parent holding 40 MiB, its child 80 MiB) and an nvidia-smi of two GPUs: it keeps the
    tree's Pss and the GPUs' memory in use, and ends with the container."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from servebench.memory import MIB
    from servebench.provision.ec2.script import (
        MEMORY_PEAK,
        MEMORY_SAMPLER,
        ROOT_PID,
        memory_sampler_lines,
        sampled_memory,
    )

    spec = load_sweep(_sweep(tmp_path, EC2))
    launch = get_stack("vllm").container_launch(spec.targets[0].variants[0], port=8000,
                                                settings=get_settings())
    lines = render_script(launch, spec.targets[0].provision, hub_cache="/nowhere")
    started = lines.index(memory_sampler_lines()[-1])
    assert lines[started + 1].startswith("docker run")  # waiting for the container it samples
    tree = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\nheld = bytearray(40 << 20)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; b = bytearray(80 << 20); "
        "print(1, flush=True); time.sleep(600)'], stdout=sys.stdout)\ntime.sleep(600)")],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert tree.stdout.readline().strip() == "1"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\necho 1000; echo 2000\n")
    (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
    peak = tmp_path / "peak"
    sampler = MEMORY_SAMPLER.replace(ROOT_PID, f"echo {tree.pid}").replace(
        MEMORY_PEAK, str(peak)).replace("sleep 1\ndone", "sleep 0.2\ndone")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    run = subprocess.Popen(["bash", "-c", sampler], env=env)
    try:
        deadline = time.monotonic() + 30
        while not (peak.exists() and int(peak.read_text().split()[2]) >= 3):
            assert time.monotonic() < deadline, "the sampler wrote no peak"
            time.sleep(0.1)
        got = sampled_memory(peak.read_text())
    finally:
        os.killpg(tree.pid, signal.SIGKILL)
        tree.wait()
    assert run.wait(timeout=10) == 0  # it ends with the container's processes
    assert 120 * MIB <= got.peak_rss_bytes <= 160 * MIB, got
    assert got.peak_device_memory_bytes == 3000 * MIB
    assert "Pss summed every 1 s" in got.peak_rss_source
    assert sampled_memory("").peak_rss_bytes is None
    assert sampled_memory("4 - 2").peak_device_memory_source == "no nvidia-smi on the instance"
