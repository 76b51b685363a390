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
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from servebench.config import HOSTED_STACKS, EndpointSpec, StaticProvision
from servebench.provision.interface import (
    Endpoint,
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


def connection(conn_id: str) -> tuple[str | None, str | None]:
    """(base URL, API key) from an Airflow connection."""
    from airflow.sdk import Connection  # imported late: plain CLI runs need no Airflow

    conn = Connection.get(conn_id)
    host = conn.host or ""
    if host and "://" not in host:
        host = f"https://{host}"
    return host or None, conn.password


def locate(ep: EndpointSpec, *, default_key_env: bool = True) -> tuple[str, dict[str, str]]:
    """(base URL without a trailing slash, request headers with the key if there is one).
    Without ``default_key_env`` the key's environment variable is read only when the spec
    names one: a self-hosted server must not be sent OPENAI_API_KEY by default."""
    base_url, key = None, None
    if ep.conn_id:
        base_url, key = connection(ep.conn_id)
    base_url = base_url or ep.base_url
    key_env = ep.api_key_env if default_key_env or "api_key_env" in ep.model_fields_set \
        else None
    if key is None and key_env:
        key = os.environ.get(key_env)
    if not base_url:
        raise ValueError(f"no base URL (connection {ep.conn_id!r} has no host)")
    return base_url.rstrip("/"), ({"Authorization": f"Bearer {key}"} if key else {})


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

    def hardware(self, target: TargetSpec) -> str:
        spec = target.provision
        return (spec.hardware if isinstance(spec, StaticProvision) else None) \
            or UNKNOWN_HARDWARE

    def engine_version(self, adapter: StackAdapter, endpoint: Endpoint | None = None) -> str:
        """What the server says it runs; unknown before it is reached, or when it does not
        say."""
        return (served_engine_version(adapter, endpoint) if endpoint else None) \
            or UNKNOWN_VERSION

    def release(self) -> list[str]:
        return []  # nothing was started, so nothing is torn down
