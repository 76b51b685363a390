"""Fixtures for tests against real servers on loopback."""

import socket

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_endpoint(monkeypatch):
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(k, raising=False)
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
    try:
        yield endpoint
    finally:
        # moto keeps its state per process, not per server: reset it for the next test
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset",
                                                      method="POST"), timeout=10).close()
        server.stop()
