"""The local provisioner (``provision: {kind: local}``, the default): serving stacks as
subprocesses on the worker that runs the bench task.

Every server is started in its own session (process group) and recorded in a pid file under
the run's state folder, so the teardown task -- a different process, maybe a different try --
can stop whatever a crashed task left behind. ``reap`` (``teardown``) is that teardown.
From its start to its stop, each server's process tree is sampled for its peak memory
(``servebench.memory.TreeSampler``; ``memory``); each cell reads this worker's energy counter,
where it has one (``servebench.energy``; ``energy_counter``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from servebench.canary import CanaryReading, read_canary
from servebench.endpoint import Endpoint
from servebench.energy import EnergyCounter, host_counter
from servebench.errors import ServerLaunchError
from servebench.memory import MemorySample, TreeSampler
from servebench.provenance import hardware, local_gpus
from servebench.provision.interface import (
    LaunchError,
    Provisioner,
    register_provisioner,
)
from servebench.results.store import encode_run_id
from servebench.settings import Settings, get_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunningServer:
    name: str
    pid: int
    base_url: str
    log_path: Path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def describe_exit(returncode: int) -> str:
    """``exited with code 1`` or ``killed by SIGSEGV (-11)``: Popen's negative codes named."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name} ({returncode})"
    return f"exited with code {returncode}"


# an exception a Python server raised, as its traceback ends (``ValueError: There is no
# module or parameter named 'lm_head.weight_packed' ...``): at the start of a line or of a
# logged message (vLLM's ``(Worker pid=7) ERROR 12-05 01:26:33 [file.py:953] ``); not one a
# message mentions (its warning "... errors like `OSError: [Errno 24] Too many open files`")
_RAISED = re.compile(r"(?:^|\]\s)((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): (\S.*)$")


def _log_tail(path: Path, lines: int = 30) -> str:
    """``: <the first exception the log raised>; log tail:\n<its last lines>`` -- the cause
    first, on the reason's first line: vLLM's engine dies with "Engine core initialization
    failed. See root cause above", the cause a hundred lines before its last ones."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "; log tail:\n<no log>"
    first = next((m.group(1) + ": " + m.group(2) for line in text
                  if (m := _RAISED.search(line))), None)
    return (f": {first}" if first else "") + "; log tail:\n" + "\n".join(text[-lines:])


@register_provisioner
class LocalProvisioner(Provisioner):
    """Starts, health-checks and always stops local server processes for one run."""

    kind = "local"

    def __init__(self, state_dir: Path, settings: Settings | None = None):
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.settings = settings or get_settings()
        self._procs: dict[int, subprocess.Popen] = {}  # servers this process started, by pid
        self._memory: dict[int, TreeSampler] = {}  # their memory, sampled until stopped
        self._energy: tuple[EnergyCounter | None, str] | None = None  # found when first asked

    # -- the Provisioner interface ----------------------------------------------------------
    @staticmethod
    def _state_dir(run_id: str, settings: Settings) -> Path:
        return settings.work_dir / encode_run_id(run_id)

    @classmethod
    def acquire(cls, run_id, targets, settings, *, dag_id: str = "") -> dict:
        """A state folder that records every server this run starts."""
        return {"state_dir": str(cls(cls._state_dir(run_id, settings), settings).state_dir)}

    @classmethod
    def attach(cls, run_id, state, settings) -> LocalProvisioner:
        state_dir = Path(state["state_dir"]) if state else cls._state_dir(run_id, settings)
        return cls(state_dir, settings)

    @classmethod
    def check(cls, target, variant, adapter, settings) -> list[str]:
        """The adapter's checks, and that its engine is installed here (local_problems)."""
        return [*adapter.check(variant, settings), *adapter.local_problems(variant, settings)]

    @classmethod
    def refusals(cls, target, variant, adapter, settings) -> list[str]:
        """What this worker's hardware cannot run (``StackAdapter.hardware_refusals``)."""
        return adapter.hardware_refusals(variant, settings)

    def launch(self, name, target, variant, adapter) -> Endpoint:
        port = free_port()
        launch = adapter.local_launch(variant, host="127.0.0.1", port=port,
                                      settings=self.settings)
        timeout_s = self.health_timeout_s(target, variant, adapter)
        try:
            server = self.start(name, launch.argv, port=port, health_path=launch.health_path,
                                env=launch.env, timeout_s=timeout_s)
        except LaunchError as exc:
            exc.argv = launch.argv  # the failed rows record what was launched
            raise
        return Endpoint(server.base_url, launch.served_model, adapter.chat_path,
                        launch.metrics_path, argv=launch.argv, name=server.name,
                        pid=server.pid)

    def health_timeout_s(self, target, variant, adapter) -> float:
        """How long a variant's server may take to answer its health check: the spec's, else
        the setting, or longer for a first start that fetches its weights."""
        return getattr(target.provision, "health_timeout_s", None) or max(
            self.settings.health_timeout_s, adapter.cold_start_s(variant, self.settings))

    def hardware(self, target) -> str:
        return hardware()

    def placement(self, endpoint: Endpoint) -> dict[str, str | None]:
        """This worker serves: its own GPUs (none on a CPU host)."""
        return {"host": None, "image": None, "gpu": local_gpus()}

    def teardown(self, *, spare_held: bool = False) -> list[str]:  # it holds no machine
        return self.reap()

    def _pid_file(self, name: str) -> Path:
        return self.state_dir / f"{name}.server.json"

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        port: int,
        health_path: str,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        timeout_s: float = 300.0,
    ) -> RunningServer:
        log_path = self._log_path(name)
        log.info("starting %s: %s", name, " ".join(argv))
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(
                argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # own process group: killpg reaches its children
            )
        self._pid_file(name).write_text(
            json.dumps({"pid": proc.pid, "argv": argv, "started_at": time.time()})
        )
        server = RunningServer(name, proc.pid, f"http://{host}:{port}", log_path)
        self._procs[proc.pid] = proc
        self._memory[proc.pid] = TreeSampler(proc.pid).start()  # loading counts too
        try:
            self._wait_healthy(proc, server, health_path, timeout_s)
        except BaseException:
            self.stop(server)
            raise
        return server

    def _wait_healthy(
        self, proc: subprocess.Popen, server: RunningServer, health_path: str, timeout_s: float
    ) -> None:
        deadline = time.monotonic() + timeout_s
        url = server.base_url + health_path
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                code = proc.poll()
                if code is not None:
                    raise ServerLaunchError(
                        f"{server.name} {describe_exit(code)} before becoming healthy"
                        + _log_tail(server.log_path)
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(url).status_code == 200:
                        log.info("%s healthy at %s", server.name, server.base_url)
                        return
                time.sleep(0.25)
        raise ServerLaunchError(
            f"{server.name} not healthy at {url} after {timeout_s:.0f}s"
            + _log_tail(server.log_path)
        )

    def exited(self, server: RunningServer | Endpoint) -> str | None:
        """How a server this provisioner started has ended (``killed by SIGSEGV (-11)``), with
        its log tail; None while it still runs."""
        proc = self._procs.get(server.pid)
        if proc is None or proc.poll() is None:
            return None
        return f"{server.name} {describe_exit(proc.returncode)}" \
            + _log_tail(self._log_path(server.name))

    def _log_path(self, name: str) -> Path:
        return self.state_dir / f"{name}.log"

    def memory(self, endpoint: Endpoint) -> MemorySample:
        """The server's process tree's peak since it was started (``TreeSampler``)."""
        sampler = self._memory.get(endpoint.pid)
        if sampler is None:
            return MemorySample.unmeasured("not sampled: the server was started by another "
                                           "process")
        return sampler.peak()

    def canary(self) -> CanaryReading:
        """Timed here: this worker is the servers' host."""
        return read_canary("this worker, the servers' host, with no server running")

    def energy_counter(self, endpoint: Endpoint) -> tuple[EnergyCounter | None, str]:
        """This worker's (``energy.host_counter``: its GPUs', else its CPU packages'), looked
        for once."""
        if self._energy is None:
            self._energy = host_counter(self.settings.powercap_root)
            log.info("energy: %s", self._energy[1])
        return self._energy

    def server_log(self, endpoint: Endpoint) -> str | None:
        """The server's log file (a retried unit's server appends to its predecessor's:
        readers take the last report in it)."""
        try:
            return self._log_path(endpoint.name).read_text(errors="replace")
        except OSError:
            return None

    def stop(self, server: RunningServer | Endpoint, grace_s: float = 10.0) -> None:
        sampler = self._memory.pop(server.pid, None)
        if sampler is not None:
            sampler.stop()
        _terminate_group(server.pid, grace_s)
        proc = self._procs.pop(server.pid, None)
        if proc is not None:
            proc.poll()  # collect its status so no zombie is left
        self._pid_file(server.name).unlink(missing_ok=True)
        log.info("stopped %s (pid %d)", server.name, server.pid)

    @contextlib.contextmanager
    def serving(self, name: str, argv: list[str], **kwargs) -> Iterator[RunningServer]:
        server = self.start(name, argv, **kwargs)
        try:
            yield server
        finally:
            self.stop(server)

    def reap(self) -> list[str]:
        """Stop every server still recorded for this run; returns the names it stopped."""
        reaped = []
        for pid_file in sorted(self.state_dir.glob("*.server.json")):
            name = pid_file.name.removesuffix(".server.json")
            try:
                pid = json.loads(pid_file.read_text())["pid"]
            except (OSError, ValueError, KeyError):
                pid_file.unlink(missing_ok=True)
                continue
            if _alive(pid):
                log.warning("reaping leaked server %s (pid %d)", name, pid)
                _terminate_group(pid, 10.0)
                reaped.append(name)
            pid_file.unlink(missing_ok=True)
        return reaped


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours still "exists": reap it so it does not count as alive
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def _terminate_group(pid: int, grace_s: float) -> None:
    """SIGTERM the server's process group, SIGKILL it after ``grace_s``; then SIGKILL the
    group once more so that no child that ignored SIGTERM outlives its leader."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                return
            time.sleep(0.1)
    if _alive(pid):
        raise RuntimeError(f"process group {pid} survived SIGKILL")
