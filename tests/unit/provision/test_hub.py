"""The gated-model plan check, against a stand-in of the Hugging Face Hub's model API on
loopback (the Hub itself is out of reach here): a gated model without a token fails the plan
for ec2 and kubernetes targets, naming the field; with the token, an open model, a local
path, or a Hub that cannot be asked, the plan goes on."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from servebench.config import load_sweep
from servebench.hub import gated_model_problems, hub_gating, is_hub_id
from servebench.provision.ec2 import Ec2Provisioner
from servebench.provision.kubernetes import KubernetesProvisioner
from servebench.settings import Settings
from servebench.stacks import get_stack
from test_ec2 import EC2, _sweep

MODELS = {"meta-llama/Llama-3.1-8B-Instruct": "manual", "Qwen/Qwen2.5-7B-Instruct": False}


class HubApi(BaseHTTPRequestHandler):
    """GET /api/models/<owner>/<name>, as the Hub answers an anonymous caller: the model's
    info with its ``gated`` mode, or 401 RepoNotFound for one it does not show."""

    asked: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        repo = self.path.split("?")[0].removeprefix("/api/models/")
        HubApi.asked.append(repo)
        if repo in MODELS:
            body, status, headers = {"id": repo, "gated": MODELS[repo], "private": False}, 200, {}
        else:
            body, status = {"error": "Repository not found"}, 401
            headers = {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), HubApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    hub_gating.cache_clear()


def test_a_gated_model_without_a_token_fails_the_plan_of_a_provisioned_target(tmp_path, hub):
    settings = Settings(hub_endpoint=hub)
    target = load_sweep(_sweep(tmp_path, {**EC2, "aws_conn_id": "no_such_aws"})).targets[0]
    problems = Ec2Provisioner.check(target, target.variants[0], get_stack("vllm"), settings)
    assert problems == [
        "field provision.hf_token_parameter: model 'meta-llama/Llama-3.1-8B-Instruct' is gated "
        "(manual) on the Hub; without a token the server cannot download it and exits at "
        "launch"]
    with_token = load_sweep(_sweep(tmp_path, {**EC2, "aws_conn_id": "no_such_aws",
                                              "hf_token_parameter": "/hf/token"})).targets[0]
    assert Ec2Provisioner.check(with_token, with_token.variants[0], get_stack("vllm"),
                                settings) == []
    pod = load_sweep(_sweep(tmp_path, {"kind": "kubernetes"})).targets[0]
    [problem] = KubernetesProvisioner.check(pod, pod.variants[0], get_stack("vllm"), settings)
    assert problem.startswith("field provision.hf_token_secret: model 'meta-llama/")
    assert HubApi.asked.count("meta-llama/Llama-3.1-8B-Instruct") == 1  # asked once a plan


def test_an_open_model_a_local_one_and_a_missing_one(hub, tmp_path):
    def problems(model, has_token=False, endpoint=hub):
        return gated_model_problems(model, token_field="provision.hf_token_parameter",
                                    has_token=has_token, endpoint=endpoint)

    assert problems("Qwen/Qwen2.5-7B-Instruct") == []
    local = tmp_path / "models" / "adder"
    local.mkdir(parents=True)
    assert not is_hub_id(str(local)) and not is_hub_id("build/models/adder-f16.gguf")
    assert problems(str(local)) == []
    [missing] = problems("meta-llama/Llama-3.1-8B-Instuct")  # a typo
    assert missing.startswith("field model 'meta-llama/Llama-3.1-8B-Instuct': no such public "
                              "model on the Hub")
    assert problems("acme/private-model", has_token=True) == []  # its token may read it
    assert problems("meta-llama/Llama-3.1-8B-Instruct", endpoint="") == []  # not asked


def test_a_hub_that_cannot_be_asked_lets_the_plan_go_on(caplog):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert gated_model_problems("meta-llama/Llama-3.1-8B-Instruct", token_field="f",
                                has_token=False, endpoint=closed) == []
    assert "cannot be asked" in caplog.text
