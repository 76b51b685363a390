#!/usr/bin/env python3
"""What a night on several EC2 targets pays for: the nightly DAG, whole, on N ec2 targets in
the moto + network-namespace harness of the ec2 tests (moto answers EC2 and SSM; every instance
becomes a test host of its own where the real llama-server serves as its container would; see
tests/integration/ec2_hosts.py). Prints, from the run's own Parquet (``hosts``, ``units``,
``runs``):

- each instance: when it was launched and terminated, relative to the run's start, its
  seconds up and its billed seconds (EC2's 60 s minimum included);
- paid instance-seconds over the run, measured seconds, and the sweep efficiency
  (measured / paid, ``servebench.cost``);
- the run's wall time.

``dag.test()`` runs the DAG's tasks one at a time, so the wall time is that of a sequential
run; the paid seconds do not depend on it (each instance is paid for its own units).

  make bench-ec2                        # 3 targets x 2 variants, 1000 requests a cell
  make bench-ec2 ARGS="--targets 5 --requests 500"

Needs root (``ip netns``) and the built llama-server and models (``make setup``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))  # the stand-in hosts

REGION = "us-east-1"
IMAGE = "ghcr.io/ggml-org/llama.cpp:server-cuda"


def sweep(tmp: Path, subnet: str, ami: str, n_targets: int, variants: list[str],
          requests: int, output_tokens: int) -> Path:
    data = yaml.safe_load((ROOT / "include/sweeps/local.yaml").read_text())
    llama = next(t for t in data["targets"] if t["stack"] == "llama_cpp")
    data.update(name="ec2-hosts", cross_stack=[], workloads=[
        {"kind": "fixed", "name": "fixed", "input_tokens": 64, "output_tokens": output_tokens,
         "num_requests": requests}])
    data["load"]["concurrency"] = [2]
    data["targets"] = [{
        "name": f"gpu-{i}", "stack": "llama_cpp", "baseline": variants[0],
        "golden_sets": ["addition"],
        "provision": {"kind": "ec2", "instance_type": "g6.xlarge", "ami": ami,
                      "subnet_id": subnet, "port": 8080, "price_per_hour": 0.805,
                      "health_timeout_s": 120},
        "variants": [v for v in llama["variants"] if v["name"] in variants],
    } for i in range(n_targets)]
    path = tmp / "ec2-hosts.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=3)
    parser.add_argument("--variants", default="f16,q8_0")
    # enough for each host's units to outlast EC2's 60 s billing minimum
    parser.add_argument("--requests", type=int, default=1000, help="per cell")
    parser.add_argument("--output-tokens", type=int, default=64, help="per request")
    args = parser.parse_args()

    import boto3
    from ec2_hosts import StandInHosts, namespaces_available
    from moto.server import ThreadedMotoServer
    from servebench.provision.local import free_port

    why = namespaces_available()
    if why:
        sys.exit(f"no network namespaces here: {why}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-ec2-"))
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update({
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_DEFAULT_REGION": REGION,
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps({
            "conn_type": "aws", "login": "testing", "password": "testing-secret",
            "extra": {"region_name": REGION, "endpoint_url": endpoint}}),
        "SERVEBENCH_RESULTS_URI": str(tmp / "data"), "SERVEBENCH_WORK_DIR": str(tmp / "runs"),
    })
    for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "SLACK_BOT_TOKEN"):
        os.environ.pop(key, None)
    from servebench.settings import get_settings

    ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name=REGION)
    hosts = StandInHosts(endpoint, REGION, tmp / "hosts",
                         images={IMAGE: str(get_settings().llama_bin / "llama-server")})
    try:
        with hosts:
            subnet = hosts.network()
            ami = ec2.describe_images()["Images"][0]["ImageId"]
            path = sweep(tmp, subnet, ami, args.targets, args.variants.split(","),
                         args.requests, args.output_tokens)
            report(path)
    finally:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset",
                                                      method="POST"), timeout=10).close()
        server.stop()


def report(path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from servebench.results.store import ResultStore

    dag = DagBag(dag_folder=str(ROOT / "dags")).dags["nightly_benchmark"]
    t0 = time.monotonic()
    dag_run = dag.test(run_conf={"sweep": str(path)})
    wall_s = time.monotonic() - t0
    if dag_run.state != "success":
        sys.exit(f"the run ended {dag_run.state}")
    store = ResultStore(os.environ["SERVEBENCH_RESULTS_URI"])
    run = store.read_table("runs").to_pylist()[-1]
    started = run["started_at"]
    print(f"run {run['run_id']}: {run['n_ok']}/{run['n_cells']} cells ok, "
          f"wall {wall_s:.0f} s (tasks one at a time)")
    print(f"{'instance':<22} {'target':<8} {'launched':>9} {'ended':>9} {'up s':>6} "
          f"{'billed s':>9}")
    for host in sorted(store.read_table("hosts").to_pylist(), key=lambda h: h["launched_at"]):
        rel = [(t - started).total_seconds() if isinstance(t, dt.datetime) else float("nan")
               for t in (host["launched_at"], host["ended_at"])]
        print(f"{host['host']:<22} {host['target']:<8} {rel[0]:>+8.0f}s {rel[1]:>+8.0f}s "
              f"{rel[1] - rel[0]:>6.0f} {host['billed_s']:>9.0f}")
    print(f"paid instance-seconds {run['paid_s']:.0f}, measured {run['measure_s']:.0f}, "
          f"sweep efficiency {run['sweep_efficiency']:.3f}, paid ${run['paid_usd']:.4f}")


if __name__ == "__main__":
    main()
