"""The EC2 provisioner's life cycle (``Provisioner``'s methods): an instance per target
acquired by its host's bench task (``launch``), each variant's container launched on it
through SSM (``script``, ``readiness``; what each launch reported: ``script.Launched``), its lease extended while its units measure, and the
instance released, torn down or reaped (``reaping``). The plan's checks are in ``checks``."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from servebench.endpoint import Endpoint
from servebench.energy import EnergySource, LoggedReadings
from servebench.errors import TeardownError
from servebench.hub import hub_cache_dir
from servebench.memory import MemorySample
from servebench.provision.ec2.aws import aws_clients, ec2_spec
from servebench.provision.ec2.checks import account_problems, variant_problems
from servebench.provision.ec2.launch import held_targets, launch_targets
from servebench.provision.ec2.readiness import instance_ended, run_command, wait_healthy
from servebench.provision.ec2.reaping import (
    extend_lease,
    hold_instance,
    known_places,
    paid_instances,
    reap,
    terminate_run,
)
from servebench.provision.ec2.script import (
    CONTAINER,
    ENERGY_LOG,
    MEMORY_PEAK,
    Launched,
    energy_header,
    energy_readings_command,
    render_script,
    sampled_memory,
)
from servebench.provision.interface import (
    LaunchError,
    Provisioner,
    Reaped,
    register_provisioner,
    served_engine_version,
)

if TYPE_CHECKING:
    from servebench.config import TargetSpec, VariantSpec
    from servebench.settings import Settings
    from servebench.stacks.adapter import StackAdapter

log = logging.getLogger(__name__)


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
        return {t.name: {"conn_id": ec2_spec(t).aws_conn_id, "region": ec2_spec(t).region}
                for t in targets}

    def __init__(self, run_id: str, state: dict, settings: Settings):
        self.run_id = run_id
        self.state = state  # target name -> {"instance_id", "address", "conn_id", "region"}
        self.settings = settings
        self._launched: dict[str, Launched] = {}  # endpoint name -> its container
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
        night goes on: ``launch.launch_targets``)."""
        return launch_targets(run_id, targets, dag_id)

    @classmethod
    def attach(cls, run_id, state, settings) -> Ec2Provisioner:
        return cls(run_id, state or {}, settings)

    @classmethod
    def held(cls, run_id, state, targets, settings) -> Ec2Provisioner:
        """The instances the bench tasks held for ``targets`` after their units, found by
        tag (``launch.held_targets``: a target without one keeps why)."""
        return cls(run_id, {**(state or {}), **held_targets(run_id, targets)}, settings)

    def host_problem(self, target: TargetSpec) -> str | None:
        facts = self.state.get(target.name)
        if not facts or "address" not in facts:
            return (facts or {}).get("error") or "no instance held for it"
        return None

    @classmethod
    def check(cls, target: TargetSpec, variant: VariantSpec, adapter: StackAdapter,
              settings: Settings) -> list[str]:
        """What makes the variant unrunnable on an instance (``variant_problems``)."""
        return variant_problems(ec2_spec(target), variant, adapter, settings)

    @classmethod
    def check_target(cls, target: TargetSpec, settings: Settings) -> list[str]:
        """What the account would refuse, asked of AWS before anything is paid for
        (``account_problems``)."""
        return account_problems(ec2_spec(target), target.name)

    # -- per variant ------------------------------------------------------------------------
    def launch(self, name, target, variant, adapter) -> Endpoint:
        spec = ec2_spec(target)
        facts = self._facts(target.name)
        launch = adapter.container_launch(variant, port=spec.port, settings=self.settings)
        _, ssm = self._clients(facts)
        script = render_script(launch, spec, hub_cache=str(hub_cache_dir()))
        iid = facts["instance_id"]
        self._launched[name] = Launched(target.name, launch.image)
        self._leases[target.name] = (spec.ttl_hours, 0.0)
        self._extend_lease(target.name)  # the unit's work starts now
        now = time.monotonic()
        deadline = now + spec.health_timeout_s
        try:
            output = run_command(ssm, iid, script, f"servebench {name}", deadline,
                                 online_by=now + spec.ssm_timeout_s, spec=spec)
        except LaunchError as exc:
            exc.argv = launch.argv
            raise
        self._launched[name] = self._launched[name].reported(output, iid)
        base_url = f"http://{facts['address']}:{spec.port}"
        endpoint = Endpoint(base_url, launch.served_model, adapter.chat_path,
                            launch.metrics_path, argv=launch.argv, name=name)
        wait_healthy(endpoint, launch.health_path, deadline, ssm, iid,
                     lambda: self._instance_gone(endpoint.name))
        return endpoint

    def placement(self, endpoint: Endpoint) -> dict[str, str | None]:
        facts, launched = self._facts_of(endpoint.name) or {}, self._launched.get(endpoint.name)
        host = f"{facts['instance_id']} ({facts['address']})" if facts else None
        return {"host": host, "image": launched.pulled if launched else None,
                "gpu": launched.gpus if launched else None}

    def _facts_of(self, name: str) -> dict | None:
        """The instance facts of endpoint ``name``'s target (None before its launch)."""
        launched = self._launched.get(name)
        return self.state.get(launched.target) if launched else None

    def _clients(self, facts: dict):
        """(ec2, ssm) for a target's instance, made once per provisioner."""
        key = (facts["conn_id"], facts["region"])
        if key not in self._client_cache:
            self._client_cache[key] = aws_clients(*key)
        return self._client_cache[key]

    def _places(self) -> set[tuple[str, str | None]]:
        """Where this run's instances are: its targets' (connection, region), or, without the
        setup task's state, every place the project's ec2 targets use."""
        return {(f["conn_id"], f["region"]) for f in self.state.values()} or \
            known_places(self.settings)

    def _facts(self, target: str) -> dict:
        facts = self.state.get(target)
        if facts and "error" in facts:
            raise LaunchError(f"target {target!r} has no instance: {facts['error']}")
        if not facts or "address" not in facts:
            raise LaunchError(f"target {target!r} has no instance in this run (its host "
                              "was not acquired)")
        return facts

    def _instance_gone(self, name: str) -> str | None:
        facts = self._facts_of(name)
        if not facts:
            return None
        ec2, _ = self._clients(facts)
        return instance_ended(ec2, facts["instance_id"])

    def exited(self, endpoint: Endpoint) -> str | None:
        """A spot interruption (or anyone's terminate) ends the instance under the cells.
        Asked before each cell: a live unit's instance has its lease extended here."""
        why = self._instance_gone(endpoint.name)
        if why is None and endpoint.name in self._launched:
            self._extend_lease(self._launched[endpoint.name].target)
        return why

    def _extend_lease(self, target: str) -> None:
        """Moves the instance's ``expires_at`` tag to ``ttl_hours`` from now once half of
        the last lease is spent (and at each unit's launch): an instance's lifetime counts
        from its own units' work, so the janitor never reaps one under a unit that is still
        measuring, while a unit that hangs (asks nothing) still lets it expire."""
        facts, lease = self.state.get(target), self._leases.get(target)
        if not facts or lease is None:
            return
        ec2, _ = self._clients(facts)
        self._leases[target] = extend_lease(ec2, facts["instance_id"], lease)

    def stop(self, endpoint: Endpoint) -> None:
        """The container is removed so the next variant has the GPU; the instance stays for
        it (the teardown task terminates it)."""
        facts = self._facts_of(endpoint.name)
        if not facts or self._instance_gone(endpoint.name):
            return
        _, ssm = self._clients(facts)
        try:
            run_command(ssm, facts["instance_id"], [f"docker rm -f {CONTAINER} || true"],
                        "servebench stop", time.monotonic() + 120)
        except LaunchError:
            log.exception("%s: removing the container failed (the instance is terminated "
                          "at teardown all the same)", endpoint.name)

    def _ask(self, endpoint: Endpoint, line: str, comment: str) -> str | None:
        """One shell line run on ``endpoint``'s instance, its output (None: no instance,
        or SSM could not run it, logged)."""
        facts = self._facts_of(endpoint.name)
        if not facts or "instance_id" not in facts:
            return None
        _, ssm = self._clients(facts)
        try:
            return run_command(ssm, facts["instance_id"], [line], comment,
                               time.monotonic() + 60)
        except LaunchError as exc:
            log.warning("%s: %s on %s failed: %s", endpoint.name, comment,
                        facts["instance_id"], exc)
            return None

    def memory(self, endpoint: Endpoint) -> MemorySample:
        """What the launch script's sampler kept of the container's peak (``script``)."""
        text = self._ask(endpoint, f"cat {MEMORY_PEAK} 2>/dev/null || true",
                         "servebench memory")
        return MemorySample.unmeasured("SSM could not reach the instance") if text is None \
            else sampled_memory(text)

    def energy_counter(self, endpoint: Endpoint) -> tuple[EnergySource | None, str]:
        """The instance's GPUs' energy counter, read on the instance by the launch script's
        sampler (``script.ENERGY_SAMPLER``) and fetched around each cell over SSM; None and
        why where its log's header says nothing counts."""
        header = self._ask(endpoint, f"head -n 1 {ENERGY_LOG} 2>/dev/null || true",
                           "servebench energy")
        if header is None:
            return None, "SSM could not reach the instance"
        source, why = energy_header(header)
        if source is None:
            return None, why
        return InstanceEnergy(source, lambda start, end: self._ask(
            endpoint, energy_readings_command(start, end), "servebench energy")), source

    def server_log(self, endpoint: Endpoint) -> str | None:
        """The container's log from its start, its first 20 kB (SSM returns at most 24,000
        characters): the engines report their weights and KV cache as they start."""
        return self._ask(endpoint, f"docker logs {CONTAINER} 2>&1 | head -c 20000 || true",
                         "servebench log")

    def hardware(self, target: TargetSpec) -> str:
        """The placement's the instance was launched in (a fallback is other hardware)."""
        facts = self.state.get(target.name) or {}
        spec = ec2_spec(target)
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
        if endpoint is not None and endpoint.name in self._launched:
            return "image " + self._launched[endpoint.name].pulled
        return "unknown (ec2 container)"

    # -- teardown ---------------------------------------------------------------------------
    def release(self, targets: list[TargetSpec]) -> list[str]:
        """Terminates ``targets``' instances of this run, their units done (the next host's
        instance does not wait for this one's idle hours)."""
        gone = []
        for target in targets:
            spec = ec2_spec(target)
            try:
                gone += terminate_run(self.run_id, {(spec.aws_conn_id, spec.region)},
                                      target=target.name)
            except (ClientError, BotoCoreError) as exc:
                raise TeardownError(f"terminating {target.name}'s instance failed: "
                                    f"{exc}") from exc
        return gone

    def hold(self, targets: list[TargetSpec]) -> list[str]:
        """Tags ``targets``' instances as held for the same morning's relaunches, their
        lease from now (``reaping.hold_instance``); one that cannot be tagged is released
        instead (an untagged instance would be the teardown's, under the relaunches)."""
        held = []
        for target in targets:
            facts = self.state.get(target.name) or {}
            if "instance_id" not in facts or "error" in facts:
                continue  # nothing launched, or already ended: nothing to keep
            ec2, _ = self._clients(facts)
            try:
                hold_instance(ec2, facts["instance_id"], ec2_spec(target).ttl_hours)
            except (ClientError, BotoCoreError) as exc:
                log.warning("holding %s's instance failed (%s): released instead",
                            target.name, exc)
                self.release([target])
                continue
            held.append(facts["instance_id"])
        return held

    @classmethod
    def reap_orphans(cls, settings, run_is_live, now) -> list[Reaped]:
        try:
            return reap(settings, run_is_live, now=now)
        except (ClientError, BotoCoreError) as exc:
            raise TeardownError(f"reaping ec2 instances failed: {exc}") from exc

    def paid_hosts(self) -> list[dict]:
        """Every instance tagged with this run, whatever its state (``paid_instances``)."""
        return paid_instances(self.run_id, self._places())

    def teardown(self, *, spare_held: bool = False) -> list[str]:
        """Terminates every instance tagged with this run (found by tag, so a setup task
        that died between launching and returning its state leaks nothing); with
        ``spare_held``, not those held for the confirm (``hold``)."""
        places = self._places()
        try:
            return terminate_run(self.run_id, places, spare_held=spare_held)
        except (ClientError, BotoCoreError) as exc:
            raise TeardownError(f"terminating run {self.run_id}'s instances failed: "
                               f"{exc}") from exc


class InstanceEnergy(EnergySource):
    """An instance's energy counter as its sampler logged it: each cell's readings fetched
    around its window once it is done (``energy.LoggedReadings``)."""

    def __init__(self, source: str, fetch):
        self.source, self._fetch = source, fetch

    def readings(self) -> LoggedReadings:
        return LoggedReadings(self.source, self._fetch)
