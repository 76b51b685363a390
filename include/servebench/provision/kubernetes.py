"""The Kubernetes provisioner (``provision: {kind: kubernetes, namespace: ...}``).

Each variant runs as a Pod built from the stack adapter's container (``ContainerLaunch``:
image, entrypoint -> ``command``, arguments -> ``args``, ``nvidia.com/gpu`` limits, ``/dev/shm``
as a memory volume, the weights' cache, option files from a ConfigMap), behind a ClusterIP
Service; the worker (a pod of the same cluster, or anywhere its DNS resolves the service)
reaches it at ``http://<service>.<namespace>.svc:<port>``. The pod, service and config map are
deleted when the variant is done; the teardown deletes whatever of the run is left, found by
label; the janitor deletes what is past its ``servebench/expires-at`` annotation or whose DAG
run is no longer running.

Labels carry a hash of the run id (label values allow neither ``:`` nor ``+``); the run id,
DAG id and target are annotations. Credentials: in-cluster service account, else the
kubeconfig (``kubeconfig``, ``context``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
import time
from typing import TYPE_CHECKING

from servebench.config import KubernetesProvision
from servebench.endpoint import Endpoint
from servebench.hub import gated_model_problems, hub_cache_dir
from servebench.memory import MemorySample
from servebench.provenance import gpus_from_node_labels
from servebench.provision.interface import (
    LaunchError,
    Provisioner,
    Reaped,
    container_problems,
    poll_health,
    project_provisions,
    register_provisioner,
    served_engine_version,
)

if TYPE_CHECKING:
    from servebench.config import TargetSpec
    from servebench.settings import Settings
    from servebench.stacks.adapter import ContainerLaunch, StackAdapter

log = logging.getLogger(__name__)

APP_LABEL = {"app.kubernetes.io/part-of": "servebench"}
RUN_LABEL = "servebench/run"
EXPIRES = "servebench/expires-at"
CACHE_IN_POD = "/servebench-cache"


def run_label(run_id: str) -> str:
    """A label value for ``run_id`` (63 characters of [a-z0-9]): its hash."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:16]


def object_name(target: str, variant: str, run_id: str) -> str:
    """A DNS-1035 name for a variant's pod and service (<= 63, [a-z0-9-], a letter first)."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{target}-{variant}".lower()).strip("-")
    return f"sb-{base[:40].rstrip('-')}-{run_label(run_id)[:8]}"


UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity_bytes(quantity: str) -> float:
    """A Kubernetes memory quantity (``64Gi``, ``500M``, ``1024``) in bytes."""
    number = quantity.rstrip("kMGTi")
    return float(number) * UNITS[quantity[len(number):]]


def shm_quantity(launch: ContainerLaunch) -> str:
    """The container's ``shm_size`` (Docker's ``16g``) as a Kubernetes quantity (``16Gi``)."""
    return (launch.shm_size or "0").upper().replace("G", "Gi")


def render(launch: ContainerLaunch, spec: KubernetesProvision, *, name: str, run_id: str,
           dag_id: str, target: str, hub_cache: str,
           now: dt.datetime | None = None) -> list[dict]:
    """The manifests of one variant: a ConfigMap (when the stack has option files), the Pod,
    its Service. ``hub_cache`` (the worker's Hugging Face cache) maps to the spec's
    ``model_cache_pvc`` (else an emptyDir): weights are fetched in the cluster."""
    now = now or dt.datetime.now(dt.UTC)
    expires = (now + dt.timedelta(hours=spec.ttl_hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {**APP_LABEL, RUN_LABEL: run_label(run_id), "servebench/unit": name}
    meta = {"name": name, "namespace": spec.namespace, "labels": labels,
            "annotations": {"servebench/run-id": run_id, "servebench/dag-id": dag_id or "-",
                            "servebench/target": target, EXPIRES: expires}}
    volumes, mounts = [], []
    for i, (host, inside) in enumerate(sorted(launch.volumes.items())):
        if host == hub_cache or host.startswith(hub_cache + "/"):
            source = ({"persistentVolumeClaim": {"claimName": spec.model_cache_pvc}}
                      if spec.model_cache_pvc else {"emptyDir": {}})
            sub = host[len(hub_cache):].lstrip("/")
            volumes.append({"name": f"cache-{i}", **source})
            mounts.append({"name": f"cache-{i}", "mountPath": inside,
                           **({"subPath": sub} if sub else {})})
        else:  # a path on the node (a model folder the node image carries)
            volumes.append({"name": f"host-{i}", "hostPath": {"path": host}})
            mounts.append({"name": f"host-{i}", "mountPath": inside, "readOnly": True})
    manifests: list[dict] = []
    if launch.files:
        keys = {inside: f"file-{i}" for i, inside in enumerate(sorted(launch.files))}
        manifests.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                          "data": {keys[p]: text for p, text in launch.files.items()}})
        volumes.append({"name": "files", "configMap": {"name": name}})
        mounts += [{"name": "files", "mountPath": p, "subPath": k, "readOnly": True}
                   for p, k in keys.items()]
    if launch.shm_size:
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory",
                                                     "sizeLimit": shm_quantity(launch)}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    env = [{"name": k, "value": v} for k, v in sorted(launch.env.items())]
    if spec.hf_token_secret:  # the token stays in the cluster's secret store
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": spec.hf_token_secret, "key": "token"}}})
    container = {
        "name": "server", "image": launch.image, "args": list(launch.command),
        "ports": [{"containerPort": launch.port, "name": "http"}],
        "env": env, "volumeMounts": mounts,
        # requests == limits (Guaranteed); a GPU is an extended resource: limits alone
        "resources": {"requests": {"cpu": spec.cpu, "memory": spec.memory},
                      "limits": {"cpu": spec.cpu, "memory": spec.memory,
                                 **({spec.gpu_resource: launch.gpus} if launch.gpus else {})}},
        "readinessProbe": {"httpGet": {"path": launch.health_path, "port": "http"},
                           "periodSeconds": 5, "failureThreshold": 3},
    }
    if launch.entrypoint:
        container["command"] = list(launch.entrypoint)
    pod_spec: dict = {"restartPolicy": "Never", "containers": [container], "volumes": volumes,
                      "activeDeadlineSeconds": int(spec.ttl_hours * 3600)}
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in spec.tolerations]
    manifests.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec})
    manifests.append({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "type": "ClusterIP", "selector": {"servebench/unit": name, RUN_LABEL: labels[RUN_LABEL]},
        "ports": [{"port": launch.port, "targetPort": "http", "name": "http"}]}})
    return manifests


def _core_api(spec: KubernetesProvision):
    """CoreV1Api: the in-cluster service account, else the kubeconfig (file, context)."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        config.load_incluster_config()
    except ConfigException:
        config.load_kube_config(config_file=spec.kubeconfig, context=spec.context)
    return client.CoreV1Api()


def _spec(target: TargetSpec) -> KubernetesProvision:
    if not isinstance(target.provision, KubernetesProvision):
        raise TypeError(f"target {target.name!r} is not provisioned by kubernetes")
    return target.provision


@register_provisioner
class KubernetesProvisioner(Provisioner):
    kind = "kubernetes"

    def __init__(self, run_id: str, state: dict, settings: Settings):
        self.run_id, self.state, self.settings = run_id, state, settings
        self._launched: dict[str, tuple[KubernetesProvision, str]] = {}  # endpoint -> (spec, name)
        self._apis: dict[tuple, object] = {}  # (context, kubeconfig) -> CoreV1Api
        self._nodes: dict[str, str | None] = {}  # node -> its GPUs (gpus_from_node_labels)

    def _api(self, spec: KubernetesProvision):
        """The cluster's API client, loaded once per provisioner (exited() is asked per
        cell)."""
        key = (spec.context, spec.kubeconfig)
        if key not in self._apis:
            self._apis[key] = _core_api(spec)
        return self._apis[key]

    @classmethod
    def host_key(cls, target: TargetSpec) -> str:
        """A target's pods get GPUs of their own from the cluster: targets run side by side."""
        return f"kubernetes:{target.name}"

    @classmethod
    def acquire(cls, run_id, targets, settings, *, dag_id: str = "") -> dict:
        """Nothing is held between variants (the cluster schedules each pod); the state
        names where the run's objects live, for the teardown."""
        return {"dag_id": dag_id,
                "places": sorted({(_spec(t).namespace, _spec(t).context or "",
                                   _spec(t).kubeconfig or "") for t in targets})}

    @classmethod
    def attach(cls, run_id, state, settings) -> KubernetesProvisioner:
        return cls(run_id, state or {}, settings)

    @classmethod
    def check(cls, target, variant, adapter, settings) -> list[str]:
        """The container's checks (``interface.container_problems``), the gated model's and
        the pod's memory against its /dev/shm."""
        launch, problems = container_problems(adapter, variant, port=8000, settings=settings,
                                              kind="kubernetes")
        if launch is None:
            return problems
        spec = _spec(target)
        problems += gated_model_problems(variant.model, token_field="provision.hf_token_secret",
                                         has_token=bool(spec.hf_token_secret),
                                         endpoint=settings.hub_endpoint)
        if launch.shm_size and quantity_bytes(spec.memory) <= quantity_bytes(
                shm_quantity(launch)):
            problems.append(f"field provision.memory {spec.memory!r}: the pod's /dev/shm "
                            f"({shm_quantity(launch)}, memory-backed) counts against it; "
                            "leave room for the server itself")
        return problems

    def launch(self, name, target, variant, adapter) -> Endpoint:
        from kubernetes.client.exceptions import ApiException

        spec = _spec(target)
        launch = adapter.container_launch(variant, port=spec.port, settings=self.settings)
        obj = object_name(target.name, variant.name, self.run_id)
        manifests = render(launch, spec, name=obj, run_id=self.run_id,
                           dag_id=self.state.get("dag_id", ""), target=target.name,
                           hub_cache=str(hub_cache_dir()))
        api = self._api(spec)
        self._launched[name] = (spec, obj)
        creators = {"ConfigMap": api.create_namespaced_config_map,
                    "Pod": api.create_namespaced_pod, "Service": api.create_namespaced_service}
        try:
            for manifest in manifests:
                creators[manifest["kind"]](spec.namespace, manifest)
        except ApiException as exc:
            raise LaunchError(f"creating {obj} in {spec.namespace} failed: {exc.status} "
                              f"{exc.reason}", argv=launch.argv) from exc
        base_url = f"http://{obj}.{spec.namespace}.svc:{spec.port}"
        endpoint = Endpoint(base_url, launch.served_model, adapter.chat_path,
                            launch.metrics_path, argv=launch.argv, name=name)
        self._wait_healthy(endpoint, launch.health_path, spec, api, obj)
        return endpoint

    def _wait_healthy(self, endpoint: Endpoint, path: str, spec: KubernetesProvision, api,
                      obj: str) -> None:
        began = time.monotonic()
        try:
            last = poll_health(
                endpoint.base_url + path, began + spec.health_timeout_s, interval_s=2.0,
                ended=lambda: self._pod_ended(api, spec.namespace, obj,
                                              starting=(time.monotonic() - began, spec)))
        except LaunchError as exc:
            exc.argv = endpoint.argv
            raise
        if last is not None:
            raise LaunchError(f"{endpoint.base_url}{path} not healthy after "
                              f"{spec.health_timeout_s:g}s (last: {last})", argv=endpoint.argv)

    @staticmethod
    def _pod_ended(api, namespace: str, obj: str,
                   starting: tuple[float, KubernetesProvision] | None = None) -> str | None:
        """Why the pod has ended, or (``starting``: seconds since its launch, its spec) why it
        cannot start: the API's own words, with the pod's warning events. None while it runs
        or may still start."""
        from kubernetes.client.exceptions import ApiException

        try:
            pod = api.read_namespaced_pod(obj, namespace)
        except ApiException as exc:
            return f"pod {namespace}/{obj} is gone ({exc.status} {exc.reason})"
        why, events = pod_end_reason(pod), None
        if why is None and starting is not None:
            waited_s, spec = starting
            if _unscheduled(pod):  # the autoscaler's answer is in the events
                events = _events(api, namespace, obj, pod.metadata.uid)
            why = pod_start_blocker(pod, events or [], waited_s=waited_s,
                                    grace_s=spec.unschedulable_grace_s)
        if why is None:
            return None
        if events is None:
            events = _events(api, namespace, obj, pod.metadata.uid)
        warnings = [f"{e.reason}: {e.message}" for e in events if e.type == "Warning"][-3:]
        return f"pod {namespace}/{obj} {why}" + (
            f"; events: {' | '.join(warnings)}" if warnings else "")

    def exited(self, endpoint: Endpoint) -> str | None:
        if endpoint.name not in self._launched:
            return None
        spec, obj = self._launched[endpoint.name]
        return self._pod_ended(self._api(spec), spec.namespace, obj)

    def memory(self, endpoint: Endpoint) -> MemorySample:
        return MemorySample.unmeasured(
            "not sampled on kubernetes: the pod's processes run on a node this worker cannot "
            "read, and the metrics API's figure is a window's average, not a peak")

    def server_log(self, endpoint: Endpoint) -> str | None:
        """The pod's log from its start, its first 1 MB (where the engine reported its
        weights and KV cache)."""
        from kubernetes.client.exceptions import ApiException

        if endpoint.name not in self._launched:
            return None
        spec, obj = self._launched[endpoint.name]
        try:
            return self._api(spec).read_namespaced_pod_log(obj, spec.namespace,
                                                           limit_bytes=1 << 20)
        except ApiException as exc:
            log.warning("%s: pod %s/%s's log cannot be read (%s %s)", endpoint.name,
                        spec.namespace, obj, exc.status, exc.reason)
            return None

    def stop(self, endpoint: Endpoint) -> None:
        if endpoint.name in self._launched:
            spec, obj = self._launched.pop(endpoint.name)
            _delete(self._api(spec), spec.namespace, f"servebench/unit={obj}")

    def placement(self, endpoint: Endpoint) -> dict[str, str | None]:
        """The pod, its node, the image digest the kubelet pulled (``imageID``) and the
        node's GPUs from its GPU feature discovery labels."""
        from kubernetes.client.exceptions import ApiException

        if endpoint.name not in self._launched:
            return {"host": None, "image": None, "gpu": None}
        spec, obj = self._launched[endpoint.name]
        api = self._api(spec)
        try:
            pod = api.read_namespaced_pod(obj, spec.namespace)
        except ApiException:
            return {"host": f"{spec.namespace}/{obj}", "image": None, "gpu": None}
        statuses = pod.status.container_statuses or []
        image = statuses[0].image_id.split("://", 1)[-1] if statuses and \
            statuses[0].image_id else None
        return {"host": f"{spec.namespace}/{obj} on {pod.spec.node_name}", "image": image,
                "gpu": self._node_gpus(api, pod.spec.node_name)}

    def _node_gpus(self, api, node: str | None) -> str | None:
        """``provenance.gpus_from_node_labels`` of ``node``, read once per node (reading
        nodes needs ``get`` on ``nodes``: without it, no GPU facts, said once)."""
        from kubernetes.client.exceptions import ApiException

        if not node:
            return None
        if node not in self._nodes:
            try:
                labels = api.read_node(node).metadata.labels or {}
            except ApiException as exc:
                log.warning("node %s's GPU labels cannot be read (%s %s): cells record no "
                            "gpu", node, exc.status, exc.reason)
                labels = {}
            self._nodes[node] = gpus_from_node_labels(labels)
        return self._nodes[node]

    def hardware(self, target: TargetSpec) -> str:
        spec = _spec(target)
        return spec.hardware or f"kubernetes {spec.gpu_resource} ({spec.namespace})"

    def engine_version(self, adapter: StackAdapter, endpoint: Endpoint | None = None) -> str:
        return (served_engine_version(adapter, endpoint) if endpoint else None) \
            or "unknown (kubernetes pod)"

    @classmethod
    def reap_orphans(cls, settings, run_is_live, now) -> list[Reaped]:
        from kubernetes.client.exceptions import ApiException

        try:
            return reap(settings, run_is_live, now)
        except ApiException as exc:
            raise RuntimeError(f"reaping kubernetes pods failed: {exc.status} "
                               f"{exc.reason}") from exc

    def teardown(self, *, spare_held: bool = False) -> list[str]:  # it holds no machine
        gone = []
        for namespace, context, kubeconfig in self.state.get("places", []):
            spec = KubernetesProvision(kind="kubernetes", namespace=namespace,
                                       context=context or None, kubeconfig=kubeconfig or None)
            gone += _delete(self._api(spec), namespace,
                            f"{RUN_LABEL}={run_label(self.run_id)}")
        return gone


def _known_places(settings: Settings) -> set[tuple[str, str | None, str | None]]:
    """(namespace, context, kubeconfig) of every kubernetes target in the project's sweeps."""
    return {(p.namespace, p.context, p.kubeconfig)
            for p in project_provisions(settings, KubernetesProvision)}


def reap(settings: Settings, run_is_live, now: dt.datetime) -> list[Reaped]:
    """Deletes the project's pods past ``servebench/expires-at`` or of a DAG run no longer
    running (with their services and config maps)."""
    reaped = []
    for namespace, context, kubeconfig in sorted(_known_places(settings), key=str):
        spec = KubernetesProvision(kind="kubernetes", namespace=namespace, context=context,
                                   kubeconfig=kubeconfig)
        api = _core_api(spec)
        selector = ",".join(f"{k}={v}" for k, v in APP_LABEL.items())
        for pod in api.list_namespaced_pod(namespace, label_selector=selector).items:
            notes = pod.metadata.annotations or {}
            run_id, dag_id = notes.get("servebench/run-id", ""), notes.get("servebench/dag-id", "")
            expires = notes.get(EXPIRES)
            if expires and dt.datetime.fromisoformat(expires) <= now:
                reason = f"expired at {expires}"
            elif not run_is_live(dag_id, run_id):
                reason = f"its DAG run {dag_id}/{run_id} is no longer running"
            else:
                continue
            _delete(api, namespace, f"servebench/unit={pod.metadata.name}")
            reaped.append(Reaped(f"{namespace}/{pod.metadata.name}", "pod",
                                 context or "current context", run_id, dag_id,
                                 notes.get("servebench/target", ""),
                                 pod.metadata.creation_timestamp, reason))
    return reaped


# a container waiting for one of these does not start until someone changes something (the
# image name, a registry credential, a Secret or ConfigMap key); the kubelet only retries
FATAL_WAITING = frozenset({"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                           "CreateContainerConfigError", "CreateContainerError",
                           "RunContainerError"})


def pod_end_reason(pod) -> str | None:
    """A pod that has ended (``Failed``/``Succeeded``: restartPolicy Never), in its
    containers' terminated reasons and exit codes."""
    if pod.status.phase not in ("Failed", "Succeeded"):
        return None
    why = [f"{s.name}: {s.state.terminated.reason} (exit {s.state.terminated.exit_code})"
           + (f": {s.state.terminated.message}" if s.state.terminated.message else "")
           for s in pod.status.container_statuses or [] if s.state and s.state.terminated]
    return f"{pod.status.phase}: {'; '.join(why) or pod.status.reason or 'no reason given'}"


def _unscheduled(pod) -> object | None:
    """The pod's PodScheduled=False condition, where the scheduler placed it nowhere."""
    return next((c for c in pod.status.conditions or []
                 if c.type == "PodScheduled" and c.status == "False"), None)


# The autoscalers' verdicts on an unschedulable pod, posted as the pod's events. The cluster
# autoscaler: TriggeredScaleUp (a node group is growing for it) and NotTriggerScaleUp (none
# will). Karpenter (its events' source, operator.AppName: "karpenter") posts Nominated ("Pod
# should schedule on: nodeclaim/<name>[, node/<name>]", Normal) once it has created or chosen
# a node for the pod, and FailedScheduling ("Failed to schedule pod, <why>", Warning) when no
# node pool can take it: kubernetes-sigs/karpenter v1.14.1 (6e7eab7), pkg/events/reason.go and
# pkg/controllers/provisioning/scheduling/events.go (NominatePodEvent,
# PodFailedToScheduleEvent; its NoCompatibleInstanceTypes goes to the NodePool and
# InsufficientCapacityError to the NodeClaim, not to the pod). The kube-scheduler's own
# FailedScheduling (source "default-scheduler") only says that no current node fits it: that
# is no verdict. Each autoscaler retries, so a verdict can change: the latest one holds.
CLUSTER_AUTOSCALER = {"TriggeredScaleUp": True, "NotTriggerScaleUp": False}
KARPENTER = {"Nominated": True, "FailedScheduling": False}  # where the source is "karpenter"
NEVER = dt.datetime.min.replace(tzinfo=dt.UTC)


def event_time(event) -> dt.datetime:
    """When ``event`` (a CoreV1Event) was last seen: its series' lastObservedTime, else its
    lastTimestamp (the core recorder's, updated on each repeat), eventTime (the events.k8s.io
    recorder's), firstTimestamp, the object's creationTimestamp; the earliest time where it
    carries none."""
    series, meta = event.series, event.metadata
    for when in (series.last_observed_time if series else None, event.last_timestamp,
                 event.event_time, event.first_timestamp,
                 meta.creation_timestamp if meta else None):
        if when is not None:
            return when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    return NEVER


def scaling_verdict(event) -> tuple[str, bool] | None:
    """(the autoscaler, whether it is adding a node for the pod) where ``event`` is an
    autoscaler's verdict (:data:`CLUSTER_AUTOSCALER`, :data:`KARPENTER`), else None."""
    if event.reason in CLUSTER_AUTOSCALER:  # reasons only the cluster autoscaler posts
        return "cluster autoscaler", CLUSTER_AUTOSCALER[event.reason]
    reporter = (event.source.component if event.source else None) or event.reporting_component
    if reporter == "karpenter" and event.reason in KARPENTER:
        return "Karpenter", KARPENTER[event.reason]
    return None


def latest_verdict(events: list):
    """The latest of ``events`` that is an autoscaler's verdict (:func:`scaling_verdict`), in
    time order (:func:`event_time`; the API's order among equal times); None where none is."""
    verdicts = [e for e in events if scaling_verdict(e)]
    return max(reversed(verdicts), key=event_time, default=None)


def pod_start_blocker(pod, events: list, *, waited_s: float, grace_s: float) -> str | None:
    """Why a pending pod will not start: a container waiting on a fatal reason
    (:data:`FATAL_WAITING`), or unschedulable -- at once where the latest autoscaler verdict
    (:func:`latest_verdict`) is that no node will be added for it (NotTriggerScaleUp,
    Karpenter's FailedScheduling), after ``grace_s`` where none has spoken, never while the
    latest is a scale-up under way (TriggeredScaleUp, Karpenter's Nominated): the readiness
    deadline bounds that wait."""
    for status in pod.status.container_statuses or []:
        waiting = status.state.waiting if status.state else None
        if waiting and waiting.reason in FATAL_WAITING:
            return (f"cannot start: {status.name}: {waiting.reason}: "
                    f"{waiting.message or 'no message'}")
    condition = _unscheduled(pod)
    if condition is None:
        return None
    said = f"{condition.reason or 'not scheduled'}: {condition.message or 'no message'}"
    verdict = latest_verdict(events)
    if verdict is None:
        if waited_s >= grace_s:
            return (f"not scheduled within {grace_s:g} s (provision.unschedulable_grace_s) "
                    f"and no node is being added for it: {said}")
        return None
    who, adding = scaling_verdict(verdict)
    if not adding:
        return (f"cannot be scheduled and the {who} will not add a node ({verdict.reason}: "
                f"{verdict.message or 'no message'}): {said}")
    return None


def _events(api, namespace: str, obj: str, uid: str | None = None) -> list:
    """The events of the pod named ``obj`` (of the one with ``uid``, where given: a retried
    unit's pod takes its name again, and the one before's events outlive it), oldest first
    (:func:`event_time`); none where the API will not list them (a role without ``events:
    list`` -- docs/provisioning.md gives the role), which only leaves the reasons without
    their events."""
    from kubernetes.client.exceptions import ApiException

    try:
        listed = api.list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={obj}")
    except ApiException as exc:
        log.warning("listing the events of %s/%s failed: %s %s", namespace, obj, exc.status,
                    exc.reason)
        return []
    return sorted((e for e in listed.items
                   if not (uid and e.involved_object and e.involved_object.uid
                           and e.involved_object.uid != uid)), key=event_time)


def _delete(api, namespace: str, selector: str) -> list[str]:
    """Deletes the pods, services and config maps matching ``selector``; their names."""
    gone = []
    for kind in ("pod", "service", "config_map"):
        listed = getattr(api, f"list_namespaced_{kind}")(namespace, label_selector=selector)
        for item in listed.items:
            getattr(api, f"delete_namespaced_{kind}")(item.metadata.name, namespace)
            gone.append(f"{kind} {namespace}/{item.metadata.name}")
    if gone:
        log.info("deleted %s", gone)
    return gone
