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


def _unschedulable_pod():
    from kubernetes.client import V1ObjectMeta, V1Pod, V1PodCondition, V1PodStatus

    return V1Pod(metadata=V1ObjectMeta(name="sb-pod", uid="uid-now"), status=V1PodStatus(
        phase="Pending", conditions=[V1PodCondition(
            type="PodScheduled", status="False", reason="Unschedulable",
            message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")]))


def _event(reason: str, minute: int, *, source: str, message: str = "", type_: str = "Normal",
           how: str = "lastTimestamp", uid: str = "uid-now"):
    """A pod's event as the API returns it, last seen at 02:``minute``: ``how`` names the
    field carrying that time (the core recorder's lastTimestamp, the events.k8s.io
    recorder's eventTime or series.lastObservedTime, or only metadata.creationTimestamp)."""
    from kubernetes.client import (
        CoreV1Event,
        CoreV1EventSeries,
        V1EventSource,
        V1ObjectMeta,
        V1ObjectReference,
    )

    when = dt.datetime(2026, 12, 4, 2, minute, tzinfo=dt.UTC)
    # a first sighting: before every last sighting, in the opposite order (a later-seen event
    # was first seen earlier)
    early = dt.datetime(2026, 12, 4, 1, 59 - minute, tzinfo=dt.UTC)
    times = {"lastTimestamp": {"last_timestamp": when, "first_timestamp": early},
             "eventTime": {"event_time": when, "reporting_component": source},
             "series": {"event_time": early, "reporting_component": source,
                        "series": CoreV1EventSeries(count=3, last_observed_time=when)},
             "creationTimestamp": {}}[how]
    return CoreV1Event(
        metadata=V1ObjectMeta(name=f"sb-pod.{minute}", creation_timestamp=when),
        involved_object=V1ObjectReference(kind="Pod", name="sb-pod", uid=uid),
        reason=reason, message=message, type=type_,
        source=None if how in ("eventTime", "series") else V1EventSource(component=source),
        **times)


def test_an_unschedulable_pod_waits_for_a_scale_up_under_way_and_not_for_nothing():
    from servebench.provision.kubernetes import pod_start_blocker

    pod = _unschedulable_pod()
    scaling = [_event("FailedScheduling", 1, source="default-scheduler", type_="Warning"),
               _event("TriggeredScaleUp", 2, source="cluster-autoscaler")]
    assert pod_start_blocker(pod, scaling, waited_s=900, grace_s=60) is None
    assert pod_start_blocker(pod, [], waited_s=59, grace_s=60) is None
    assert "not scheduled within 60 s" in pod_start_blocker(pod, [], waited_s=61, grace_s=60)
    refused = [_event("NotTriggerScaleUp", 1, source="cluster-autoscaler",
                      message="pod didn't trigger scale-up: 2 max node group size reached")]
    why = pod_start_blocker(pod, refused, waited_s=1, grace_s=60)
    assert "the cluster autoscaler will not add a node (NotTriggerScaleUp: pod didn't " \
           "trigger scale-up: 2 max node group size reached)" in why, why


@pytest.mark.parametrize("how", ["lastTimestamp", "eventTime", "series", "creationTimestamp"])
def test_the_latest_cluster_autoscaler_verdict_holds_whichever_field_dates_it(how):
    """A node group in backoff refuses (NotTriggerScaleUp), recovers and scales up
    (TriggeredScaleUp): the pod waits; refused again after that, it fails. The kube-scheduler's
    FailedScheduling, later than both, is no verdict. The events may come in any order."""
    from servebench.provision.kubernetes import pod_start_blocker

    pod = _unschedulable_pod()
    refused = _event("NotTriggerScaleUp", 1, source="cluster-autoscaler", how=how,
                     message="pod didn't trigger scale-up: 1 in backoff after failed scale-up")
    triggered = _event("TriggeredScaleUp", 5, source="cluster-autoscaler", how=how,
                       message="pod triggered scale-up: [{gpu-pool 0->1 (max: 2)}]")
    scheduler = _event("FailedScheduling", 9, source="default-scheduler", type_="Warning",
                       how=how, message="0/3 nodes are available")
    assert pod_start_blocker(pod, [triggered, scheduler, refused], waited_s=900,
                             grace_s=60) is None
    again = _event("NotTriggerScaleUp", 7, source="cluster-autoscaler", how=how,
                   message="pod didn't trigger scale-up: 2 max node group size reached")
    why = pod_start_blocker(pod, [again, refused, scheduler, triggered], waited_s=1,
                            grace_s=60)
    assert why and "will not add a node (NotTriggerScaleUp: pod didn't trigger scale-up: " \
                   "2 max node group size reached)" in why, why


def test_a_pod_karpenter_nominated_waits_past_its_grace_and_its_refusal_fails():
    """Karpenter's own events on a pod (kubernetes-sigs/karpenter v1.14.1,
    pkg/controllers/provisioning/scheduling/events.go): Nominated while the node it created
    comes up -- the pod waits past unschedulable_grace_s, to the readiness deadline --
    FailedScheduling where no node pool can take it -- the pod fails at once, in its words.
    The latest of them holds; a FailedScheduling from another source is no verdict."""
    from servebench.provision.kubernetes import pod_start_blocker

    pod = _unschedulable_pod()
    nominated = _event("Nominated", 3, source="karpenter",
                       message="Pod should schedule on: nodeclaim/gpu-x7k2p")
    refused = _event("FailedScheduling", 2, source="karpenter", type_="Warning",
                     message='Failed to schedule pod, incompatible with nodepool "gpu", '
                             "all available instance types exceed limits for nodepool")
    scheduler = _event("FailedScheduling", 8, source="default-scheduler", type_="Warning",
                       message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    for how in ("lastTimestamp", "eventTime"):
        late = _event("Nominated", 3, source="karpenter", how=how,
                      message="Pod should schedule on: nodeclaim/gpu-x7k2p")
        assert pod_start_blocker(pod, [refused, late, scheduler], waited_s=1700,
                                 grace_s=60) is None
    assert pod_start_blocker(pod, [nominated], waited_s=1700, grace_s=60) is None
    refused_later = _event("FailedScheduling", 6, source="karpenter", type_="Warning",
                           message=refused.message)
    why = pod_start_blocker(pod, [nominated, scheduler, refused_later], waited_s=1,
                            grace_s=60)
    assert why and "Karpenter will not add a node (FailedScheduling: Failed to schedule " \
                   'pod, incompatible with nodepool "gpu", all available instance types ' \
                   "exceed limits for nodepool)" in why, why
    # the scheduler's own FailedScheduling alone: nothing is scaling up, so the grace applies
    assert pod_start_blocker(pod, [scheduler], waited_s=1, grace_s=60) is None
    assert "not scheduled within 60 s" in pod_start_blocker(pod, [scheduler], waited_s=61,
                                                            grace_s=60)


def test_a_retried_units_pod_is_not_judged_by_the_events_of_the_pod_before_it():
    """A retry's pod takes the name of the try before's, whose events outlive it (an hour):
    only the events of the pod's own uid count, newest last."""
    from types import SimpleNamespace

    from servebench.provision.kubernetes import KubernetesProvisioner

    pod = _unschedulable_pod()
    before = _event("NotTriggerScaleUp", 1, source="cluster-autoscaler", uid="uid-before",
                    message="pod didn't trigger scale-up: 2 max node group size reached")
    scheduler = _event("FailedScheduling", 4, source="default-scheduler", type_="Warning",
                       message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    nominated = _event("Nominated", 3, source="karpenter",
                       message="Pod should schedule on: nodeclaim/gpu-x7k2p")
    spec = SimpleNamespace(unschedulable_grace_s=60)

    class Api:
        def __init__(self):
            self.events = [scheduler, before]

        def read_namespaced_pod(self, name, namespace):
            return pod

        def list_namespaced_event(self, namespace, field_selector):
            assert field_selector == "involvedObject.kind=Pod,involvedObject.name=sb-pod"
            return SimpleNamespace(items=self.events)

    api = Api()
    assert KubernetesProvisioner._pod_ended(api, "bench", "sb-pod", starting=(5, spec)) is None
    why = KubernetesProvisioner._pod_ended(api, "bench", "sb-pod", starting=(61, spec))
    assert "not scheduled within 60 s" in why and "NotTriggerScaleUp" not in why, why
    assert why.endswith("events: FailedScheduling: 0/3 nodes are available: 3 Insufficient "
                        "nvidia.com/gpu."), why
    api.events = [scheduler, nominated, before]
    assert KubernetesProvisioner._pod_ended(api, "bench", "sb-pod", starting=(900, spec)) is None


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
