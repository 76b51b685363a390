"""The kubernetes provisioner's launch against an HTTP stand-in of the Kubernetes API.

A real API server cannot run here: kube-apiserver needs etcd and binaries this machine cannot
download (only PyPI, Debian and npm are reachable), and kind/k3d need a container engine it
does not have. So a small HTTP server on loopback answers the endpoints the provisioner calls
(create ConfigMap/Pod/Service, read the pod, list its events, list/delete by label) with the
JSON a real cluster sends for each accident -- the pod status, conditions and events copied
in shape from what the kubelet and scheduler write -- and the real ``kubernetes`` client reads
it through a kubeconfig. Most tests are a launch that cannot succeed, and must fail within a
minute in the API's own words, with its objects deleted at teardown; with a stand-in node
(``Kubelet``) the pods serve, as this host's llama-server, for the same morning's relaunches.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from servebench.config import load_sweep
from servebench.errors import LaunchError
from servebench.provision.kubernetes import KubernetesProvisioner
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.stacks import get_stack

pytestmark = pytest.mark.integration

NOW = "2026-12-04T02:00:00Z"
PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<kind>pods|services|configmaps|events)"
                  r"(?:/(?P<name>[^/]+))?$")


class StandInApi(ThreadingHTTPServer):
    """The API's objects in memory; every created pod takes ``status`` and ``events``, or
    with a ``kubelet`` the status of the process it runs for the pod."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.status: dict = {"phase": "Pending"}
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.kubelet: Kubelet | None = None


class Kubelet:
    """A node of the stand-in cluster: each pod created runs its container as the image's
    program on this host (``images``: image name -> executable, as the EC2 harness's docker
    shim maps them), its hostPath mounts mapped back to the host's paths in its arguments,
    binding the pod's port on loopback; Running and Ready once started, Failed with its exit
    code once the process ends, killed when the pod is deleted. ``started`` lists the pods
    in the order they were created."""

    def __init__(self, images: dict[str, str], logs: Path):
        self.images, self.logs = images, logs
        self.procs: dict[tuple[str, str], subprocess.Popen] = {}
        self.started: list[str] = []

    def start(self, ns: str, pod: dict) -> dict:
        [container] = pod["spec"]["containers"]
        exe = self.images[container["image"].split("@", 1)[0]]
        hosts = {v["name"]: v["hostPath"]["path"] for v in pod["spec"]["volumes"]
                 if "hostPath" in v}
        mounts = {m["mountPath"]: hosts[m["name"]] for m in container["volumeMounts"]
                  if m["name"] in hosts}

        def on_host(arg: str) -> str:
            for inside, host in mounts.items():
                if arg == inside or arg.startswith(inside + "/"):
                    return host + arg[len(inside):]
            return arg

        name = pod["metadata"]["name"]
        with open(self.logs / f"{name}.log", "wb") as log:
            self.procs[(ns, name)] = subprocess.Popen(
                [exe, *map(on_host, container.get("command", []) + container["args"])],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.started.append(name)
        return self.status(ns, name, container["image"])

    def status(self, ns: str, name: str, image: str) -> dict:
        code = self.procs[(ns, name)].poll()
        digest = "docker.io/" + image.split(":")[0] + "@sha256:" + "b" * 64
        if code is not None:
            return {"phase": "Failed", "containerStatuses": [{
                "name": "server", "ready": False, "restartCount": 0, "image": image,
                "imageID": digest, "state": {"terminated": {"reason": "Error",
                                                            "exitCode": code}}}]}
        return {"phase": "Running", "podIP": "127.0.0.1", "conditions": [
            {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "server", "ready": True, "restartCount": 0,
                                   "image": image, "imageID": digest,
                                   "state": {"running": {"startedAt": NOW}}}]}

    def stop(self, ns: str, name: str) -> None:
        proc = self.procs.pop((ns, name), None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop_all(self) -> None:
        for ns, name in list(self.procs):
            self.stop(ns, name)


def _selected(obj: dict, selector: str) -> bool:
    labels = obj["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, _, v in (p.partition("=") for p in
                                                   selector.split(",") if p))


class Handler(BaseHTTPRequestHandler):
    server: StandInApi

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self):
        url = urlparse(self.path)
        match = PATH.match(url.path)
        if not match:
            self._send(404, {"kind": "Status", "status": "Failure", "reason": "NotFound",
                             "code": 404, "message": f"{url.path} not served here"})
            return None
        return match["ns"], match["kind"], match["name"], parse_qs(url.query)

    def _not_found(self, kind: str, name: str) -> None:
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "reason": "NotFound", "code": 404,
                         "message": f'{kind} "{name}" not found'})

    def do_POST(self):
        route = self._route()
        if route is None:
            return
        ns, kind, _, _ = route
        obj = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        obj["metadata"].update(uid=f"uid-{len(self.server.objects)}", creationTimestamp=NOW,
                               resourceVersion="1")
        if kind == "pods":
            kubelet = self.server.kubelet
            obj["status"] = kubelet.start(ns, obj) if kubelet else self.server.status
            if kubelet:  # scheduled on its one node
                obj["spec"]["nodeName"] = "node-1"
        with self.server.lock:
            self.server.objects[(ns, kind, obj["metadata"]["name"])] = obj
        self._send(201, obj)

    def do_GET(self):
        route = self._route()
        if route is None:
            return
        ns, kind, name, query = route
        if kind == "events":
            wanted = dict(p.split("=", 1) for p in query["fieldSelector"][0].split(","))
            items = [{"metadata": {"name": f"{wanted['involvedObject.name']}.{i}",
                                   "namespace": ns},
                      "involvedObject": {"kind": "Pod", "namespace": ns,
                                         "name": wanted["involvedObject.name"]},
                      "lastTimestamp": NOW, **event}
                     for i, event in enumerate(self.server.events)
                     if (ns, "pods", wanted["involvedObject.name"]) in self.server.objects]
            self._send(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {},
                             "items": items})
            return
        if name:
            obj = self.server.objects.get((ns, kind, name))
            if obj and kind == "pods" and self.server.kubelet:  # what its process is doing
                obj["status"] = self.server.kubelet.status(
                    ns, name, obj["spec"]["containers"][0]["image"])
            self._send(200, obj) if obj else self._not_found(kind, name)
            return
        selector = query.get("labelSelector", [""])[0]
        items = [o for (n, k, _), o in list(self.server.objects.items())
                 if n == ns and k == kind and _selected(o, selector)]
        self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items})

    def do_DELETE(self):
        route = self._route()
        if route is None:
            return
        ns, kind, name, _ = route
        with self.server.lock:
            obj = self.server.objects.pop((ns, kind, name), None)
        if obj is None:
            self._not_found(kind, name)
            return
        if kind == "pods" and self.server.kubelet:
            self.server.kubelet.stop(ns, name)
        self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """The stand-in API on loopback and a kubeconfig that reaches it: (api, kubeconfig)."""
    api = StandInApi()
    threading.Thread(target=api.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
        "clusters": [{"name": "stand-in", "cluster": {
            "server": f"http://127.0.0.1:{api.server_address[1]}"}}],
        "users": [{"name": "bench", "user": {}}],
        "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "bench"}}],
    }))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in-cluster
    yield api, str(kubeconfig)
    api.shutdown()


def _launch(tmp_path, cluster, **provision):
    """Launches the one vLLM variant on the stand-in cluster: (LaunchError, seconds)."""
    api, kubeconfig = cluster
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["cross_stack"] = []
    data["targets"] = [{"name": "llama8b", "stack": "vllm", "golden_sets": [],
                        "provision": {"kind": "kubernetes", "namespace": "bench",
                                      "kubeconfig": kubeconfig, "hf_token_secret": "hf",
                                      "health_timeout_s": 900, **provision},
                        "variants": [{"name": "bf16",
                                      "model": "meta-llama/Llama-3.1-8B-Instruct"}]}]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    target = load_sweep(path).targets[0]
    state = KubernetesProvisioner.acquire("k8s-run", [target], get_settings(), dag_id="d")
    provisioner = KubernetesProvisioner.attach("k8s-run", state, get_settings())
    began = time.monotonic()
    with pytest.raises(LaunchError) as failed:
        provisioner.launch("llama8b/bf16", target, target.variants[0], get_stack("vllm"))
    took = time.monotonic() - began
    gone = KubernetesProvisioner.attach("k8s-run", state, get_settings()).teardown()
    assert any(g.startswith("pod bench/") for g in gone)  # no object outlives its unit
    assert not [k for k in api.objects if k[1] == "pods"]
    return str(failed.value), took


def _waiting(reason: str, message: str) -> dict:
    return {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "True"},
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [{"name": "server", "ready": False, "restartCount": 0,
                               "image": "vllm/vllm-openai:v9.9.9", "imageID": "",
                               "state": {"waiting": {"reason": reason, "message": message}}}]}


def _unschedulable() -> dict:
    return {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 "
                   "nodes are available: 3 No preemption victims found for incoming pod."}]}


def _event(reason: str, message: str, type_: str = "Warning", **fields) -> dict:
    """An event of the pod: ``fields`` (its source, times) as the API writes them."""
    return {"type": type_, "reason": reason, "message": message, **fields}


def test_an_image_that_cannot_be_pulled_fails_in_the_kubelets_words(tmp_path, cluster):
    api = cluster[0]
    api.status = _waiting("ImagePullBackOff", 'Back-off pulling image "vllm/vllm-openai:v9.9.9"')
    api.events = [_event("Scheduled", "Successfully assigned bench/x to gpu-1", "Normal"),
                  _event("Failed", 'Failed to pull image "vllm/vllm-openai:v9.9.9": not found')]
    why, took = _launch(tmp_path, cluster)
    assert "cannot start: server: ImagePullBackOff" in why, why
    assert "Failed to pull image" in why and "not found" in why, why
    assert "Successfully assigned" not in why  # only the warnings
    assert took < 60


def test_a_missing_secret_fails_at_once(tmp_path, cluster):
    api = cluster[0]
    api.status = _waiting("CreateContainerConfigError", 'secret "hf" not found')
    why, took = _launch(tmp_path, cluster)
    assert 'CreateContainerConfigError: secret "hf" not found' in why, why
    assert took < 60


def test_an_unschedulable_pod_fails_after_its_grace_unless_a_node_is_coming(tmp_path, cluster):
    api = cluster[0]
    api.status = _unschedulable()
    api.events = [_event("FailedScheduling", "0/3 nodes are available: 3 Insufficient "
                                             "nvidia.com/gpu.")]
    why, took = _launch(tmp_path, cluster, unschedulable_grace_s=3)
    assert "not scheduled within 3 s (provision.unschedulable_grace_s)" in why, why
    assert "3 Insufficient nvidia.com/gpu" in why and 3 <= took < 60

    api.events.append(_event("NotTriggerScaleUp", "pod didn't trigger scale-up: 2 max node "
                                                  "group size reached", "Normal"))
    why, took = _launch(tmp_path, cluster, unschedulable_grace_s=600)
    assert "the cluster autoscaler will not add a node" in why, why
    assert took < 60


def test_a_pod_karpenter_is_adding_a_node_for_waits_to_its_deadline(tmp_path, cluster):
    """Karpenter's Nominated (posted through the events.k8s.io API: eventTime and series),
    later than its own FailedScheduling and followed by the kube-scheduler's, holds the pod
    past unschedulable_grace_s to health_timeout_s; a later FailedScheduling of Karpenter's
    fails it at once, in Karpenter's words."""
    api = cluster[0]
    api.status = _unschedulable()
    karpenter = {"source": {"component": "karpenter"}}
    api.events = [
        _event("FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
               source={"component": "default-scheduler"}, lastTimestamp="2026-12-04T02:06:00Z"),
        _event("Nominated", "Pod should schedule on: nodeclaim/gpu-x7k2p", "Normal",
               lastTimestamp=None, reportingComponent="karpenter",
               eventTime="2026-12-04T01:58:00.000000Z",
               series={"count": 2, "lastObservedTime": "2026-12-04T02:05:00.000000Z"}),
        _event("FailedScheduling", 'Failed to schedule pod, incompatible with nodepool "gpu", '
               "all available instance types exceed limits for nodepool",
               lastTimestamp="2026-12-04T02:01:00Z", **karpenter)]
    why, took = _launch(tmp_path, cluster, unschedulable_grace_s=1, health_timeout_s=5)
    assert "not healthy after 5s" in why and "unschedulable_grace_s" not in why, why
    assert 5 <= took < 60

    api.events[2]["lastTimestamp"] = "2026-12-04T02:09:00Z"
    why, took = _launch(tmp_path, cluster, unschedulable_grace_s=600)
    assert 'Karpenter will not add a node (FailedScheduling: Failed to schedule pod, ' \
           'incompatible with nodepool "gpu"' in why, why
    assert took < 60


def test_a_pod_killed_for_memory_fails_with_its_reason(tmp_path, cluster):
    api = cluster[0]
    api.status = {"phase": "Failed", "containerStatuses": [{
        "name": "server", "ready": False, "restartCount": 0, "image": "vllm/vllm-openai:v0.11",
        "imageID": "docker.io/vllm/vllm-openai@sha256:" + "a" * 64,
        "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}
    why, took = _launch(tmp_path, cluster)
    assert "Failed: server: OOMKilled (exit 137)" in why, why
    assert took < 60


# a Service's name (<name>.<namespace>.svc) resolves to loopback, where the stand-in node's
# pods bind their ports (this machine's resolver cannot be given a cluster's names)
CLUSTER_DNS = """\
import socket

_resolve = socket.getaddrinfo


def _cluster_dns(host, *args, **kwargs):
    if isinstance(host, str) and host.endswith(".svc"):
        host = "127.0.0.1"
    return _resolve(host, *args, **kwargs)


socket.getaddrinfo = _cluster_dns

try:  # uvloop resolves through libuv, not socket: its loop's getaddrinfo, alike
    import uvloop
except ImportError:
    pass
else:
    class _Loop(uvloop.Loop):
        async def getaddrinfo(self, host, *args, **kwargs):
            if isinstance(host, str) and host.endswith(".svc"):
                host = "127.0.0.1"
            return await super().getaddrinfo(host, *args, **kwargs)

    uvloop.new_event_loop = _Loop
"""


@pytest.fixture
def serving(cluster, tmp_path, monkeypatch):
    """The stand-in cluster with a node that runs the llama.cpp image's pods as this host's
    llama-server, each Service's name (``<pod>.<namespace>.svc``) resolving to loopback as
    the cluster's DNS would to its ClusterIP: (api, kubeconfig, kubelet)."""
    api, kubeconfig = cluster
    from servebench.stacks.llama_cpp import DEFAULT_IMAGE

    server = get_settings().llama_bin / "llama-server"  # `make setup` built it
    api.kubelet = Kubelet({DEFAULT_IMAGE.split("@", 1)[0]: str(server)}, tmp_path)
    # in this process and in the processes it starts (the load generator's clients)
    dns = tmp_path / "cluster-dns"
    dns.mkdir()
    (dns / "sitecustomize.py").write_text(CLUSTER_DNS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(dns), os.environ.get("PYTHONPATH")])))
    import uvloop

    # the same resolver here, undone after the test (setattr keeps what it replaces)
    monkeypatch.setattr(socket, "getaddrinfo", socket.getaddrinfo)
    monkeypatch.setattr(uvloop, "new_event_loop", uvloop.new_event_loop)
    exec(CLUSTER_DNS, {})  # noqa: S102 -- the sitecustomize above, in this process
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    try:
        yield api, kubeconfig, api.kubelet
    finally:
        api.kubelet.stop_all()


def test_a_suspect_is_relaunched_as_new_pods_beside_its_reference(tmp_path, serving,
                                                                 local_sweep):
    """The same morning's relaunches on kubernetes: the units' pods were deleted as each was
    done; the confirm's relaunches of a suspect and its reference are new pods on the
    cluster, created ABBA (reference, suspect, suspect, reference), each measuring the
    suspect's cell through its Service, each deleted when measured -- nothing left after."""
    from relaunched import relaunch_suspect
    from servebench import pipeline
    from servebench.plan import Plan

    api, kubeconfig, kubelet = serving
    local = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    llama = next(t for t in local["targets"] if t["stack"] == "llama_cpp")
    data = local_sweep([{
        "name": "adder-k8s", "stack": "llama_cpp", "baseline": "f16", "golden_sets": [],
        "provision": {"kind": "kubernetes", "namespace": "bench", "kubeconfig": kubeconfig,
                      "port": _free_port(), "cpu": "1", "memory": "2Gi",
                      "health_timeout_s": 60},
        "variants": [v for v in llama["variants"] if v["name"] in ("f16", "q8_0")],
    }], input_tokens=32, output_tokens=8, num_requests=8, concurrency=2, name="k8s-held")
    path = tmp_path / "k8s.yaml"
    path.write_text(yaml.safe_dump(data))
    run_id = "k8s-confirm"
    plan = Plan.from_xcom(pipeline.plan_run(str(path)))
    provisioned = pipeline.provision(plan, run_id)
    [host] = plan.hosts()
    summary = pipeline.bench_host(plan, host, provisioned, run_id)
    assert all(u.get("ok") for u in summary["units"].values()), summary
    pipeline.teardown_run(provisioned, run_id, plan)
    assert len(kubelet.started) == 2 and not kubelet.procs  # each unit's pod, deleted
    relaunch_suspect(plan, run_id, "adder-k8s", launches=2)
    # four new pods, ABBA, each deleted once measured; nothing of the run left
    relaunched = kubelet.started[2:]
    assert ["f16" if "-f16-" in name else "q8_0" for name in relaunched] == [
        "f16", "q8_0", "q8_0", "f16"], relaunched
    assert not kubelet.procs and not [k for k in api.objects if k[1] == "pods"]
    assert pipeline.release_held(provisioned, run_id, plan) == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
