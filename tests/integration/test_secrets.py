"""Secrets never leave the places they are read from: a nightly DAG run with known fake AWS
keys (results on S3, moto on loopback), a Slack bot token (a local Slack Web API) and an API
key for a static endpoint (a llama-server that demands it). Every byte the run wrote -- every
object in the bucket with its Parquet decoded, the run's work folder and server logs, the
digest and HTML report, what Slack was sent, the Airflow metadata database and everything
the run logged -- is scanned: none holds any of them. The keys were really used: the results
are on S3, Slack got the digest with the token, and the keyed server served the cells."""

import io
import json
import os
from pathlib import Path

import boto3
import pyarrow.parquet as pq
import pytest
import yaml
from measured import assert_measured
from servebench.config import parse_sweep
from servebench.provision.local import LocalProvisioner
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.stacks import get_stack

pytestmark = pytest.mark.integration

SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIAFAKESECRETSCAN42",
    "AWS_SECRET_ACCESS_KEY": "fakeSecretScan/4242/notARealAwsSecretKeyAtAll",
    "SLACK_BOT_TOKEN": "xoxb-4242-fake-secret-scan-slack-token",
    "BOX_KEY": "sk-fake-secret-scan-endpoint-key-4242",
}
MODEL = "build/models/adder-3m-q8_0.gguf"


@pytest.fixture
def keyed_server(tmp_path):
    """A llama-server that answers only requests carrying BOX_KEY (llama.cpp's --api-key)."""
    spec = parse_sweep({**yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml")
                                        .read_text()), "cross_stack": []}, "local")
    target = next(t for t in spec.targets if t.stack == "llama_cpp")
    variant = next(v for v in target.variants if v.model == MODEL)
    variant = variant.model_copy(update={"extra_args": ["--api-key", SECRETS["BOX_KEY"]]})
    owner = LocalProvisioner(tmp_path / "owner", get_settings())
    endpoint = owner.launch("keyed", target, variant, get_stack("llama_cpp"))
    try:
        yield endpoint
    finally:
        owner.stop(endpoint)


def _sweep(build, path: Path, server) -> str:
    data = build([{
        "name": "keyed-box", "stack": "llama_cpp", "golden_sets": ["addition"],
        "provision": {"kind": "static", "hardware": "a keyed llama-server on loopback"},
        "variants": [{"name": "keyed", "model": server.served_model,
                      "endpoint": {"base_url": server.base_url, "api_key_env": "BOX_KEY"}}],
    }], input_tokens=32, output_tokens=32, num_requests=8, concurrency=2, name="secrets")
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _leaks(name: str, data: bytes) -> list[str]:
    return [f"{name} holds {key}" for key, value in SECRETS.items() if value.encode() in data]


def test_no_secret_is_written_anywhere(tmp_path, s3_endpoint, slack_server, keyed_server,
                                       local_sweep, monkeypatch, capfd, caplog):
    from airflow.dag_processing.dagbag import DagBag

    slack_url, slack_calls, _ = slack_server
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", "s3://bench/secrets")
    monkeypatch.setenv("SERVEBENCH_S3_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SERVEBENCH_SLACK_BASE_URL", slack_url + "/")
    dag = DagBag(dag_folder=str(PROJECT_ROOT / "dags")).dags["nightly_benchmark"]
    run = dag.test(run_conf={"sweep": _sweep(local_sweep, tmp_path / "sweep.yaml", keyed_server)})
    assert run.state == "success"

    leaks: list[str] = []
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="bench")
            for o in page.get("Contents", [])]
    cells = None
    for key in keys:
        body = s3.get_object(Bucket="bench", Key=key)["Body"].read()
        leaks += _leaks(f"s3://bench/{key}", body)
        if key.endswith(".parquet"):  # compressed: scan the decoded rows
            table = pq.read_table(io.BytesIO(body))
            leaks += _leaks(f"s3://bench/{key} (decoded)",
                            json.dumps(table.to_pylist(), default=str).encode())
            if key.startswith("secrets/cells/"):
                cells = table.to_pylist()
    for path in (tmp_path / "runs").rglob("*"):
        if path.is_file():
            leaks += _leaks(str(path), path.read_bytes())
    for call in slack_calls:
        if call["path"].startswith("/api/"):  # (file bytes go to a pre-signed upload URL)
            assert call["auth"] == f"Bearer {SECRETS['SLACK_BOT_TOKEN']}"  # used, only so
        leaks += _leaks(f"Slack {call['path']}", json.dumps(call["body"]).encode())
    conn = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]  # make test's: SQLite
    airflow_db = Path(conn.removeprefix("sqlite:///"))
    assert conn.startswith("sqlite:///") and airflow_db.is_file(), conn
    leaks += _leaks(str(airflow_db), airflow_db.read_bytes())
    out, err = capfd.readouterr()
    leaks += _leaks("the run's stdout", out.encode()) + _leaks("the run's stderr", err.encode())
    leaks += _leaks("the run's log records", caplog.text.encode())
    assert not leaks, leaks

    # and every secret was really used: results on S3, the digest in Slack, the keyed server
    assert any(k.startswith("secrets/_manifests/") for k in keys)
    assert any(c["path"].endswith("chat.postMessage") for c in slack_calls)
    assert_measured(cells)  # answered: the key was taken
