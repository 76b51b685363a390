"""The static provisioner (``provision: {kind: static}``): servers that already run.

A shared GPU box, a vLLM or llama.cpp server someone else runs, a hosted OpenAI-compatible
API: each variant's ``endpoint`` says where (an Airflow connection -- host = base URL,
password = key -- or ``base_url`` plus the key from the environment variable
``api_key_env``). Nothing is launched, stopped or torn down; each server is health-checked
(GET, 200) before its cells run, and an endpoint that does not answer becomes failed cells
with that reason. Keys are resolved when used, never stored in the spec, rows or logs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from servebench.config import HOSTED_STACKS, StaticProvision
from servebench.endpoint import Endpoint, connection, locate
from servebench.memory import MemorySample
from servebench.provision.interface import (
    LaunchError,
    Provisioner,
    poll_health,
    register_provisioner,
    served_engine_version,
)
from servebench.settings import Settings

if TYPE_CHECKING:
    from servebench.config import TargetSpec, VariantSpec
    from servebench.stacks.adapter import StackAdapter

log = logging.getLogger(__name__)
UNKNOWN_VERSION = "unknown (static endpoint)"
UNKNOWN_HARDWARE = "static endpoint (hardware not recorded)"


@register_provisioner
class StaticProvisioner(Provisioner):
    kind = "static"

    def __init__(self, settings: Settings):
        self.settings = settings

    @classmethod
    def acquire(cls, run_id, targets, settings, *, dag_id: str = "") -> dict:
        return {}  # nothing to set up: the servers run already

    @classmethod
    def attach(cls, run_id, state, settings) -> StaticProvisioner:
        return cls(settings)

    @classmethod
    def check(cls, target: TargetSpec, variant: VariantSpec, adapter: StackAdapter,
              settings: Settings) -> list[str]:
        if target.stack in HOSTED_STACKS:  # its own checks are all about its endpoint
            return adapter.check(variant, settings)
        problems = []
        ep = variant.endpoint
        if ep is not None and ep.conn_id:
            from airflow.sdk.exceptions import AirflowNotFoundException

            try:
                connection(ep.conn_id)
            except AirflowNotFoundException:
                problems.append(f"field endpoint.conn_id: no Airflow connection "
                                f"{ep.conn_id!r}")
        return problems

    def launch(self, name: str, target: TargetSpec, variant: VariantSpec,
               adapter: StackAdapter) -> Endpoint:
        spec = target.provision if isinstance(target.provision, StaticProvision) else \
            StaticProvision(kind="static")
        hosted = adapter.static_endpoint(variant, self.settings)
        if hosted is not None:
            endpoint = replace(hosted, name=name)
            health = spec.health_path or "/models"  # what OpenAI-compatible APIs answer
        else:
            base_url, headers = locate(variant.endpoint, default_key_env=False)
            # the stack's own metrics path unless the spec names one (or null: none)
            metrics = spec.metrics_path if "metrics_path" in spec.model_fields_set else \
                adapter.metrics_path
            endpoint = Endpoint(base_url, variant.model, adapter.chat_path, metrics,
                                headers=headers, name=name)
            health = spec.health_path or "/health"
        self._wait_healthy(endpoint, health, spec.health_timeout_s)
        return endpoint

    @staticmethod
    def _wait_healthy(endpoint: Endpoint, path: str, timeout_s: float) -> None:
        url = endpoint.base_url + path
        last = poll_health(url, time.monotonic() + timeout_s, headers=endpoint.headers)
        if last is not None:
            raise LaunchError(f"static endpoint {url} not healthy after {timeout_s:g}s "
                              f"(last: {last})")
        log.info("%s: static endpoint %s healthy", endpoint.name, url)

    def stop(self, endpoint: Endpoint) -> None:
        log.info("%s: done with static endpoint %s (left running)", endpoint.name,
                 endpoint.base_url)

    def memory(self, endpoint: Endpoint) -> MemorySample:
        """Someone else's server: what the engine reports of itself (its ``/metrics``,
        ``/props``) is all there is."""
        return MemorySample.unmeasured("not ours to measure: a static endpoint's processes "
                                       "run elsewhere")

    def hardware(self, target: TargetSpec) -> str:
        spec = target.provision
        return (spec.hardware if isinstance(spec, StaticProvision) else None) \
            or UNKNOWN_HARDWARE

    def engine_version(self, adapter: StackAdapter, endpoint: Endpoint | None = None) -> str:
        """What the server says it runs; unknown before it is reached, or when it does not
        say."""
        return (served_engine_version(adapter, endpoint) if endpoint else None) \
            or UNKNOWN_VERSION

    def teardown(self, *, spare_held: bool = False) -> list[str]:  # it holds no machine
        return []  # nothing was started, so nothing is torn down
