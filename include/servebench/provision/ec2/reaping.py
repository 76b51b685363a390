"""How instances end and what they cost: terminating a run's instances by its tags (the
teardown, a host's release, a failed setup), an instance held past its units for the same
morning's relaunches (``hold_instance``: the teardown spares it, the release after the
confirm ends it), the lease (``expires_at``) a measuring unit keeps extending, what the run paid for (launch to the end EC2 gives), and the hourly janitor's
:func:`reap` of whatever is past its expiry or whose DAG run no longer runs."""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError, WaiterError

from servebench.config import Ec2Provision
from servebench.provision.ec2.aws import (
    LIVE_STATES,
    PROJECT,
    PROJECT_TAG,
    aws_clients,
    find_instances,
    has_connection,
    instance_tags,
)
from servebench.provision.interface import Reaped, project_provisions

if TYPE_CHECKING:
    from servebench.settings import Settings

log = logging.getLogger(__name__)


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


def ended_at(instance: dict) -> dt.datetime | None:
    """When a terminated instance stopped being billed: EC2 writes it only into the state
    transition reason, ``User initiated (2026-12-01 03:12:44 GMT)``."""
    if instance["State"]["Name"] not in ("shutting-down", "terminated"):
        return None
    found = _TRANSITION_TIME.search(instance.get("StateTransitionReason") or "")
    if not found:
        return dt.datetime.now(dt.UTC)  # ended, time not given: now bounds it
    return dt.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)


HELD_TAG = "held_for"  # on an instance kept after its units: what it is kept for


def hold_instance(ec2, instance_id: str, ttl_hours: float) -> None:
    """Marks the instance as held for the same morning's relaunches: the run's teardown
    (``terminate_run(spare_held=True)``) leaves it to the release after the confirm, and
    its lease runs ``ttl_hours`` from now, so a run killed before that release still has it
    reaped (its expiry, or its DAG run no longer running)."""
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": HELD_TAG, "Value": "confirm"},
                                                   expiry_tag(ttl_hours)])


def terminate_run(run_id: str, places: Iterable[tuple[str, str | None]],
                  target: str | None = None, *, spare_held: bool = False) -> list[str]:
    """Terminates the run's live instances (only ``target``'s, where given; with
    ``spare_held``, not those held for the confirm, ``hold_instance``)."""
    gone: list[str] = []
    for conn_id, region in sorted(places, key=str):
        ec2, _ = aws_clients(conn_id, region)
        filters = [{"Name": f"tag:{PROJECT_TAG}", "Values": [PROJECT]},
                   {"Name": "tag:run_id", "Values": [run_id]},
                   {"Name": "instance-state-name", "Values": LIVE_STATES}]
        if target is not None:
            filters.append({"Name": "tag:target", "Values": [target]})
        # EC2's filters cannot say "without this tag": the held ones are left out here
        gone += _terminate(ec2, [i["InstanceId"] for i in find_instances(ec2, filters)
                                 if not (spare_held and HELD_TAG in instance_tags(i))])
    return gone


def expiry_tag(ttl_hours: float) -> dict:
    """The ``expires_at`` tag ``ttl_hours`` from now, as the janitor reads it."""
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=ttl_hours)
    return {"Key": "expires_at", "Value": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}


def extend_lease(ec2, instance_id: str, lease: tuple[float, float]) -> tuple[float, float]:
    """Moves the instance's ``expires_at`` tag to ``ttl_hours`` from now once half of
    the last lease is spent (and at each unit's launch): an instance's lifetime counts
    from its own units' work, so the janitor never reaps one under a unit that is still
    measuring, while a unit that hangs (asks nothing) still lets it expire. ``lease`` is
    (ttl hours, when last extended; 0: at a launch); the lease as it now stands."""
    ttl_h, extended_at = lease
    if extended_at and time.monotonic() - extended_at < ttl_h * 3600 / 2:
        return lease
    try:
        ec2.create_tags(Resources=[instance_id], Tags=[expiry_tag(ttl_h)])
    except (ClientError, BotoCoreError) as exc:  # the old expiry stands; say so
        log.warning("extending %s's expiry failed: %s", instance_id, exc)
        return lease
    return ttl_h, time.monotonic()


def paid_instances(run_id: str, places: Iterable[tuple[str, str | None]]) -> list[dict]:
    """Every instance tagged with this run, whatever its state: launch time and, once
    terminated, the time EC2 gives in its state transition reason."""
    hosts = []
    for conn_id, region in sorted(places, key=str):
        ec2, _ = aws_clients(conn_id, region)
        for instance in find_instances(ec2, [
                {"Name": f"tag:{PROJECT_TAG}", "Values": [PROJECT]},
                {"Name": "tag:run_id", "Values": [run_id]}]):
            tags = instance_tags(instance)
            price = tags.get("price_per_hour")
            hosts.append({"host": instance["InstanceId"],
                          "target": tags.get("target", ""),
                          "instance_type": instance.get("InstanceType"),
                          # its placement's (a fallback's may differ from the target's)
                          "price_per_hour": float(price) if price else None,
                          "launched_at": instance["LaunchTime"],
                          "ended_at": ended_at(instance)})
    return hosts


def known_places(settings: Settings) -> set[tuple[str, str | None]]:
    """(AWS connection, region) where a teardown without state and the janitor look for
    instances: the settings' AWS connection (where defined) in its own region, and every
    ec2 target's in the project's sweep specs."""
    places = {(p.aws_conn_id, p.region) for p in project_provisions(settings, Ec2Provision)}
    if has_connection(settings.aws_conn_id):  # a project without AWS has nothing to find
        places.add((settings.aws_conn_id, None))
    return places


def reap(settings: Settings, run_is_live: Callable[[str, str], bool],
         places: Iterable[tuple[str, str | None]] | None = None,
         now: dt.datetime | None = None) -> list[Reaped]:
    """Terminates every project instance whose ``expires_at`` has passed or whose DAG run
    (``run_is_live(dag_id, run_id)``) is no longer running; what it terminated, and why."""
    now = now or dt.datetime.now(dt.UTC)
    reaped: list[Reaped] = []
    for conn_id, region in sorted(places if places is not None else known_places(settings),
                                  key=str):
        ec2, _ = aws_clients(conn_id, region)
        found = find_instances(ec2, [{"Name": f"tag:{PROJECT_TAG}", "Values": [PROJECT]},
                                     {"Name": "instance-state-name", "Values": LIVE_STATES}])
        doomed: list[tuple[dict, str]] = []
        for instance in found:
            tags = instance_tags(instance)
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
            tags = instance_tags(instance)
            reaped.append(Reaped(instance["InstanceId"], instance.get("InstanceType", ""),
                                 region or ec2.meta.region_name, tags.get("run_id", ""),
                                 tags.get("dag_id", ""), tags.get("target", ""),
                                 instance.get("LaunchTime"), reason))
    return reaped
