"""Where a target's servers come from (a target's ``provision:``): local processes, servers
that already run, an EC2 instance (with its fallback placements) or Kubernetes pods."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from servebench.config.base import _Strict


class LocalProvision(_Strict):
    """Each variant's server is started as a process on the worker that runs its bench task,
    and stopped after it (the teardown task stops any that a crash left)."""

    kind: Literal["local"]
    health_timeout_s: float | None = Field(
        None, gt=0, description="how long a variant's server may take to answer its health "
        "check (weights loaded, kernels compiled); default: the setting "
        "SERVEBENCH_HEALTH_TIMEOUT_S (300), or 1800 for a GPU engine serving a hub "
        "checkpoint (a first start downloads it)")


class StaticProvision(_Strict):
    """Servers that already run -- a shared GPU box, a vLLM or llama.cpp server someone else
    runs, a hosted API: each variant names its own in ``endpoint``; nothing is launched or
    torn down; each is health-checked before its cells run. The variant's ``model`` must be
    the name the server answers with."""

    kind: Literal["static"]
    hardware: str | None = Field(
        None, description="what the servers run on, recorded as the cells' hardware (their "
        "trend series key on it); default: 'static endpoint <host>'")
    health_path: str | None = Field(
        None, description="probed (GET, 200) before use; default: the stack's own "
        "(/health; /models for openai_api)")
    metrics_path: str | None = Field(
        None, description="Prometheus metrics to scrape per cell; default: the stack's own "
        "(/metrics; /prometheus/metrics/ for trtllm); null: none")
    health_timeout_s: float = Field(60.0, gt=0)


class Ec2Fallback(_Strict):
    """Another way to the target's instance, tried in order when EC2 has no capacity or quota
    for the ones before (``InsufficientInstanceCapacity``, ``VcpuLimitExceeded``, ...): each
    field left unset keeps the target's own. Another instance type is other hardware: its
    cells are their own trend series, priced at its own price."""

    instance_type: str | None = Field(None, min_length=1)
    subnet_id: str | None = Field(None, pattern=r"^subnet-[0-9a-f]+$",
                                  description="another subnet (another availability zone)")
    market: Literal["on-demand", "spot"] | None = None
    price_per_hour: float | None = Field(
        None, ge=0, description="USD per hour of this placement (required with another "
        "instance type or market where the target names its price)")
    hardware: str | None = Field(None, description="the cells' hardware on it (required with "
                                 "another instance type where the target names its hardware)")


class Ec2Provision(_Strict):
    """One EC2 instance per target, launched by the setup task (boto3, credentials from the
    Airflow AWS connection), tagged for the janitor and terminated by the teardown task; each
    variant's container is started on it through SSM Run Command and reached over the
    instance's address. docs/provisioning.md ("EC2") lists the IAM permissions this needs."""

    kind: Literal["ec2"]
    instance_type: str = Field(min_length=1, description="e.g. p5.48xlarge, g6e.xlarge")
    ami: str | None = Field(None, pattern=r"^ami-[0-9a-f]+$",
                            description="image with Docker, the NVIDIA runtime and the SSM agent")
    launch_template: str | None = Field(
        None, description="launch template id (lt-...) or name, instead of ami")
    subnet_id: str | None = Field(None, pattern=r"^subnet-[0-9a-f]+$")
    security_group_ids: list[str] = Field(default_factory=list)
    instance_profile: str | None = Field(
        None, description="IAM instance profile (name or ARN) that lets the SSM agent work")
    market: Literal["on-demand", "spot"] = "on-demand"
    region: str | None = Field(None, description="default: the AWS connection's region")
    aws_conn_id: str = "aws_default"
    address: Literal["private", "public"] = Field(
        "private", description="which of the instance's addresses the worker reaches it by")
    port: int = Field(8000, ge=1, le=65535, description="host port the server is published on")
    price_per_hour: float | None = Field(
        None, ge=0, description="USD per hour of this instance type (default: the sweep's)")
    ttl_hours: float = Field(
        8.0, gt=0, description="the instance's tag expires_at = launch + ttl, moved to ttl "
        "from now at each unit's launch and while its units measure: the janitor terminates "
        "it after that whatever the run's state")
    hardware: str | None = Field(None, description="recorded as the cells' hardware; "
                                 "default: 'aws <instance_type>'")
    root_volume_gb: int | None = Field(
        None, ge=8, le=16384, description="root EBS volume size (GiB), where images and "
        "model_cache live: a 70B model's weights are ~140 GB (default: the AMI's)")
    root_volume_type: Literal["gp3", "gp2", "io1", "io2"] = "gp3"
    model_cache: str = Field("/opt/servebench/hub", description="host folder for weights, "
                             "mounted as the stack's hub cache (kept across variants)")
    instance_store: bool = Field(
        True, description="where the instance type has NVMe instance-store volumes, format "
        "them at the first launch (RAID 0 when several) and keep Docker's images and "
        "model_cache there instead of the root volume (ephemeral: gone with the instance)")
    hf_token_parameter: str | None = Field(
        None, description="SSM parameter (SecureString) the instance reads HF_TOKEN from; "
        "the token never travels in the command")
    health_timeout_s: float = Field(1800.0, gt=0, description="image pull + weight load")
    ssm_timeout_s: float = Field(
        600.0, gt=0, description="how long the instance's SSM agent may take to come online "
        "after the launch: past it the variant fails, naming the instance profile")
    max_instances: int | None = Field(
        None, ge=1, description="project instances of this target's instance types (its own "
        "and its fallbacks') that may run at once, this run's other targets included (your "
        "GPU quota): a launch waits for one to end, up to acquire_timeout_s")
    acquire_timeout_s: float = Field(3600.0, gt=0)
    fallbacks: list[Ec2Fallback] = Field(
        default_factory=list, description="placements tried in order when EC2 has no "
        "capacity or quota for the instance (other subnets/zones, instance types, spot -> "
        "on-demand)")

    @model_validator(mode="after")
    def _one_image(self) -> Ec2Provision:
        if (self.ami is None) == (self.launch_template is None):
            raise ValueError("exactly one of ami and launch_template")
        if self.root_volume_gb is not None and self.launch_template is not None:
            raise ValueError("root_volume_gb: with a launch_template, size the root volume "
                             "in the template")
        for i, fb in enumerate(self.fallbacks):
            other_type = fb.instance_type not in (None, self.instance_type)
            other_market = fb.market not in (None, self.market)
            if self.price_per_hour is not None and fb.price_per_hour is None \
                    and (other_type or other_market):
                raise ValueError(f"fallbacks[{i}].price_per_hour: another instance type or "
                                 "market has another price")
            if self.hardware is not None and fb.hardware is None and other_type:
                raise ValueError(f"fallbacks[{i}].hardware: another instance type is other "
                                 "hardware")
        return self

    def placements(self) -> list[Ec2Placement]:
        """Where the instance may come from, in the order tried: the target's own, then each
        fallback with what it leaves unset taken from the target."""
        own = Ec2Placement(instance_type=self.instance_type, subnet_id=self.subnet_id,
                           market=self.market, price_per_hour=self.price_per_hour,
                           hardware=self.hardware or f"aws {self.instance_type}")
        out = [own]
        for fb in self.fallbacks:
            itype = fb.instance_type or self.instance_type
            out.append(Ec2Placement(
                instance_type=itype, subnet_id=fb.subnet_id or self.subnet_id,
                market=fb.market or self.market,
                price_per_hour=fb.price_per_hour if fb.price_per_hour is not None
                else self.price_per_hour,
                hardware=fb.hardware or (self.hardware if itype == self.instance_type
                                         else None) or f"aws {itype}"))
        return out


class Ec2Placement(BaseModel):
    """One placement an EC2 target's instance is asked for (``Ec2Provision.placements``)."""

    instance_type: str
    subnet_id: str | None
    market: Literal["on-demand", "spot"]
    price_per_hour: float | None
    hardware: str


class KubernetesProvision(_Strict):
    """Each variant as a Pod (GPU limits, the stack's container) behind a ClusterIP Service
    in ``namespace``, reached at ``<service>.<namespace>.svc``: the worker runs in the
    cluster (or resolves its services). Deleted when the variant is done; the teardown and
    the janitor delete what is left, by label. docs/provisioning.md ("Kubernetes") says what
    was not run against a cluster here."""

    kind: Literal["kubernetes"]
    namespace: str = Field("default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    context: str | None = Field(None, description="kubeconfig context (default: in-cluster, "
                                "else the kubeconfig's current context)")
    kubeconfig: str | None = None
    port: int = Field(8000, ge=1, le=65535)
    gpu_resource: str = Field("nvidia.com/gpu", description="the device plugin's resource")
    # requests == limits: a Guaranteed pod, the last the kubelet evicts under node pressure
    cpu: str = Field("8", pattern=r"^[0-9]+(\.[0-9]+)?m?$",
                     description="the server container's CPU request and limit (cores, or "
                     "millicores with m)")
    memory: str = Field("64Gi", pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$",
                        description="the server container's memory request and limit; the "
                        "/dev/shm memory volume counts against it (the plan checks it fits)")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, str]] = Field(default_factory=list)
    model_cache_pvc: str | None = Field(
        None, description="PVC mounted as the hub cache (weights kept across variants and "
        "nights); default: an emptyDir per pod")
    hf_token_secret: str | None = Field(
        None, description="Secret whose key `token` becomes HF_TOKEN")
    price_per_hour: float | None = Field(None, ge=0)
    ttl_hours: float = Field(8.0, gt=0, description="the pod's activeDeadlineSeconds and "
                             "its expires-at annotation")
    hardware: str | None = None
    health_timeout_s: float = Field(1800.0, gt=0)
    unschedulable_grace_s: float = Field(
        60.0, gt=0, description="how long the pod may stay unschedulable, no autoscaler "
        "having spoken, before the variant fails; the latest autoscaler verdict among the pod's "
        "events decides instead: the cluster autoscaler's TriggeredScaleUp or Karpenter's "
        "Nominated (a node is coming) waits on (to health_timeout_s), its NotTriggerScaleUp or "
        "Karpenter's FailedScheduling fails at once")


Provision = Annotated[LocalProvision | StaticProvision | Ec2Provision | KubernetesProvision,
                      Field(discriminator="kind")]
# stacks that serve nothing themselves: only ever static
HOSTED_STACKS = frozenset({"openai_api"})
