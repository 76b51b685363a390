"""The EC2 provisioner (``provision: {kind: ec2, instance_type: ..., ami: ...}``).

One instance per target, launched by the setup task and terminated by the teardown task;
each variant of the target runs on it in turn, as the stack's container
(``StackAdapter.container_launch``) started through SSM Run Command, and is reached over the
instance's address. Every path ends with the instance gone:

- ``ClientToken`` is derived from (run_id, target, attempt): a retried setup task gets the
  instance the first try launched, never a second one;
- every instance is tagged ``project=servebench`` with its run_id, dag_id, target and
  ``expires_at``; the teardown task terminates by those tags (it needs no state from a setup
  task that crashed half-way), and the hourly ``instance_janitor`` DAG terminates whatever is
  past ``expires_at`` or belongs to a DAG run that is no longer running (:func:`reap`);
- credentials and endpoint come from the Airflow AWS connection through the Amazon
  provider's hooks (``EC2Hook``, ``SsmHook``), never from hand-read connection fields.

The container script never carries a secret: ``HF_TOKEN`` is read on the instance from an
SSM SecureString parameter when the spec names one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
import shlex
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError, WaiterError

from servebench.config import Ec2Placement, Ec2Provision
from servebench.endpoint import Endpoint
from servebench.errors import TeardownError
from servebench.hub import gated_model_problems, hub_cache_dir
from servebench.provenance import GPU_QUERY, describe_gpus
from servebench.provision.interface import (
    LaunchError,
    Provisioner,
    Reaped,
    poll_health,
    project_provisions,
    register_provisioner,
    served_engine_version,
)

if TYPE_CHECKING:
    from servebench.config import TargetSpec, VariantSpec
    from servebench.settings import Settings
    from servebench.stacks.adapter import ContainerLaunch, StackAdapter

log = logging.getLogger(__name__)

PROJECT_TAG, PROJECT = "project", "servebench"  # the tag every instance of ours carries
CONTAINER = "servebench-server"
LIVE_STATES = ["pending", "running", "stopping", "stopped"]
DIGEST_MARK = "servebench-image-digest:"  # the line the launch script prints
GPU_MARK = "servebench-gpus:"  # the instance's nvidia-smi rows (GPU_QUERY), ';'-joined
CUDA_MARK = "servebench-cuda:"  # the CUDA version its driver reports
SSM_POLL_S = 2.0
CONTAINER_CHECK_S = 10.0  # how often a launch asks the instance whether its container lives
# the container's state, and its log tail where it has ended (what the launch's reason quotes)
CONTAINER_STATE = [
    "state=\"$(docker inspect --format "
    "'{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}' "
    f"{CONTAINER} 2>&1)\" || state=\"missing 0 false $state\"",
    'echo "$state" | head -n 1',
    'case "$state" in running*|created*|restarting*|paused*) ;; '
    f"*) docker logs --tail 40 {CONTAINER} 2>&1 || true ;; esac",
]
API_MAX_ATTEMPTS = 5  # per EC2/SSM call, first try included
QUOTA_POLL_S = 15.0


# what run_instances answers when the placement cannot be had now: the next one is tried
CAPACITY_ERRORS = frozenset({
    "InsufficientInstanceCapacity", "InsufficientCapacity", "InstanceLimitExceeded",
    "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow",
    "Unsupported",  # the instance type is not offered in the subnet's zone
})


def client_token(run_id: str, target: str, attempt: int = 0, placement: int = 0) -> str:
    """EC2's idempotency token (<= 64 ASCII characters) for one target's instance of a run:
    the same run, target, attempt and placement always ask for the same instance."""
    key = f"{run_id}|{target}|{attempt}" + (f"|{placement}" if placement else "")
    return hashlib.sha256(key.encode()).hexdigest()[:64]


def _has_connection(conn_id: str) -> bool:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    return True


def _clients(conn_id: str, region: str | None):
    """(ec2, ssm) boto3 clients from the Airflow AWS connection (its credentials, region and
    ``endpoint_url`` extra)."""
    from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook
    from airflow.providers.amazon.aws.hooks.ssm import SsmHook
    from botocore.config import Config

    # throttling and 5xx are retried with backoff, a bounded number of times
    config = Config(retries={"mode": "standard", "total_max_attempts": API_MAX_ATTEMPTS})
    ec2 = EC2Hook(aws_conn_id=conn_id, region_name=region, api_type="client_type",
                  config=config).conn
    ssm = SsmHook(aws_conn_id=conn_id, region_name=region, config=config).conn
    return ec2, ssm


def _tags(instance: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def _instances(ec2, filters: list[dict]) -> list[dict]:
    found = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            found += reservation["Instances"]
    return found


# the model name EC2 gives its NVMe instance-store volumes (the root EBS volume's is "Amazon
# Elastic Block Store"): only these are ever formatted
INSTANCE_STORE_MODEL = "Amazon EC2 NVMe Instance Storage"
INSTANCE_STORE = "/opt/servebench/instance-store"
INSTANCE_STORE_MARK = "servebench-instance-store:"  # the device the script put it on


def instance_store_lines(model_cache: str) -> list[str]:
    """Shell lines that, once per instance (a mounted store is left as it is), put Docker's
    data and ``model_cache`` on the instance's NVMe instance-store volumes, when it has any:
    one is formatted (XFS), several are striped first (RAID 0); Docker is stopped while its
    data directory moves (no container runs yet at the first launch). A 70B model's weights
    and an engine image or two fit on the local NVMe of the instance types that serve them
    (several TB on p4d/p5/g6e), where a default root volume fills."""
    q = shlex.quote
    store, cache = q(INSTANCE_STORE), q(model_cache)
    return [
        f"if ! mountpoint -q {store}; then",
        "  devices=\"$(lsblk -d -n -o NAME,MODEL | awk "
        f"'/{INSTANCE_STORE_MODEL}/ {{print \"/dev/\" $1}}')\"",
        '  if [ -n "$devices" ]; then',
        "    set -- $devices",
        '    dev="$1"',
        '    if [ "$#" -gt 1 ]; then',
        '      mdadm --create /dev/md/servebench --run --level=0 --raid-devices="$#" "$@"',
        "      dev=/dev/md/servebench",
        "    fi",
        '    mkfs.xfs -f "$dev"',
        f'    mkdir -p {store} && mount "$dev" {store}',
        "    systemctl stop docker.socket docker",
        f"    mkdir -p {store}/docker {store}/model-cache /var/lib/docker {cache}",
        f"    mount --bind {store}/docker /var/lib/docker",
        f"    mount --bind {store}/model-cache {cache}",
        "    systemctl start docker",
        f'    echo {INSTANCE_STORE_MARK} "$dev ($# volume(s))"',
        "  fi",
        "fi"]


def render_script(launch: ContainerLaunch, spec: Ec2Provision, *, hub_cache: str) -> list[str]:
    """The shell lines SSM runs on the instance: its instance store put to use (the first
    time, where it has one: ``instance_store_lines``), the previous variant's container removed,
    every image but this variant's deleted (a target's variants may each bring an engine
    image of 10-20 GB: the root volume holds one, not all), the image pulled (its digest
    and the instance's GPUs printed for provenance), the new container started.
    Volumes under the worker's hub cache (``hub_cache``) map to the instance's
    ``model_cache``; any other host path is a path on the instance."""
    q = shlex.quote
    keep = f"docker image inspect --format '{{{{.Id}}}}' {q(launch.image)} 2>/dev/null || true"
    lines = ["set -eu", *(instance_store_lines(spec.model_cache) if spec.instance_store else []),
             f"docker rm -f {CONTAINER} >/dev/null 2>&1 || true",
             # the previous variants' images go; this one's stays (no second pull of it)
             f'keep="$({keep})"',
             'docker images --quiet --no-trunc | sort -u | { grep -vxF "${keep:-none}" '
             "|| true; } | xargs -r docker rmi --force >/dev/null 2>&1 || true",
             f"mkdir -p {q(spec.model_cache)}"]
    args = ["docker", "run", "-d", "--name", CONTAINER, "--restart", "no"]
    if launch.gpus:
        args += ["--gpus", str(launch.gpus)]
    if launch.shm_size:
        args += ["--shm-size", launch.shm_size]
    for container_port, host_port in sorted(launch.ports.items()):
        args += ["-p", f"{host_port}:{container_port}"]
    for host, inside in sorted(launch.volumes.items()):
        if host == hub_cache or host.startswith(hub_cache + "/"):
            host = spec.model_cache + host[len(hub_cache):]
        args += ["-v", f"{host}:{inside}"]
    for i, (inside, text) in enumerate(sorted(launch.files.items())):
        path = f"/opt/servebench/files/{i}-{inside.rsplit('/', 1)[-1]}"
        lines += ["mkdir -p /opt/servebench/files",
                  f"cat > {q(path)} <<'SERVEBENCH_EOF'", text.rstrip("\n"), "SERVEBENCH_EOF"]
        args += ["-v", f"{path}:{inside}:ro"]
    for key, value in sorted(launch.env.items()):
        args += ["-e", f"{key}={value}"]
    if spec.hf_token_parameter:
        lines.append(
            "HF_TOKEN=\"$(aws ssm get-parameter --with-decryption --name "
            f"{q(spec.hf_token_parameter)} --query Parameter.Value --output text)\"")
        lines.append("export HF_TOKEN")
        args += ["-e", "HF_TOKEN"]  # passed by name: its value is in no command line
    if launch.entrypoint:
        args += ["--entrypoint", launch.entrypoint[0]]
    args += [launch.image, *(launch.entrypoint or [])[1:], *launch.command]
    digest = ("docker image inspect --format '{{index .RepoDigests 0}}' "
              f"{q(launch.image)} 2>/dev/null || true")
    gpus = (f"nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader 2>/dev/null "
            "| paste -sd ';' - || true")
    cuda = ("nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\\([0-9.]*\\).*/\\1/p' "
            "| head -n 1 || true")
    lines += [f"docker pull {q(launch.image)}", f'echo {DIGEST_MARK} "$({digest})"',
              # the instance's own GPUs, for the cells' provenance (not the worker's)
              f'echo {GPU_MARK} "$({gpus})"', f'echo {CUDA_MARK} "$({cuda})"',
              shlex.join(args)]
    return lines


@register_provisioner
class Ec2Provisioner(Provisioner):
    kind = "ec2"
    per_host = True  # an instance per target, paid from its first unit's launch to its last

    @classmethod
    def host_key(cls, target: TargetSpec) -> str:
        return f"ec2:{target.name}"  # each target has an instance of its own

    @classmethod
    def where(cls, targets: list[TargetSpec], settings: Settings) -> dict:
        """Each target's connection and region: where the teardown looks for what the hosts
        launched."""
        return {t.name: {"conn_id": _spec(t).aws_conn_id, "region": _spec(t).region}
                for t in targets}

    def __init__(self, run_id: str, state: dict, settings: Settings):
        self.run_id = run_id
        self.state = state  # target name -> {"instance_id", "address", "conn_id", "region"}
        self.settings = settings
        self._digests: dict[str, str] = {}  # endpoint name -> repo@sha256 pulled
        self._gpus: dict[str, str | None] = {}  # endpoint name -> the instance's GPUs
        self._images: dict[str, str] = {}  # endpoint name -> image asked for
        self._targets: dict[str, str] = {}  # endpoint name -> target name
        self._client_cache: dict[tuple, tuple] = {}
        self._leases: dict[str, tuple[float, float]] = {}  # target -> (ttl h, extended at)

    # -- setup ------------------------------------------------------------------------------
    @classmethod
    def acquire(cls, run_id, targets, settings, *, dag_id: str = "") -> dict:
        """One instance per target, launched (idempotently) and waited for until running
        with status checks ok; {target: instance facts}. Called by each host's bench task
        (``per_host``): an instance is paid from when its units are due. A target whose
        instance cannot be had (no placement with capacity, the quota wait over, an API error,
        an instance that never came up) has what it launched terminated and keeps only its
        ``error``: its units fail with that reason, and the other targets' units run (the
        night goes on)."""
        launched: dict[str, dict] = {}
        for target in targets:  # every launch first: the instances boot side by side
            try:
                launched[target.name] = cls._launch_target(run_id, target, dag_id)
            except (LaunchError, ClientError, BotoCoreError) as exc:
                launched[target.name] = _failed_target(run_id, target, exc)
        for target in targets:
            if "error" in launched[target.name]:
                continue
            try:
                cls._wait_up(target, launched[target.name])
            except (LaunchError, ClientError, BotoCoreError) as exc:
                launched[target.name] = _failed_target(run_id, target, exc)
        return launched

    @classmethod
    def _launch_target(cls, run_id: str, target: TargetSpec, dag_id: str) -> dict:
        spec = _spec(target)
        ec2, _ = _clients(spec.aws_conn_id, spec.region)
        instance, placement = _run_instance(ec2, spec, run_id=run_id, dag_id=dag_id,
                                            target=target.name)
        log.info("%s: instance %s (%s, %s, %s) for run %s", target.name,
                 instance["InstanceId"], placement.instance_type, placement.market,
                 placement.subnet_id or "default subnet", run_id)
        return {"instance_id": instance["InstanceId"], "conn_id": spec.aws_conn_id,
                "region": spec.region,
                **placement.model_dump()}  # the placement it got: the cells' hardware, price

    @classmethod
    def _wait_up(cls, target: TargetSpec, facts: dict) -> None:
        """Running with status checks ok, and its address in ``facts``."""
        spec = _spec(target)
        ec2, _ = _clients(facts["conn_id"], facts["region"])
        iid = facts["instance_id"]
        try:
            ec2.get_waiter("instance_running").wait(InstanceIds=[iid])
            ec2.get_waiter("instance_status_ok").wait(InstanceIds=[iid])
        except WaiterError as exc:
            raise LaunchError(f"instance {iid} of {target.name} did not come up: "
                              f"{exc}") from exc
        (instance,) = _instances(ec2, [{"Name": "instance-id", "Values": [iid]}])
        address = instance.get("PublicIpAddress" if spec.address == "public"
                               else "PrivateIpAddress")
        if not address:
            raise LaunchError(f"instance {iid} of {target.name} has no {spec.address} "
                              "address")
        facts.update(address=address, launched_at=instance["LaunchTime"].isoformat())

    @classmethod
    def attach(cls, run_id, state, settings) -> Ec2Provisioner:
        return cls(run_id, state or {}, settings)

    @classmethod
    def check(cls, target: TargetSpec, variant: VariantSpec, adapter: StackAdapter,
              settings: Settings) -> list[str]:
        """The adapter's checks of the variant's settings (not its ``local_problems``: the
        engine runs in its image, not on the worker), and the container must render; an image
        not pinned by digest is allowed but the plan warns of it."""
        spec = _spec(target)
        try:
            launch = adapter.container_launch(variant, port=spec.port, settings=settings)
        except NotImplementedError as exc:
            return [f"{exc} (provision kind ec2 runs stacks in containers)"]
        problems = adapter.check(variant, settings)
        problem = adapter.image_problem(launch.image)
        if problem:
            problems.append(f"field image: {problem}")
        problems += gated_model_problems(variant.model, token_field="provision.hf_token_parameter",
                                         has_token=bool(spec.hf_token_parameter),
                                         endpoint=settings.hub_endpoint)
        return problems

    @classmethod
    def check_target(cls, target: TargetSpec, settings: Settings) -> list[str]:
        """What the account would refuse, asked of AWS before anything is paid for: the
        connection, an EC2 ``DryRun`` of each placement's launch (permissions, AMI or launch
        template, subnet, instance type, security groups, instance profile), the instance
        profile's role, the token parameter. A check the worker's identity may not make
        (IAM or SSM reads it needs nowhere else) is logged and skipped."""
        spec = _spec(target)
        if not _has_connection(spec.aws_conn_id):
            return [f"field provision.aws_conn_id: no Airflow connection {spec.aws_conn_id!r} "
                    "(the AWS credentials and region)"]
        try:
            ec2, ssm = _clients(spec.aws_conn_id, spec.region)
            problems = _dry_run_problems(ec2, spec, target.name)
            problems += _profile_problems(spec)
            problems += _token_parameter_problems(ssm, spec)
        except BotoCoreError as exc:  # no route to AWS, no credentials: nothing can launch
            return [f"field provision.aws_conn_id: AWS cannot be asked through "
                    f"{spec.aws_conn_id!r}: {exc}"]
        return problems

    # -- per variant ------------------------------------------------------------------------
    def launch(self, name, target, variant, adapter) -> Endpoint:
        spec = _spec(target)
        facts = self._facts(target.name)
        launch = adapter.container_launch(variant, port=spec.port, settings=self.settings)
        _, ssm = self._clients(facts)
        script = render_script(launch, spec, hub_cache=str(hub_cache_dir()))
        iid = facts["instance_id"]
        self._targets[name], self._images[name] = target.name, launch.image
        self._leases[target.name] = (spec.ttl_hours, 0.0)
        self._extend_lease(target.name)  # the unit's work starts now
        now = time.monotonic()
        deadline = now + spec.health_timeout_s
        try:
            output = self._run(ssm, iid, script, f"servebench {name}", deadline,
                               online_by=now + spec.ssm_timeout_s, spec=spec)
        except LaunchError as exc:
            exc.argv = launch.argv
            raise
        marked = {mark: line[len(mark):].strip() for line in output.splitlines()
                  for mark in (DIGEST_MARK, GPU_MARK, CUDA_MARK, INSTANCE_STORE_MARK)
                  if line.startswith(mark)}
        if marked.get(INSTANCE_STORE_MARK):
            log.info("instance %s: Docker's images and the model cache on its instance store, "
                     "%s", iid, marked[INSTANCE_STORE_MARK])
        if marked.get(DIGEST_MARK):
            self._digests[name] = marked[DIGEST_MARK]
        self._gpus[name] = describe_gpus(marked.get(GPU_MARK, "").split(";"),
                                         marked.get(CUDA_MARK) or None)
        base_url = f"http://{facts['address']}:{spec.port}"
        endpoint = Endpoint(base_url, launch.served_model, adapter.chat_path,
                            launch.metrics_path, argv=launch.argv, name=name)
        self._wait_healthy(endpoint, launch.health_path, deadline, ssm, iid)
        return endpoint

    def placement(self, endpoint: Endpoint) -> dict[str, str | None]:
        facts = self.state.get(self._targets.get(endpoint.name, ""), {})
        image = self._digests.get(endpoint.name) or self._images.get(endpoint.name)
        host = f"{facts['instance_id']} ({facts['address']})" if facts else None
        return {"host": host, "image": image, "gpu": self._gpus.get(endpoint.name)}

    def _run(self, ssm, iid: str, lines: list[str], comment: str, deadline: float, *,
             online_by: float | None = None, spec: Ec2Provision | None = None) -> str:
        """Runs ``lines`` on the instance through SSM and waits for the result; its output.
        An agent that is not online yet (a fresh instance) is retried until ``online_by``
        (the spec's ssm_timeout_s after the launch began), never past ``deadline``."""
        give_up = min(deadline, online_by) if online_by is not None else deadline
        while True:
            try:
                sent = ssm.send_command(InstanceIds=[iid], DocumentName="AWS-RunShellScript",
                                        Parameters={"commands": lines},
                                        Comment=comment[:100])
                break
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code == "InvalidInstanceId" and time.monotonic() > give_up and spec:
                    profile = spec.instance_profile or "none set"
                    raise LaunchError(
                        f"the SSM agent on {iid} did not come online within "
                        f"{spec.ssm_timeout_s:.0f} s (provision.ssm_timeout_s): the instance "
                        f"profile ({profile}, provision.instance_profile) must allow SSM "
                        "(AmazonSSMManagedInstanceCore), the AMI must run the agent and the "
                        "subnet must reach the SSM endpoints") from exc
                if code != "InvalidInstanceId" or time.monotonic() > give_up:
                    raise LaunchError(f"SSM could not reach instance {iid}: {exc}") from exc
                time.sleep(SSM_POLL_S)
        command_id = sent["Command"]["CommandId"]
        while True:
            try:
                result = ssm.get_command_invocation(CommandId=command_id, InstanceId=iid)
            except ClientError as exc:  # InvocationDoesNotExist for a moment after sending
                if time.monotonic() > deadline:
                    raise LaunchError(f"SSM command {command_id} on {iid}: {exc}") from exc
                time.sleep(SSM_POLL_S)
                continue
            status = result["Status"]
            if status == "Success":
                return result.get("StandardOutputContent", "")
            if status not in ("Pending", "InProgress", "Delayed"):
                raise LaunchError(
                    f"starting the container on {iid} ended {status}: "
                    f"{result.get('StandardErrorContent', '')[-2000:]}")
            if time.monotonic() > deadline:
                raise LaunchError(f"starting the container on {iid} still {status} at the "
                                  "health timeout")
            time.sleep(SSM_POLL_S)

    def _wait_healthy(self, endpoint: Endpoint, path: str, deadline: float, ssm,
                      iid: str) -> None:
        url = endpoint.base_url + path
        asked = [time.monotonic()]

        def ended() -> str | None:  # the instance every poll; its container every few seconds
            why = self._instance_gone(endpoint.name)
            if why or time.monotonic() - asked[0] < CONTAINER_CHECK_S:
                return why
            asked[0] = time.monotonic()
            return self._container_ended(ssm, iid)

        last = poll_health(url, deadline, ended=ended)
        if last is None:
            log.info("%s: %s healthy on %s", endpoint.name, url, iid)
            return
        logs = ""
        try:
            logs = self._run(ssm, iid, [f"docker logs --tail 40 {CONTAINER} 2>&1 || true"],
                             "servebench logs", time.monotonic() + 60)
        except LaunchError as exc:
            logs = f"<no logs: {exc}>"
        raise LaunchError(f"{url} not healthy by the health timeout (last: {last}); "
                          f"container log tail:\n{logs}")

    def _container_ended(self, ssm, iid: str) -> str | None:
        """Why the launched container has ended (exited, killed for memory, removed), in its
        exit code and its own log lines; None while it lives. A check that cannot reach the
        instance decides nothing: the health wait goes on."""
        try:
            output = self._run(ssm, iid, CONTAINER_STATE, "servebench state",
                               time.monotonic() + 60)
        except LaunchError as exc:
            log.warning("asking %s for its container's state failed: %s", iid, exc)
            return None
        first, _, tail = output.strip().partition("\n")
        words = first.split()
        if not words or words[0] in ("running", "created", "restarting", "paused"):
            return None
        if words[0] == "missing":
            what = "the container is gone: " + " ".join(words[3:])
        else:
            code = words[1] if len(words) > 1 else "?"
            oom = " (killed: out of memory)" if words[2:3] == ["true"] else ""
            what = f"the container {words[0]} with exit code {code}{oom}"
        return f"{what}; its log tail:\n{tail.strip() or '(empty)'}"

    def _clients(self, facts: dict):
        """(ec2, ssm) for a target's instance, made once per provisioner."""
        key = (facts["conn_id"], facts["region"])
        if key not in self._client_cache:
            self._client_cache[key] = _clients(*key)
        return self._client_cache[key]

    def _places(self) -> set[tuple[str, str | None]]:
        """Where this run's instances are: its targets' (connection, region), or, without the
        setup task's state, every place the project's ec2 targets use."""
        return {(f["conn_id"], f["region"]) for f in self.state.values()} or \
            _known_places(self.settings)

    def _facts(self, target: str) -> dict:
        facts = self.state.get(target)
        if facts and "error" in facts:
            raise LaunchError(f"target {target!r} has no instance: {facts['error']}")
        if not facts or "address" not in facts:
            raise LaunchError(f"target {target!r} has no instance in this run (its host "
                              "was not acquired)")
        return facts

    def _instance_gone(self, name: str) -> str | None:
        facts = self.state.get(self._targets.get(name, ""))
        if not facts:
            return None
        ec2, _ = self._clients(facts)
        found = _instances(ec2, [{"Name": "instance-id", "Values": [facts["instance_id"]]}])
        if not found:
            return f"instance {facts['instance_id']} is gone"
        state = found[0]["State"]["Name"]
        if state in ("pending", "running"):
            return None
        reason = found[0].get("StateReason", {}).get("Message") or \
            found[0].get("StateTransitionReason") or "no reason given"
        return f"instance {facts['instance_id']} is {state} ({reason})"

    def exited(self, endpoint: Endpoint) -> str | None:
        """A spot interruption (or anyone's terminate) ends the instance under the cells.
        Asked before each cell: a live unit's instance has its lease extended here."""
        why = self._instance_gone(endpoint.name)
        if why is None:
            self._extend_lease(self._targets.get(endpoint.name, ""))
        return why

    def _extend_lease(self, target: str) -> None:
        """Moves the instance's ``expires_at`` tag to ``ttl_hours`` from now once half of
        the last lease is spent (and at each unit's launch): an instance's lifetime counts
        from its own units' work, so the janitor never reaps one under a unit that is still
        measuring, while a unit that hangs (asks nothing) still lets it expire."""
        facts, lease = self.state.get(target), self._leases.get(target)
        if not facts or lease is None:
            return
        ttl_h, extended_at = lease
        if extended_at and time.monotonic() - extended_at < ttl_h * 3600 / 2:
            return
        expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=ttl_h)
        ec2, _ = self._clients(facts)
        try:
            ec2.create_tags(Resources=[facts["instance_id"]], Tags=[
                {"Key": "expires_at", "Value": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}])
        except (ClientError, BotoCoreError) as exc:  # the old expiry stands; say so
            log.warning("extending %s's expiry failed: %s", facts["instance_id"], exc)
            return
        self._leases[target] = (ttl_h, time.monotonic())

    def stop(self, endpoint: Endpoint) -> None:
        """The container is removed so the next variant has the GPU; the instance stays for
        it (the teardown task terminates it)."""
        facts = self.state.get(self._targets.get(endpoint.name, ""))
        if not facts or self._instance_gone(endpoint.name):
            return
        _, ssm = self._clients(facts)
        try:
            self._run(ssm, facts["instance_id"], [f"docker rm -f {CONTAINER} || true"],
                      "servebench stop", time.monotonic() + 120)
        except LaunchError:
            log.exception("%s: removing the container failed (the instance is terminated "
                          "at teardown all the same)", endpoint.name)

    def hardware(self, target: TargetSpec) -> str:
        """The placement's the instance was launched in (a fallback is other hardware)."""
        facts = self.state.get(target.name) or {}
        spec = _spec(target)
        return facts.get("hardware") or spec.hardware or f"aws {spec.instance_type}"

    def price_per_hour(self, target: TargetSpec, sweep_price: float) -> float:
        """The placement's price, where it names one."""
        price = (self.state.get(target.name) or {}).get("price_per_hour")
        return target.price_per_hour(sweep_price) if price is None else price

    def engine_version(self, adapter: StackAdapter, endpoint: Endpoint | None = None) -> str:
        """What the server says it runs; else the image it was started from."""
        served = served_engine_version(adapter, endpoint) if endpoint else None
        if served:
            return served
        if endpoint is not None and endpoint.name in self._images:
            return "image " + self._digests.get(endpoint.name, self._images[endpoint.name])
        return "unknown (ec2 container)"

    # -- teardown ---------------------------------------------------------------------------
    def release(self, targets: list[TargetSpec]) -> list[str]:
        """Terminates ``targets``' instances of this run, their units done (the next host's
        instance does not wait for this one's idle hours)."""
        gone = []
        for target in targets:
            spec = _spec(target)
            try:
                gone += _terminate_run(self.run_id, {(spec.aws_conn_id, spec.region)},
                                       target=target.name)
            except (ClientError, BotoCoreError) as exc:
                raise TeardownError(f"terminating {target.name}'s instance failed: "
                                    f"{exc}") from exc
        return gone

    @classmethod
    def reap_orphans(cls, settings, run_is_live, now) -> list[Reaped]:
        try:
            return reap(settings, run_is_live, now=now)
        except (ClientError, BotoCoreError) as exc:
            raise TeardownError(f"reaping ec2 instances failed: {exc}") from exc

    def paid_hosts(self) -> list[dict]:
        """Every instance tagged with this run, whatever its state: launch time and, once
        terminated, the time EC2 gives in its state transition reason."""
        places = self._places()
        hosts = []
        for conn_id, region in sorted(places, key=str):
            ec2, _ = _clients(conn_id, region)
            for instance in _instances(ec2, [{"Name": f"tag:{PROJECT_TAG}", "Values": [PROJECT]},
                                             {"Name": "tag:run_id", "Values": [self.run_id]}]):
                tags = _tags(instance)
                price = tags.get("price_per_hour")
                hosts.append({"host": instance["InstanceId"],
                              "target": tags.get("target", ""),
                              "instance_type": instance.get("InstanceType"),
                              # its placement's (a fallback's may differ from the target's)
                              "price_per_hour": float(price) if price else None,
                              "launched_at": instance["LaunchTime"],
                              "ended_at": _ended_at(instance)})
        return hosts

    def teardown(self) -> list[str]:
        """Terminates every instance tagged with this run (found by tag, so a setup task
        that died between launching and returning its state leaks nothing)."""
        places = self._places()
        try:
            return _terminate_run(self.run_id, places)
        except (ClientError, BotoCoreError) as exc:
            raise TeardownError(f"terminating run {self.run_id}'s instances failed: "
                               f"{exc}") from exc



def _spec(target: TargetSpec) -> Ec2Provision:
    if not isinstance(target.provision, Ec2Provision):
        raise TypeError(f"target {target.name!r} is not provisioned by ec2")
    return target.provision


def _run_instance(ec2, spec: Ec2Provision, *, run_id: str, dag_id: str,
                  target: str) -> tuple[dict, Ec2Placement]:
    """The target's instance for this run, and the placement it was launched in: the one
    already launched (a retried setup task), else a new one, in the first of the spec's
    placements EC2 has capacity and quota for (``CAPACITY_ERRORS``; any other error is
    raised). The ``launch_token`` tag finds it; the same value as ``ClientToken`` makes EC2
    itself answer a repeated request with the first instance (two tries racing past the
    lookup still get one instance). An attempt whose instance has ended (a failed setup
    cleaned up, a spot interruption) is spent: the next attempt's tokens launch anew, where
    the old ones would only get the terminated instance back."""
    placements = spec.placements()
    attempt = 0
    while True:
        tokens = [client_token(run_id, target, attempt, i) for i in range(len(placements))]
        found = _instances(ec2, [{"Name": "tag:launch_token", "Values": tokens}])
        live = [i for i in found if i["State"]["Name"] in LIVE_STATES]
        if live:
            log.info("%s: instance %s of this run already launched (a retried setup)",
                     target, live[0]["InstanceId"])
            return live[0], placements[tokens.index(_tags(live[0])["launch_token"])]
        if not found:
            break
        attempt += 1
    _wait_for_quota(ec2, spec, run_id, target)
    refused = []
    for i, placement in enumerate(placements):
        try:
            instance = _launch(ec2, spec, placement, token=tokens[i], run_id=run_id,
                               dag_id=dag_id, target=target)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code not in CAPACITY_ERRORS:
                raise LaunchError(f"run_instances for {target} ({placement.instance_type}) "
                                  f"failed: {exc}") from exc
            refused.append(f"{placement.instance_type} {placement.market} in "
                           f"{placement.subnet_id or 'the default subnet'}: {code}")
            log.warning("%s: no %s (%s)%s", target, placement.instance_type, code,
                        "; trying the next placement" if i + 1 < len(placements) else "")
            continue
        if i:
            log.info("%s: launched in fallback %d (%s)", target, i, placement.instance_type)
        return instance, placement
    raise LaunchError(f"run_instances for {target}: no placement could be had: "
                      + "; ".join(refused))


def _launch(ec2, spec: Ec2Provision, placement: Ec2Placement, *, token: str, run_id: str,
            dag_id: str, target: str) -> dict:
    """One ``run_instances`` call for ``placement``; its ``ClientError`` is the caller's."""
    kwargs = _launch_args(spec, placement, token=token, run_id=run_id, dag_id=dag_id,
                          target=target, root_device=_root_device(ec2, spec))
    (instance,) = ec2.run_instances(**kwargs)["Instances"]
    return instance


# the error code of a DryRun EC2 would have carried out (a refused one names its reason)
DRY_RUN_OK = "DryRunOperation"


def _dry_run_problems(ec2, spec: Ec2Provision, target: str) -> list[str]:
    """Each placement's launch asked with ``DryRun``: EC2 answers DryRunOperation where it
    would launch, else why not (UnauthorizedOperation, InvalidAMIID.NotFound,
    InvalidSubnetID.NotFound, an instance type the zone does not offer, ...)."""
    problems = []
    try:
        root_device = _root_device(ec2, spec)
    except ClientError as exc:
        return [f"field provision.ami: {exc.response.get('Error', {}).get('Message', exc)}"]
    for i, placement in enumerate(spec.placements()):
        field = "provision" if i == 0 else f"provision.fallbacks[{i - 1}]"
        kwargs = _launch_args(spec, placement, token=client_token("plan", target, 0, i),
                              run_id="plan", dag_id="plan", target=target,
                              root_device=root_device)
        kwargs.pop("ClientToken")
        try:
            ec2.run_instances(DryRun=True, **kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") == DRY_RUN_OK:
                continue
            where = placement.subnet_id or "the default subnet"
            problems.append(f"field {field}: EC2 would not launch {placement.instance_type} "
                            f"({placement.market}) in {where}: {error.get('Code')}: "
                            f"{error.get('Message')}")
    return problems


def _profile_problems(spec: Ec2Provision) -> list[str]:
    """The instance profile exists and carries a role (without one the SSM agent has no
    credentials and no variant can start)."""
    if not spec.instance_profile:
        return []
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    name = spec.instance_profile.rsplit("/", 1)[-1]
    iam = AwsBaseHook(aws_conn_id=spec.aws_conn_id, client_type="iam").get_conn()
    try:
        roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code == "NoSuchEntity":
            return [f"field provision.instance_profile: no instance profile {name!r} in the "
                    "account"]
        log.info("not checking instance profile %s: %s", name, code)
        return []
    if not roles:
        return [f"field provision.instance_profile: {name!r} has no role: the SSM agent "
                "gets no credentials (attach one with AmazonSSMManagedInstanceCore)"]
    return []


def _token_parameter_problems(ssm, spec: Ec2Provision) -> list[str]:
    """The SSM parameter the instance reads HF_TOKEN from exists (its value is not read)."""
    if not spec.hf_token_parameter:
        return []
    try:
        found = ssm.describe_parameters(ParameterFilters=[
            {"Key": "Name", "Option": "Equals", "Values": [spec.hf_token_parameter]}])
    except ClientError as exc:
        log.info("not checking parameter %s: %s", spec.hf_token_parameter,
                 exc.response.get("Error", {}).get("Code"))
        return []
    if not found.get("Parameters"):
        return [f"field provision.hf_token_parameter: no SSM parameter "
                f"{spec.hf_token_parameter!r} in the region (the instance reads HF_TOKEN "
                "from it: a gated model fails to load without it)"]
    return []


def _root_device(ec2, spec: Ec2Provision) -> str | None:
    """The AMI's root device name, where the spec sizes the root volume (a mapping must name
    the device the image boots from); None otherwise."""
    if spec.root_volume_gb is None:
        return None
    (image,) = ec2.describe_images(ImageIds=[spec.ami])["Images"]
    return image["RootDeviceName"]


def _launch_args(spec: Ec2Provision, placement: Ec2Placement, *, token: str, run_id: str,
                 dag_id: str, target: str, root_device: str | None = None) -> dict:
    """``run_instances``' arguments for ``placement``: tags, metadata, market, profile, the
    root volume (``root_device``: the AMI's, where the spec sizes it)."""
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=spec.ttl_hours)
    tags = [{"Key": PROJECT_TAG, "Value": PROJECT}, {"Key": "run_id", "Value": run_id},
            {"Key": "dag_id", "Value": dag_id or "-"}, {"Key": "target", "Value": target},
            {"Key": "expires_at", "Value": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
            {"Key": "launch_token", "Value": token},
            {"Key": "Name", "Value": f"servebench {target}"}]
    if placement.price_per_hour is not None:  # what the publish prices its bill at
        tags.append({"Key": "price_per_hour", "Value": f"{placement.price_per_hour:g}"})
    kwargs: dict = {
        "MinCount": 1, "MaxCount": 1, "InstanceType": placement.instance_type,
        "ClientToken": token,
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags},
                              {"ResourceType": "volume", "Tags": tags}],
        "MetadataOptions": {"HttpTokens": "required"},
        # a shutdown from inside (or a failed boot) ends the bill, not just the OS
        "InstanceInitiatedShutdownBehavior": "terminate",
    }
    if spec.ami:
        kwargs["ImageId"] = spec.ami
    else:
        key = "LaunchTemplateId" if spec.launch_template.startswith("lt-") \
            else "LaunchTemplateName"
        kwargs["LaunchTemplate"] = {key: spec.launch_template}
    if root_device is not None:
        kwargs["BlockDeviceMappings"] = [{"DeviceName": root_device, "Ebs": {
            "VolumeSize": spec.root_volume_gb, "VolumeType": spec.root_volume_type,
            "DeleteOnTermination": True}}]
    if placement.subnet_id:
        kwargs["SubnetId"] = placement.subnet_id
    if spec.security_group_ids:
        kwargs["SecurityGroupIds"] = spec.security_group_ids
    if spec.instance_profile:
        key = "Arn" if spec.instance_profile.startswith("arn:") else "Name"
        kwargs["IamInstanceProfile"] = {key: spec.instance_profile}
    if placement.market == "spot":
        kwargs["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time",
                            "InstanceInterruptionBehavior": "terminate"}}
    return kwargs


def _wait_for_quota(ec2, spec: Ec2Provision, run_id: str, target: str) -> None:
    """With ``max_instances``: wait until fewer project instances of the target's instance
    types (its own and its fallbacks') run than that -- other runs', concurrent DAG runs',
    CLI runs', and this run's other targets' (their hosts launch side by side) -- or fail at
    ``acquire_timeout_s``. EC2 itself is the count: Airflow pools hold a slot only while a
    task runs."""
    if spec.max_instances is None:
        return
    types = sorted({p.instance_type for p in spec.placements()})
    deadline = time.monotonic() + spec.acquire_timeout_s
    while True:
        others = [i["InstanceId"] for i in _instances(ec2, [
            {"Name": f"tag:{PROJECT_TAG}", "Values": [PROJECT]},
            {"Name": "instance-type", "Values": types},
            {"Name": "instance-state-name", "Values": LIVE_STATES}])
            if (_tags(i).get("run_id"), _tags(i).get("target")) != (run_id, target)]
        if len(others) < spec.max_instances:
            return
        if time.monotonic() >= deadline:
            raise LaunchError(
                f"no {'/'.join(types)} free within max_instances={spec.max_instances} "
                f"after {spec.acquire_timeout_s:g}s: held by {others}")
        log.info("%s quota full (%s); waiting", "/".join(types), others)
        time.sleep(min(QUOTA_POLL_S, max(0.0, deadline - time.monotonic())))


def _terminate(ec2, ids: list[str]) -> list[str]:
    if not ids:
        return []
    ec2.terminate_instances(InstanceIds=ids)
    try:
        ec2.get_waiter("instance_terminated").wait(InstanceIds=ids)
    except WaiterError:
        log.exception("terminate of %s asked; not yet confirmed terminated", ids)
    log.warning("terminated %s", ids)
    return ids


_TRANSITION_TIME = re.compile(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?:GMT|UTC)\)")


def _ended_at(instance: dict) -> dt.datetime | None:
    """When a terminated instance stopped being billed: EC2 writes it only into the state
    transition reason, ``User initiated (2026-12-01 03:12:44 GMT)``."""
    if instance["State"]["Name"] not in ("shutting-down", "terminated"):
        return None
    found = _TRANSITION_TIME.search(instance.get("StateTransitionReason") or "")
    if not found:
        return dt.datetime.now(dt.UTC)  # ended, time not given: now bounds it
    return dt.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)


def _terminate_run(run_id: str, places: Iterable[tuple[str, str | None]],
                   target: str | None = None) -> list[str]:
    """Terminates the run's live instances (only ``target``'s, where given)."""
    gone: list[str] = []
    for conn_id, region in sorted(places, key=str):
        ec2, _ = _clients(conn_id, region)
        filters = [{"Name": f"tag:{PROJECT_TAG}", "Values": [PROJECT]},
                   {"Name": "tag:run_id", "Values": [run_id]},
                   {"Name": "instance-state-name", "Values": LIVE_STATES}]
        if target is not None:
            filters.append({"Name": "tag:target", "Values": [target]})
        gone += _terminate(ec2, [i["InstanceId"] for i in _instances(ec2, filters)])
    return gone


def _failed_target(run_id: str, target: TargetSpec, exc: Exception) -> dict:
    """A target whose instance could not be had: what it launched terminated (a failure to
    terminate is the teardown's to find and raise), its error kept for its units."""
    spec = _spec(target)
    log.error("setup of %s for run %s failed: %s", target.name, run_id, exc, exc_info=exc)
    try:
        gone = _terminate_run(run_id, {(spec.aws_conn_id, spec.region)}, target=target.name)
    except (ClientError, BotoCoreError):
        log.exception("terminating %s's instance failed (the teardown tries again)",
                      target.name)
    else:
        if gone:
            log.warning("terminated %s of %s", gone, target.name)
    return {"error": f"its setup failed: {exc}", "conn_id": spec.aws_conn_id,
            "region": spec.region}


def _known_places(settings: Settings) -> set[tuple[str, str | None]]:
    """(AWS connection, region) where a teardown without state and the janitor look for
    instances: the settings' AWS connection (where defined) in its own region, and every
    ec2 target's in the project's sweep specs."""
    places = {(p.aws_conn_id, p.region) for p in project_provisions(settings, Ec2Provision)}
    if _has_connection(settings.aws_conn_id):  # a project without AWS has nothing to find
        places.add((settings.aws_conn_id, None))
    return places


def reap(settings: Settings, run_is_live: Callable[[str, str], bool],
         places: Iterable[tuple[str, str | None]] | None = None,
         now: dt.datetime | None = None) -> list[Reaped]:
    """Terminates every project instance whose ``expires_at`` has passed or whose DAG run
    (``run_is_live(dag_id, run_id)``) is no longer running; what it terminated, and why."""
    now = now or dt.datetime.now(dt.UTC)
    reaped: list[Reaped] = []
    for conn_id, region in sorted(places if places is not None else _known_places(settings),
                                  key=str):
        ec2, _ = _clients(conn_id, region)
        found = _instances(ec2, [{"Name": f"tag:{PROJECT_TAG}", "Values": [PROJECT]},
                                 {"Name": "instance-state-name", "Values": LIVE_STATES}])
        doomed: list[tuple[dict, str]] = []
        for instance in found:
            tags = _tags(instance)
            expires = tags.get("expires_at")
            try:
                expired = expires is not None and dt.datetime.fromisoformat(expires) <= now
            except ValueError:
                expired = True  # a tag we cannot read: the instance is not ours to keep
            if expired:
                doomed.append((instance, f"expired at {expires}"))
            elif not run_is_live(tags.get("dag_id", ""), tags.get("run_id", "")):
                run = f"{tags.get('dag_id')}/{tags.get('run_id')}"
                doomed.append((instance, f"its DAG run {run} is no longer running"))
        _terminate(ec2, [i["InstanceId"] for i, _ in doomed])
        for instance, reason in doomed:
            tags = _tags(instance)
            reaped.append(Reaped(instance["InstanceId"], instance.get("InstanceType", ""),
                                 region or ec2.meta.region_name, tags.get("run_id", ""),
                                 tags.get("dag_id", ""), tags.get("target", ""),
                                 instance.get("LaunchTime"), reason))
    return reaped
