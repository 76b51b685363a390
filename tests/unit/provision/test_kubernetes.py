"""The kubernetes provisioner's manifests, rendered from each stack's container: what the
cluster would be asked to run. (Not run against a cluster here: see
docs/provisioning.md, "Kubernetes".)"""

import datetime as dt

import pytest
import yaml
from servebench.config import SpecError, load_sweep
from servebench.hub import hub_cache_dir
from servebench.provision import get_provisioner
from servebench.provision.kubernetes import object_name, render, run_label
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.stacks import get_stack

RUN = "scheduled__2026-12-01T02:00:00+00:00"
NOW = dt.datetime(2026, 12, 1, 2, 5, tzinfo=dt.UTC)
K8S = {"kind": "kubernetes", "namespace": "bench", "model_cache_pvc": "hf-cache",
       "hf_token_secret": "hf", "node_selector": {"gpu": "h100"},
       "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}


def _target(tmp_path, provision: dict, stack: str = "vllm", **variant):
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["cross_stack"] = []
    data["targets"] = [{"name": "llama8b", "stack": stack, "golden_sets": [],
                        "provision": provision,
                        "variants": [{"name": "bf16", "model": "meta-llama/Llama-3.1-8B-Instruct",
                                      **variant}]}]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_sweep(path).targets[0]


def _manifests(tmp_path, stack="vllm", provision=K8S, **variant):
    target = _target(tmp_path, provision, stack, **variant)
    launch = get_stack(stack).container_launch(target.variants[0], port=8000,
                                               settings=get_settings())
    docs = render(launch, target.provision, name=object_name("llama8b", "bf16", RUN),
                  run_id=RUN, dag_id="nightly_benchmark", target="llama8b",
                  hub_cache=str(hub_cache_dir()), now=NOW)
    return {d["kind"]: d for d in docs}, launch


def test_names_and_labels_are_what_kubernetes_accepts():
    name = object_name("Llama_8B.vllm", "bf16+spec", RUN)
    assert len(name) <= 63 and name[0].isalpha()
    assert all(c.isalnum() or c == "-" for c in name) and name == name.lower()
    assert len(run_label(RUN)) == 16 and run_label(RUN).isalnum()


def test_a_vllm_pod_asks_for_its_gpus_and_serves_behind_a_service(tmp_path):
    docs, launch = _manifests(tmp_path, tensor_parallel_size=2)
    pod, svc = docs["Pod"], docs["Service"]
    meta = pod["metadata"]
    assert meta["namespace"] == "bench"
    assert meta["labels"]["servebench/run"] == run_label(RUN)
    assert meta["annotations"]["servebench/run-id"] == RUN
    assert meta["annotations"]["servebench/expires-at"] == "2026-12-01T10:05:00Z"
    [c] = pod["spec"]["containers"]
    assert c["image"] == launch.image and c["command"] == ["vllm", "serve"]
    assert c["args"] == launch.command
    # requests == limits: Guaranteed, not the first pod evicted (the GPU only in limits)
    assert c["resources"] == {"requests": {"cpu": "8", "memory": "64Gi"},
                              "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 2}}
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["activeDeadlineSeconds"] == 8 * 3600
    assert pod["spec"]["nodeSelector"] == {"gpu": "h100"}
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    cache = mounts["/root/.cache/huggingface"]
    assert volumes[cache["name"]]["persistentVolumeClaim"]["claimName"] == "hf-cache"
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"] == {"medium": "Memory",
                                                              "sizeLimit": "16Gi"}
    # the token comes from the cluster's secret, never as a value
    [token] = [e for e in c["env"] if e["name"] == "HF_TOKEN"]
    assert "value" not in token and token["valueFrom"]["secretKeyRef"]["name"] == "hf"
    assert svc["spec"]["selector"]["servebench/unit"] == meta["name"]
    assert svc["spec"]["ports"][0]["port"] == 8000


def test_tgi_keeps_its_entrypoint_and_trtllm_its_options_file(tmp_path):
    docs, _ = _manifests(tmp_path, stack="tgi")
    [c] = docs["Pod"]["spec"]["containers"]
    assert "command" not in c  # the image's own /tgi-entrypoint.sh
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert "/data/hub" in mounts
    docs, launch = _manifests(tmp_path, stack="trtllm")
    [(path, text)] = launch.files.items()
    assert list(docs["ConfigMap"]["data"].values()) == [text]
    [c] = docs["Pod"]["spec"]["containers"]
    [mount] = [m for m in c["volumeMounts"] if m["mountPath"] == path]
    assert mount["readOnly"] and mount["name"] == "files"


def test_the_kind_is_chosen_by_the_spec_and_checked_at_plan(tmp_path):
    target = _target(tmp_path, {"kind": "kubernetes"}, stack="transformers")
    assert target.provision_kind == "kubernetes"
    provisioner = get_provisioner("kubernetes")
    problems = provisioner.check(target, target.variants[0], get_stack("transformers"),
                                 get_settings())
    assert any("has no container launch" in p for p in problems)
    with pytest.raises(SpecError, match="provision.namespace"):
        _target(tmp_path, {"kind": "kubernetes", "namespace": "Not_Valid"})


def test_the_adapters_own_checks_run_at_plan_for_a_kubernetes_target(tmp_path):
    target = _target(tmp_path, K8S, stack="tgi",
                     speculative={"method": "draft", "num_speculative_tokens": 3,
                                  "draft_model": "Qwen/Qwen2.5-0.5B-Instruct"})
    problems = get_provisioner("kubernetes").check(target, target.variants[0], get_stack("tgi"),
                                                   get_settings())
    assert any(p.startswith("field speculative.method 'draft'") for p in problems), problems


def test_the_pods_memory_must_hold_its_shared_memory_volume(tmp_path):
    target = _target(tmp_path, {**K8S, "memory": "16Gi", "cpu": "500m"})
    problems = get_provisioner("kubernetes").check(target, target.variants[0],
                                                   get_stack("vllm"), get_settings())
    assert problems == ["field provision.memory '16Gi': the pod's /dev/shm (16Gi, "
                        "memory-backed) counts against it; leave room for the server itself"]
    target = _target(tmp_path, {**K8S, "memory": "96G"})
    assert get_provisioner("kubernetes").check(target, target.variants[0], get_stack("vllm"),
                                               get_settings()) == []
    with pytest.raises(SpecError, match="provision.memory"):
        _target(tmp_path, {**K8S, "memory": "lots"})


def test_an_unschedulable_pod_waits_for_a_scale_up_under_way_and_not_for_nothing():
    from types import SimpleNamespace

    from kubernetes.client import V1Pod, V1PodCondition, V1PodStatus
    from servebench.provision.kubernetes import pod_start_blocker

    pod = V1Pod(status=V1PodStatus(phase="Pending", conditions=[V1PodCondition(
        type="PodScheduled", status="False", reason="Unschedulable", message="0/3 nodes")]))
    scaling = [SimpleNamespace(reason="FailedScheduling"),
               SimpleNamespace(reason="TriggeredScaleUp")]
    assert pod_start_blocker(pod, scaling, waited_s=900, grace_s=60) is None
    assert pod_start_blocker(pod, [], waited_s=59, grace_s=60) is None
    assert "not scheduled within 60 s" in pod_start_blocker(pod, [], waited_s=61, grace_s=60)
    refused = [SimpleNamespace(reason="NotTriggerScaleUp")]
    assert "will not add a node" in pod_start_blocker(pod, refused, waited_s=1, grace_s=60)


def test_a_pods_cells_record_its_nodes_gpus_read_once_per_node(tmp_path):
    """placement() reads the pod's node's GPU feature discovery labels (once per node); a
    cluster that forbids reading nodes leaves ``gpu`` empty instead of failing the cell."""
    from types import SimpleNamespace

    from kubernetes.client.exceptions import ApiException
    from servebench.endpoint import Endpoint
    from servebench.provision.kubernetes import KubernetesProvisioner

    spec = _target(tmp_path, K8S).provision
    reads = []

    class Api:
        def read_namespaced_pod(self, name, namespace):
            status = SimpleNamespace(container_statuses=[SimpleNamespace(
                image_id="docker-pullable://vllm/vllm-openai@sha256:abc")])
            return SimpleNamespace(status=status, spec=SimpleNamespace(node_name=name[-1]))

        def read_node(self, node):
            reads.append(node)
            if node == "b":
                raise ApiException(status=403, reason="Forbidden")
            return SimpleNamespace(metadata=SimpleNamespace(labels={
                "nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "1"}))

    prov = KubernetesProvisioner("r", {}, get_settings())
    prov._apis[(spec.context, spec.kubeconfig)] = Api()
    got = []
    for name in ("pod-a", "pod-a", "pod-b"):
        prov._launched[name] = (spec, name)
        got.append(prov.placement(Endpoint("http://x", "m", "/v1/chat/completions", None,
                                           name=name)))
    assert [g["gpu"] for g in got] == ["1x NVIDIA-L4", "1x NVIDIA-L4", None]
    assert got[0]["image"] == "vllm/vllm-openai@sha256:abc" and reads == ["a", "b"]
