"""The provisioner seam: where a variant's server comes from, and that it always goes away.

The nightly DAG drives one provisioner per kind a sweep uses (``provision: {kind: ...}`` on
each target), through this interface only:

- ``acquire(run_id, targets, dag_id=)`` -- whatever ``targets`` need (a state folder,
  instances); returns JSON-able state that the other tasks get back. The setup task calls it
  once per run, except for a kind that pays by the machine (``per_host``): there the setup
  task records only ``where(targets)``, and each host's bench task acquires its own host when
  its first unit is due and releases it (``release``) when its last has ended
  (``host_session``), or holds it (``hold``) where the sweep confirms its suspects: the
  teardown spares it, the confirm relaunches on it (``held``) and releases it, and the
  release task after the confirm ends whatever is left (``confirm_session``);
- ``host_key(target)`` -- the machine a target's units run on: units of one host run one at a
  time (they would measure each other), units of different hosts run side by side;
- ``attach(run_id, state)`` -- in a bench or teardown task (other processes, maybe other
  tries): the provisioner again, from that state (``None`` when setup itself failed);
- ``check(target, variant, adapter)`` -- plan time: what makes a variant unrunnable this way,
  before anything is provisioned;
- ``launch(name, target, variant, adapter) -> Endpoint``, ``exited(endpoint)``,
  ``stop(endpoint)`` -- per variant, in the bench task; ``stop`` runs in every path;
- ``hardware(target)``, ``engine_version(adapter, endpoint)`` -- what the cells record as the
  hardware and engine version they ran on;
- ``memory(endpoint)``, ``server_log(endpoint)`` -- before ``stop``: the serving processes'
  peak memory since launch (``servebench.memory``), and the server's log, where the engine
  reports its weights and KV cache;
- ``teardown()`` -- the teardown task, which runs even when bench tasks fail: everything the
  run still holds is stopped or terminated, and named; then ``paid_hosts()``, what the run
  paid for and from when to when;
- ``reap_orphans(settings, run_is_live, now)`` -- the hourly janitor: whatever this kind
  launched that is past its expiry or whose DAG run no longer runs is ended.

Implementations register by ``kind`` (``local``, ``static``, ``ec2``); the pipeline and the runner
import none of them.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import httpx

from servebench.canary import CanaryReading
from servebench.endpoint import Endpoint
from servebench.errors import LaunchError, TeardownError
from servebench.memory import MemorySample

if TYPE_CHECKING:
    from servebench.config import TargetSpec, VariantSpec
    from servebench.energy import EnergySource
    from servebench.settings import Settings
    from servebench.stacks.adapter import ContainerLaunch, StackAdapter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reaped:
    """Something the janitor terminated that no run should still have held, and why."""

    instance_id: str  # the instance, or namespace/pod
    instance_type: str
    region: str  # the region, or the cluster context
    run_id: str
    dag_id: str
    target: str
    launched_at: dt.datetime | None
    reason: str


class Provisioner(ABC):
    """One way of getting servers for a run (see the module doc for the life cycle)."""

    kind: ClassVar[str]
    # True: a paid machine per host, acquired when its first unit is due and released when
    # its last ends (by the host's bench task), not held from setup to teardown
    per_host: ClassVar[bool] = False
    settings: Settings

    @classmethod
    def host_key(cls, target: TargetSpec) -> str:
        """The machine ``target``'s units run on (default: one for the kind, e.g. this
        worker for ``local``); targets with the same key are benchmarked one unit at a time."""
        return cls.kind

    @classmethod
    def where(cls, targets: list[TargetSpec], settings: Settings) -> dict:
        """A ``per_host`` kind's setup state: what the teardown needs to find whatever the
        hosts acquire (nothing is acquired here)."""
        return {}

    def release(self, targets: list[TargetSpec]) -> list[str]:
        """A ``per_host`` kind: end the machine ``targets`` ran on, their last unit done (in
        every path); what was ended. The teardown ends whatever this leaves."""
        return []

    def hold(self, targets: list[TargetSpec]) -> list[str]:
        """A ``per_host`` kind: keep the machine ``targets`` ran on past their last unit, for
        the same morning's relaunches, marked so that ``teardown(spare_held=True)`` leaves
        it; what is held. A kind that cannot hold releases (the default)."""
        self.release(targets)
        return []

    @classmethod
    def held(cls, run_id: str, state: dict | None, targets: list[TargetSpec],
             settings: Settings) -> Provisioner:
        """The provisioner on what run ``run_id`` still holds for ``targets`` once their
        units have ended (the confirm's): a ``per_host`` kind finds the machines its bench
        tasks held; any other kind attaches to ``state``."""
        return cls.attach(run_id, state, settings)

    def host_problem(self, target: TargetSpec) -> str | None:
        """Why ``target`` has no host to relaunch on in ``held``'s provisioner (None: it
        has one)."""
        return None

    @classmethod
    @abstractmethod
    def acquire(cls, run_id: str, targets: list[TargetSpec], settings: Settings, *,
                dag_id: str = "") -> dict:
        """Set up what the run's ``targets`` need; JSON-able state for ``attach``.
        ``dag_id`` with ``run_id`` names the DAG run that holds what was set up. A target
        that cannot be set up must not take the others down: keep its error in the state
        and raise it from ``launch`` (its units' cells then say why)."""

    @classmethod
    @abstractmethod
    def attach(cls, run_id: str, state: dict | None, settings: Settings) -> Provisioner:
        """The provisioner of run ``run_id`` from ``acquire``'s state (None: setup failed)."""

    @classmethod
    def check(cls, target: TargetSpec, variant: VariantSpec, adapter: StackAdapter,
              settings: Settings) -> list[str]:
        """Problems that make ``variant`` unrunnable this way (plan time, and again before
        launch); each names the field."""
        return adapter.check(variant, settings)

    @classmethod
    def refusals(cls, target: TargetSpec, variant: VariantSpec, adapter: StackAdapter,
                 settings: Settings) -> list[str]:
        """Why the hardware ``variant`` would run on cannot run it, the spec being right
        (plan time, and again before launch): the unit alone fails, its cells stored failed
        with the reason; the rest of the sweep runs. Known only where the hardware is this
        worker's (the local provisioner); elsewhere the engine says at launch."""
        return []

    @classmethod
    def check_target(cls, target: TargetSpec, settings: Settings) -> list[str]:
        """Problems with where ``target`` would run, asked once per target at plan time
        (credentials, the account's resources); each names the field."""
        return []

    @abstractmethod
    def launch(self, name: str, target: TargetSpec, variant: VariantSpec,
               adapter: StackAdapter) -> Endpoint:
        """A healthy server for ``variant``; raises :class:`LaunchError` (or the error that
        stopped it) when there is none."""

    def exited(self, endpoint: Endpoint) -> str | None:
        """How ``endpoint``'s server has ended, with its log tail; None while it serves (or
        where this provisioner cannot know)."""
        return None

    @abstractmethod
    def stop(self, endpoint: Endpoint) -> None:
        """Done with ``endpoint`` (a launched server is stopped; a static one is left)."""

    def memory(self, endpoint: Endpoint) -> MemorySample:
        """The peak memory of ``endpoint``'s serving processes from launch to now (asked
        before ``stop``): resident memory, and device memory on a GPU; each None with why
        where this provisioner cannot measure it."""
        return MemorySample.unmeasured(f"not measured by the {self.kind} provisioner")

    def server_log(self, endpoint: Endpoint) -> str | None:
        """``endpoint``'s server's log as far as it has written it (None: this provisioner
        cannot read it), for what the engine reports there of its memory."""
        return None

    def energy_counter(self, endpoint: Endpoint) -> tuple[EnergySource | None, str]:
        """The energy counter of the machine ``endpoint``'s server runs on, read around each
        of its cells (``servebench.energy``), with what it counts; or None and why none is
        read (the cells' energy is then null, never zero)."""
        return None, f"the {self.kind} provisioner reads no energy counter of its hosts"

    def canary(self) -> CanaryReading:
        """The host canary (``servebench.canary``) timed on the machine this provisioner's
        servers run on, none of them running; unmeasured, with why, where that is not this
        worker."""
        return CanaryReading.unmeasured(
            f"the {self.kind} provisioner's servers run on another machine than this worker")

    @abstractmethod
    def hardware(self, target: TargetSpec) -> str:
        """What ``target``'s cells record as their hardware (it keys their trend series)."""

    def price_per_hour(self, target: TargetSpec, sweep_price: float) -> float:
        """USD per hour of the host ``target``'s cells ran on: the spec's (a provisioner
        that may launch elsewhere than the spec's first choice says its own)."""
        return target.price_per_hour(sweep_price)

    def placement(self, endpoint: Endpoint) -> dict[str, str | None]:
        """Where ``endpoint``'s server ran, for its cells' provenance: ``host`` (the
        provisioned machine), ``image`` (the container, pinned by digest where known) and
        ``gpu`` (its GPUs as that machine reports them, ``provenance.describe_gpus``); None
        where this provisioner launches no such thing or cannot know."""
        return {"host": None, "image": None, "gpu": None}

    def engine_version(self, adapter: StackAdapter, endpoint: Endpoint | None = None) -> str:
        """What the cells record as the engine's version: the engine this provisioner runs
        (``endpoint``: the server it launched for the variant, once there is one)."""
        return adapter.version(self.settings)

    @abstractmethod
    def teardown(self, *, spare_held: bool = False) -> list[str]:
        """Stop or terminate everything the run still holds (with ``spare_held``, not the
        machines ``hold`` kept for the confirm); returns what it stopped."""

    @classmethod
    def reap_orphans(cls, settings: Settings, run_is_live: Callable[[str, str], bool],
             now: dt.datetime) -> list[Reaped]:
        """The janitor: end whatever this kind launched that is past its expiry or whose DAG
        run (``run_is_live(dag_id, run_id)``) is no longer running; what it ended. Kinds
        that hold nothing beyond a task (local, static) have nothing to reap."""
        return []

    def paid_hosts(self) -> list[dict]:
        """The machines this run paid for by the hour, after ``teardown``: ``host``, ``target``,
        ``instance_type``, ``launched_at``, ``ended_at`` (None: still up). Empty where the
        provisioner holds no such machine (the units' own server time is what was paid)."""
        return []


@contextmanager
def host_session(cls: type[Provisioner], run_id: str, state: dict | None,
                 targets: list[TargetSpec], settings: Settings, *,
                 dag_id: str = "", hold: bool = False) -> Iterator[Provisioner]:
    """The provisioner a host's units run on, for as long as they run: for a ``per_host``
    kind its machine is acquired on entry and released on exit, whatever happened in
    between (a release that fails is logged; the teardown ends it and says so); with
    ``hold``, kept for the same morning's relaunches instead (``Provisioner.hold``)."""
    if not cls.per_host:
        yield cls.attach(run_id, state, settings)
        return
    acquired = cls.acquire(run_id, targets, settings, dag_id=dag_id)
    provisioner = cls.attach(run_id, {**(state or {}), **acquired}, settings)
    try:
        yield provisioner
    finally:
        if hold:
            held = provisioner.hold(targets)
            log.info("%s's host held for the same morning's relaunches: %s",
                     [t.name for t in targets], held)
        else:
            release(provisioner, targets)


def release(provisioner: Provisioner, targets: list[TargetSpec]) -> None:
    """``targets``' machine ended (``Provisioner.release``); a release that fails is logged,
    as the teardown (or the release after the confirm) terminates by tag and raises if it
    cannot."""
    try:
        released = provisioner.release(targets)
    except TeardownError:
        log.exception("releasing %s's host failed", [t.name for t in targets])
    else:
        log.info("released %s's host: %s", [t.name for t in targets], released)


@contextmanager
def confirm_session(cls: type[Provisioner], run_id: str, targets: list[TargetSpec],
                    settings: Settings, *, dag_id: str = "") -> Iterator[Provisioner]:
    """The provisioner the same morning's relaunches run on (``bench.confirm``), after the
    run's teardown. A ``per_host`` kind relaunches on the machines its bench tasks held
    (``Provisioner.held``: nothing new paid for), released on exit; any other kind has
    what ``targets`` need acquired again for run ``run_id`` (a state folder, a namespace)
    and torn down on exit; whatever happened in between."""
    if cls.per_host:
        provisioner = cls.held(run_id, None, targets, settings)
        try:
            yield provisioner
        finally:
            release(provisioner, targets)
        return
    provisioner = cls.attach(run_id, cls.acquire(run_id, targets, settings, dag_id=dag_id),
                             settings)
    try:
        yield provisioner
    finally:
        stopped = provisioner.teardown()
        if stopped:
            log.warning("the confirmation's teardown stopped what it left: %s", stopped)


def container_problems(adapter: StackAdapter, variant: VariantSpec, *, port: int,
                       settings: Settings, kind: str
                       ) -> tuple[ContainerLaunch | None, list[str]]:
    """The container a ``kind`` host would run for ``variant`` (None: the stack has none) and
    the adapter's checks of the variant's settings -- not its ``local_problems``: the engine
    runs in its image, not on the worker -- with the image's (one not pinned by digest is
    allowed; the plan warns of it)."""
    try:
        launch = adapter.container_launch(variant, port=port, settings=settings)
    except NotImplementedError as exc:
        return None, [f"{exc} (provision kind {kind} runs stacks in containers)"]
    problems = adapter.check(variant, settings)
    problem = adapter.image_problem(launch.image)
    if problem:
        problems.append(f"field image: {problem}")
    return launch, problems


def served_engine_version(adapter: StackAdapter, endpoint: Endpoint) -> str | None:
    """The version a running server reports at ``adapter.version_path`` (None: the stack
    has no such path, or the server did not say)."""
    if adapter.version_path is None:
        return None
    url = endpoint.base_url + adapter.version_path
    try:
        response = httpx.get(url, timeout=10.0, headers=endpoint.headers)
        response.raise_for_status()
        payload = response.json()
    except (httpx.HTTPError, ValueError) as exc:  # ValueError: not JSON
        log.warning("%s: no engine version from %s: %s", endpoint.name, url, exc)
        return None
    return adapter.served_version(payload) if isinstance(payload, dict) else None


def poll_health(url: str, deadline: float, *, headers: dict[str, str] | None = None,
                ended: Callable[[], str | None] | None = None,
                interval_s: float = 1.0) -> str | None:
    """GETs ``url`` until it answers 200 (None) or ``deadline`` (``time.monotonic()``) passes:
    then what it last answered. ``ended()`` is asked before each try: a server that has ended
    (its process exited, its instance or pod is gone) raises :class:`LaunchError` with it."""
    last = "no answer"
    with httpx.Client(timeout=10.0, headers=headers or {}) as client:
        while True:
            why = ended() if ended is not None else None
            if why:
                raise LaunchError(why)
            try:
                response = client.get(url)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return None
                last = f"HTTP {response.status_code}"
            if time.monotonic() >= deadline:
                return last
            time.sleep(interval_s)


def project_provisions(settings: Settings, kind: type) -> list:
    """The ``provision`` specs of type ``kind`` of every target in the project's sweep specs
    (``include/sweeps/``): where a janitor, or a teardown without state, looks. A sweep that
    does not validate is skipped, with a warning."""
    from servebench.config import load_sweep
    from servebench.errors import SpecError

    found = []
    for path in sorted((settings.project_root / "include" / "sweeps").glob("*.yaml")):
        try:
            spec = load_sweep(path)
        except SpecError:
            log.warning("skipping %s: not a valid sweep", path)
            continue
        found += [t.provision for t in spec.targets if isinstance(t.provision, kind)]
    return found


REGISTRY: dict[str, type[Provisioner]] = {}  # filled by @register_provisioner


def register_provisioner(cls: type[Provisioner]) -> type[Provisioner]:
    REGISTRY[cls.kind] = cls
    return cls
