"""An instance for a target: RunInstances in the first of its placements (its own, then its
``fallbacks``) EC2 has capacity and quota for, idempotently (``client_token``; a retried setup
task gets the instance the first try launched), after the ``max_instances`` quota wait; then
waited for until it runs with status checks ok. A target whose instance cannot be had keeps
only its error (:func:`failed_target`)."""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError, WaiterError

from servebench.provision.ec2.aws import (
    LIVE_STATES,
    PROJECT,
    PROJECT_TAG,
    aws_clients,
    ec2_spec,
    find_instances,
    instance_tags,
)
from servebench.provision.ec2.reaping import expiry_tag, terminate_run
from servebench.provision.interface import LaunchError

if TYPE_CHECKING:
    from servebench.config import Ec2Placement, Ec2Provision, TargetSpec

log = logging.getLogger(__name__)

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


def launch_targets(run_id: str, targets: list[TargetSpec], dag_id: str) -> dict[str, dict]:
    """Each target's instance launched, then waited for until it is up: {target: its facts,
    or its error (``failed_target``: what it launched terminated)}. Every launch goes first,
    so the instances boot side by side; one target's failure leaves the others theirs."""
    launched: dict[str, dict] = {}
    for target in targets:
        try:
            launched[target.name] = launch_target(run_id, target, dag_id)
        except (LaunchError, ClientError, BotoCoreError) as exc:
            launched[target.name] = failed_target(run_id, target, exc)
    for target in targets:
        if "error" in launched[target.name]:
            continue
        try:
            wait_up(target, launched[target.name])
        except (LaunchError, ClientError, BotoCoreError) as exc:
            launched[target.name] = failed_target(run_id, target, exc)
    return launched


def launch_target(run_id: str, target: TargetSpec, dag_id: str) -> dict:
    """The target's instance for this run launched (or found, for a retried setup task):
    its facts, the placement it got among them."""
    spec = ec2_spec(target)
    ec2, _ = aws_clients(spec.aws_conn_id, spec.region)
    instance, placement = run_instance(ec2, spec, run_id=run_id, dag_id=dag_id,
                                       target=target.name)
    log.info("%s: instance %s (%s, %s, %s) for run %s", target.name,
             instance["InstanceId"], placement.instance_type, placement.market,
             placement.subnet_id or "default subnet", run_id)
    return {"instance_id": instance["InstanceId"], "conn_id": spec.aws_conn_id,
            "region": spec.region,
            **placement.model_dump()}  # the placement it got: the cells' hardware, price


def wait_up(target: TargetSpec, facts: dict) -> None:
    """Running with status checks ok, and its address in ``facts``."""
    spec = ec2_spec(target)
    ec2, _ = aws_clients(facts["conn_id"], facts["region"])
    iid = facts["instance_id"]
    try:
        ec2.get_waiter("instance_running").wait(InstanceIds=[iid])
        ec2.get_waiter("instance_status_ok").wait(InstanceIds=[iid])
    except WaiterError as exc:
        raise LaunchError(f"instance {iid} of {target.name} did not come up: "
                          f"{exc}") from exc
    (instance,) = find_instances(ec2, [{"Name": "instance-id", "Values": [iid]}])
    facts.update(address=_address(spec, instance, target.name),
                 launched_at=instance["LaunchTime"].isoformat())


def _address(spec: Ec2Provision, instance: dict, target: str) -> str:
    address = instance.get("PublicIpAddress" if spec.address == "public"
                           else "PrivateIpAddress")
    if not address:
        raise LaunchError(f"instance {instance['InstanceId']} of {target} has no "
                          f"{spec.address} address")
    return address


def held_targets(run_id: str, targets: list[TargetSpec]) -> dict[str, dict]:
    """Each target's instance of this run still running after its units (held for the same
    morning's relaunches, ``bench.confirm``): its facts as ``launch_targets`` gives them,
    found by tag; or its ``error`` where none is (released, never had, ended). Launches
    nothing."""
    out: dict[str, dict] = {}
    for target in targets:
        spec = ec2_spec(target)
        where = {"conn_id": spec.aws_conn_id, "region": spec.region}
        ec2, _ = aws_clients(spec.aws_conn_id, spec.region)
        try:
            instance, placement, _ = live_instance(ec2, spec, run_id, target.name)
            if instance is None or instance["State"]["Name"] != "running":
                raise LaunchError("its instance is no longer running" if instance else
                                  "its instance was released, or never launched")
            out[target.name] = {"instance_id": instance["InstanceId"], **where,
                                **placement.model_dump(),
                                "address": _address(spec, instance, target.name),
                                "launched_at": instance["LaunchTime"].isoformat()}
        except (LaunchError, ClientError, BotoCoreError) as exc:
            out[target.name] = {"error": f"no host held: {exc}", **where}
    return out


def failed_target(run_id: str, target: TargetSpec, exc: Exception) -> dict:
    """A target whose instance could not be had: what it launched terminated (a failure to
    terminate is the teardown's to find and raise), its error kept for its units."""
    spec = ec2_spec(target)
    log.error("setup of %s for run %s failed: %s", target.name, run_id, exc, exc_info=exc)
    try:
        gone = terminate_run(run_id, {(spec.aws_conn_id, spec.region)}, target=target.name)
    except (ClientError, BotoCoreError):
        log.exception("terminating %s's instance failed (the teardown tries again)",
                      target.name)
    else:
        if gone:
            log.warning("terminated %s of %s", gone, target.name)
    return {"error": f"its setup failed: {exc}", "conn_id": spec.aws_conn_id,
            "region": spec.region}


def run_instance(ec2, spec: Ec2Provision, *, run_id: str, dag_id: str,
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
    live, placement, tokens = live_instance(ec2, spec, run_id, target)
    if live is not None:
        log.info("%s: instance %s of this run already launched (a retried setup)",
                 target, live["InstanceId"])
        return live, placement
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


def live_instance(ec2, spec: Ec2Provision, run_id: str, target: str
                  ) -> tuple[dict | None, Ec2Placement | None, list[str]]:
    """The target's live instance of this run and the placement it was launched in, found
    by its ``launch_token`` tag; else None and the tokens the next attempt launches with."""
    placements = spec.placements()
    attempt = 0
    while True:
        tokens = [client_token(run_id, target, attempt, i) for i in range(len(placements))]
        found = find_instances(ec2, [{"Name": "tag:launch_token", "Values": tokens}])
        live = [i for i in found if i["State"]["Name"] in LIVE_STATES]
        if live:
            return live[0], placements[tokens.index(instance_tags(live[0])["launch_token"])], \
                tokens
        if not found:
            return None, None, tokens
        attempt += 1


def _launch(ec2, spec: Ec2Provision, placement: Ec2Placement, *, token: str, run_id: str,
            dag_id: str, target: str) -> dict:
    """One ``run_instances`` call for ``placement``; its ``ClientError`` is the caller's."""
    kwargs = launch_args(spec, placement, token=token, run_id=run_id, dag_id=dag_id,
                         target=target, root_device=ami_root_device(ec2, spec))
    (instance,) = ec2.run_instances(**kwargs)["Instances"]
    return instance


def ami_root_device(ec2, spec: Ec2Provision) -> str | None:
    """The AMI's root device name, where the spec sizes the root volume (a mapping must name
    the device the image boots from); None otherwise."""
    if spec.root_volume_gb is None:
        return None
    (image,) = ec2.describe_images(ImageIds=[spec.ami])["Images"]
    return image["RootDeviceName"]


def launch_args(spec: Ec2Provision, placement: Ec2Placement, *, token: str, run_id: str,
                dag_id: str, target: str, root_device: str | None = None) -> dict:
    """``run_instances``' arguments for ``placement``: tags, metadata, market, profile, the
    root volume (``root_device``: the AMI's, where the spec sizes it)."""
    tags = [{"Key": PROJECT_TAG, "Value": PROJECT}, {"Key": "run_id", "Value": run_id},
            {"Key": "dag_id", "Value": dag_id or "-"}, {"Key": "target", "Value": target},
            expiry_tag(spec.ttl_hours),
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
        others = [i["InstanceId"] for i in find_instances(ec2, [
            {"Name": f"tag:{PROJECT_TAG}", "Values": [PROJECT]},
            {"Name": "instance-type", "Values": types},
            {"Name": "instance-state-name", "Values": LIVE_STATES}])
            if (instance_tags(i).get("run_id"),
                instance_tags(i).get("target")) != (run_id, target)]
        if len(others) < spec.max_instances:
            return
        if time.monotonic() >= deadline:
            raise LaunchError(
                f"no {'/'.join(types)} free within max_instances={spec.max_instances} "
                f"after {spec.acquire_timeout_s:g}s: held by {others}")
        log.info("%s quota full (%s); waiting", "/".join(types), others)
        time.sleep(min(QUOTA_POLL_S, max(0.0, deadline - time.monotonic())))
