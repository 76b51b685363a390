"""Fixtures for tests against real servers on loopback."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
import yaml
from servebench.settings import PROJECT_ROOT


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


@pytest.fixture
def slack_server():
    """A local Slack Web API: chat.postMessage, the files_upload_v2 flow
    (files.getUploadURLExternal -> POST to the upload URL -> files.completeUploadExternal), and
    scripted failures: ``script`` holds (status, body, headers) answers used before the good one."""
    calls = []
    script: list[tuple[int, dict, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            ctype = self.headers.get("Content-Type", "")
            if self.path.startswith("/upload/"):
                body = {"bytes": len(raw)}
            elif ctype.startswith("application/json"):
                body = json.loads(raw)
            else:
                body = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
            calls.append({"path": self.path, "auth": self.headers.get("Authorization"),
                          "body": body, "at": time.monotonic()})
            if script:
                status, reply, headers = script.pop(0)
            elif self.path.endswith("files.getUploadURLExternal"):
                n = sum(c["path"].endswith("getUploadURLExternal") for c in calls)
                host = f"http://127.0.0.1:{self.server.server_address[1]}"
                status, reply, headers = 200, {"ok": True, "file_id": f"F{n}",
                                               "upload_url": f"{host}/upload/F{n}"}, {}
            elif self.path.startswith("/upload/"):
                status, reply, headers = 200, None, {}
            elif self.path.endswith("files.completeUploadExternal"):
                files = body["files"] if isinstance(body["files"], list) else \
                    json.loads(body["files"])
                status, reply, headers = 200, {"ok": True, "files": [
                    {"id": f["id"], "title": f["title"]} for f in files]}, {}
            else:
                status, reply, headers = 200, {"ok": True, "channel": "C1",
                                               "ts": f"1700000000.{len(calls):06d}"}, {}
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(b"OK" if reply is None else json.dumps(reply).encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api", calls, script
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def local_sweep():
    """Builds a small sweep document from ``include/sweeps/local.yaml``: one fixed workload at
    one closed-loop concurrency, no cross-stack groups, the given targets."""
    def build(targets: list[dict], *, input_tokens: int, output_tokens: int, num_requests: int,
              concurrency: int, name: str | None = None, workload: str = "fixed") -> dict:
        data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
        if name:
            data["name"] = name
        data["workloads"] = [{"kind": "fixed", "name": workload, "input_tokens": input_tokens,
                              "output_tokens": output_tokens, "num_requests": num_requests}]
        data["load"]["concurrency"] = [concurrency]
        data["cross_stack"] = []
        # every target runs the one workload (a local.yaml target's own list names others)
        data["targets"] = [{k: v for k, v in t.items() if k != "workloads"} for t in targets]
        return data
    return build


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """A llama-server of the project's f16 model on loopback, started and stopped by the test
    module as someone else's server would be: the Endpoint it answers at."""
    from servebench.config import parse_sweep
    from servebench.provision.local import LocalProvisioner
    from servebench.settings import get_settings
    from servebench.stacks import get_stack

    settings = get_settings()
    spec = parse_sweep({**yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml")
                                        .read_text()), "cross_stack": []}, "local")
    target = next(t for t in spec.targets if t.stack == "llama_cpp")
    variant = next(v for v in target.variants if v.model == "build/models/adder-3m-f16.gguf")
    owner = LocalProvisioner(tmp_path_factory.mktemp("owner"), settings)
    endpoint = owner.launch("owner", target, variant, get_stack("llama_cpp"))
    try:
        yield endpoint
    finally:
        owner.stop(endpoint)
