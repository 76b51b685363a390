"""Where a variant is served and how to reach it: the ``Endpoint`` every stack and provisioner
passes around, and how a spec's ``endpoint`` (a server that already runs, a hosted API)
resolves to a URL and headers. Below both stacks and provisioners, which import it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servebench.config import EndpointSpec


@dataclass(frozen=True)
class Endpoint:
    """Where a variant is served and how to talk to it: a launched server or one that runs."""

    base_url: str
    served_model: str
    chat_path: str
    metrics_path: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may carry a key
    argv: list[str] | None = None  # the launch command, for provenance (None: not launched)
    name: str = ""
    pid: int | None = None  # a local server's process


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
