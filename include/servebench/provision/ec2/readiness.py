"""Commands on an instance and whether what they started is up: SSM Run Command (waiting
out an agent that is not online yet), the wait for the container's health, and the checks
that end it early (the instance gone or stopped, the container exited or killed)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from servebench.provision.ec2.aws import find_instances
from servebench.provision.ec2.script import CONTAINER
from servebench.provision.interface import LaunchError, poll_health

if TYPE_CHECKING:
    from servebench.config import Ec2Provision
    from servebench.endpoint import Endpoint

log = logging.getLogger(__name__)

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


def run_command(ssm, iid: str, lines: list[str], comment: str, deadline: float, *,
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


def wait_healthy(endpoint: Endpoint, path: str, deadline: float, ssm, iid: str,
                 instance_gone: Callable[[], str | None]) -> None:
    """Polls the container's health ``path`` until it answers (``poll_health``) or
    ``deadline``: then LaunchError with the container's log tail. Each poll first asks
    ``instance_gone()`` (why the instance has ended, None while it runs) and, every
    ``CONTAINER_CHECK_S``, the instance whether its container still lives."""
    url = endpoint.base_url + path
    asked = [time.monotonic()]

    def ended() -> str | None:  # the instance every poll; its container every few seconds
        why = instance_gone()
        if why or time.monotonic() - asked[0] < CONTAINER_CHECK_S:
            return why
        asked[0] = time.monotonic()
        return container_ended(ssm, iid)

    last = poll_health(url, deadline, ended=ended)
    if last is None:
        log.info("%s: %s healthy on %s", endpoint.name, url, iid)
        return
    logs = ""
    try:
        logs = run_command(ssm, iid, [f"docker logs --tail 40 {CONTAINER} 2>&1 || true"],
                           "servebench logs", time.monotonic() + 60)
    except LaunchError as exc:
        logs = f"<no logs: {exc}>"
    raise LaunchError(f"{url} not healthy by the health timeout (last: {last}); "
                      f"container log tail:\n{logs}")


def container_ended(ssm, iid: str) -> str | None:
    """Why the launched container has ended (exited, killed for memory, removed), in its
    exit code and its own log lines; None while it lives. A check that cannot reach the
    instance decides nothing: the health wait goes on."""
    try:
        output = run_command(ssm, iid, CONTAINER_STATE, "servebench state",
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


def instance_ended(ec2, iid: str) -> str | None:
    """Why the instance has ended under its units (gone, stopping, stopped, terminated: a
    spot interruption, anyone's terminate); None while it is pending or running."""
    found = find_instances(ec2, [{"Name": "instance-id", "Values": [iid]}])
    if not found:
        return f"instance {iid} is gone"
    state = found[0]["State"]["Name"]
    if state in ("pending", "running"):
        return None
    reason = found[0].get("StateReason", {}).get("Message") or \
        found[0].get("StateTransitionReason") or "no reason given"
    return f"instance {iid} is {state} ({reason})"
