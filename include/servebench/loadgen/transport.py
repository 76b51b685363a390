"""The load generator's transport seam: how one request goes out and comes back as one
:class:`~servebench.records.RequestRecord`, over a pool opened before the measured
window. Two implementations: the fast HTTP/1.1 client (:mod:`.fastclient`, plain ``http://``,
what benchmarks next to the server use) and httpx (:mod:`.client`: TLS, proxies, HTTP/2).
Both build and parse their records with :mod:`.stream`; which one a load uses is decided by
:func:`resolve_client`, here and nowhere else, and a choice (``client="auto"|"fast"|"httpx"``)
becomes a transport in :func:`make_transport` only. :class:`Transport` is the interface: a
caller may build any object that has it and pass it to ``run_load(..., transport=...)``
(a test's fake, a client configured otherwise), in one process; client processes of a
multi-process load each build theirs from the choice (:mod:`.multiproc`).
"""

from __future__ import annotations

from typing import Any, Protocol

from servebench.records import Clock, RequestRecord

CLIENTS = ("fast", "httpx", "auto")


class Transport(Protocol):
    """``async with transport: await transport.open(n); rec = await transport.send(...)``.

    ``name`` is what the load's result reports as its client (``"fast"``, ``"httpx"``);
    ``clock`` is the clock every time in its records comes from -- the run schedules its
    requests and measures its window on the same one."""

    name: str
    clock: Clock

    async def __aenter__(self) -> Transport: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def open(self, n: int) -> int:
        """Open up to ``n`` keep-alive connections now; how many are ready."""

    async def send(self, path: str, body: dict[str, Any], *, request_id: str, cell_id: str,
                   scheduled_at: float, headers: dict[str, str] | None = None,
                   deadline_s: float | None = None,
                   prompt_tokens_requested: int | None = None) -> RequestRecord:
        """One streaming request; failures are the record's ``error``, never raised."""


def resolve_client(client: str, base_url: str) -> str:
    """The transport rule, the one place it lives: ``auto`` is the fast client for plain
    ``http://`` and httpx (TLS, proxies) for anything else."""
    if client not in CLIENTS:
        raise ValueError(f"client must be 'fast', 'httpx' or 'auto', got {client!r}")
    if client == "auto":
        return "fast" if base_url.startswith("http://") else "httpx"
    return client


class HttpxTransport:
    """The httpx transport (:func:`servebench.loadgen.client.send_streaming` over a pool)."""

    name = "httpx"

    def __init__(self, base_url: str, *, clock: Clock, headers: dict[str, str] | None,
                 timeout_s: float, trust_env: bool, pool: int) -> None:
        import httpx

        self.clock = clock
        limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool,
                              keepalive_expiry=60.0)
        self.client = httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits,
                                        timeout=httpx.Timeout(timeout_s), trust_env=trust_env)

    async def __aenter__(self) -> HttpxTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def open(self, n: int) -> int:  # httpx connects lazily; warm-up requests warm it
        return 0

    async def send(self, path: str, body: dict[str, Any], **kw: Any) -> RequestRecord:
        from servebench.loadgen.client import send_streaming

        return await send_streaming(self.client, path, body, clock=self.clock, **kw)


def make_transport(client: str, base_url: str, *, clock: Clock,
                   headers: dict[str, str] | None, timeout_s: float, trust_env: bool,
                   pool: int, collect_text: bool) -> Transport:
    """The transport :func:`resolve_client` picks for ``client`` and ``base_url``: the one
    place a choice becomes a transport (a load's process, or each of its client processes)."""
    if resolve_client(client, base_url) == "httpx":
        return HttpxTransport(base_url, clock=clock, headers=headers, timeout_s=timeout_s,
                              trust_env=trust_env, pool=pool)
    from servebench.loadgen.fastclient import FastClient

    return FastClient(base_url, clock=clock, headers=headers, timeout_s=timeout_s,
                      collect_text=collect_text)
