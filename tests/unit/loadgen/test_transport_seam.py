"""The transport is a seam: a caller (here, a test) passes a transport object in, and the load
runs over it -- no network, no module patched. A transport object stays in its process: a
multi-process load refuses it (each client process builds its own from ``client=``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from servebench.loadgen.engine import LoadSpec, run_load, run_load_sync
from servebench.loadgen.fastclient import FastClient
from servebench.loadgen.multiproc import run_load_multiprocess
from servebench.records import Clock, RequestRecord
from servebench.loadgen.stream import finish_record, new_record
from servebench.loadgen.transport import Transport
from servebench.testing import FakeServerConfig, serve_in_thread

CHAT = "/v1/chat/completions"
URL = "http://127.0.0.1:9"  # nothing listens there: the fake transport never connects


class FakeTransport:
    """Answers every request at once with ``tokens`` one-token chunks, on its own clock."""

    name = "fake"

    def __init__(self, tokens: int = 3) -> None:
        self.clock = Clock()
        self.tokens = tokens
        self.calls: list[str] = []
        self.sent: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    async def __aenter__(self) -> FakeTransport:
        self.calls.append("enter")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.calls.append("exit")

    async def open(self, n: int) -> int:
        self.calls.append(f"open {n}")
        return n

    async def send(self, path: str, body: dict[str, Any], *, request_id: str, cell_id: str,
                   scheduled_at: float, headers: dict[str, str] | None = None,
                   deadline_s: float | None = None,
                   prompt_tokens_requested: int | None = None) -> RequestRecord:
        self.sent.append((path, body, {"request_id": request_id, "headers": headers}))
        body, rec, state = new_record(body, request_id=request_id, cell_id=cell_id,
                                      scheduled_at=scheduled_at,
                                      prompt_tokens_requested=prompt_tokens_requested)
        rec.sent_at = self.clock.now()
        rec.http_status = 200
        await asyncio.sleep(0)
        for i in range(self.tokens):
            t = self.clock.now()
            state.on_event(b'{"model":"fake","choices":[{"delta":{"content":"t%d"},'
                           b'"finish_reason":null}]}' % i, t)
        state.on_event(b'{"choices":[{"delta":{},"finish_reason":"stop"}]}', self.clock.now())
        state.on_event(b"[DONE]", self.clock.now())
        rec.done_at = self.clock.now()
        return finish_record(state)


def test_the_fake_has_the_transport_interface():
    fake: Transport = FakeTransport()  # what a type checker checks; here, the names
    assert all(callable(getattr(fake, m)) for m in ("__aenter__", "__aexit__", "open", "send"))
    assert fake.name == "fake" and isinstance(fake.clock, Clock)


def test_a_load_runs_over_a_transport_passed_in():
    fake = FakeTransport(tokens=3)
    bodies = [{"model": "m", "max_tokens": 3, "i": i} for i in range(7)]
    res = run_load_sync(URL, CHAT, bodies, LoadSpec.closed(2), warmup=1, cell_id="seam",
                        transport=fake)
    # the run entered it, opened its pool before the warm-up and again after, and closed it
    assert fake.calls == ["enter", "open 2", "open 2", "exit"]
    assert [s[1]["i"] for s in fake.sent] == list(range(7))
    assert all(s[0] == CHAT for s in fake.sent)
    assert fake.sent[0][2]["headers"] == {"x-request-id": "seam:0"}
    # its name is the result's client; its clock is the run's
    assert res.client == "fake" and res.processes == 1
    assert (res.clock_anchor_wall, res.clock_anchor_perf) == (fake.clock.anchor_wall,
                                                              fake.clock.anchor_perf)
    assert [r.request_id for r in res.warmup_records] == ["seam:0"]
    assert [r.request_id for r in res.records] == [f"seam:{i}" for i in range(1, 7)]
    assert all(r.ok and r.output_text == "t0t1t2" and r.chunk_tokens == [1, 1, 1]
               for r in res.records)
    assert res.window_start <= min(r.sent_at for r in res.records)


def test_a_real_transport_built_by_the_caller():
    """The fast client, built by the caller on the run's loop with its own settings."""

    async def load(url: str):
        fast = FastClient(url, clock=Clock(), timeout_s=5, collect_text=False)
        return await run_load(url, CHAT, [{"model": "m", "max_tokens": 4}] * 4,
                              LoadSpec.closed(2), cell_id="own", transport=fast)

    with serve_in_thread(FakeServerConfig(itl_s=0.001)) as srv:
        res = asyncio.run(load(srv.url))
    assert res.client == "fast" and len(res.records) == 4
    assert all(r.ok and sum(r.chunk_tokens) == 4 for r in res.records)


def test_a_transport_and_a_client_choice_together_are_refused():
    with pytest.raises(ValueError, match="client='httpx' and transport="):
        run_load_sync(URL, CHAT, [{"model": "m"}], LoadSpec.closed(1), cell_id="x",
                      client="httpx", transport=FakeTransport())


@pytest.mark.parametrize("processes", [2, "auto"])
def test_a_transport_object_cannot_go_to_client_processes(processes):
    fake = FakeTransport()
    with pytest.raises(ValueError, match="transport= with processes=.*each process builds"):
        run_load_sync(URL, CHAT, [{"model": "m"}] * 4, LoadSpec.closed(2), cell_id="x",
                      processes=processes, transport=fake)
    with pytest.raises(ValueError, match="transport= with processes=2"):
        run_load_multiprocess(URL, CHAT, [{"model": "m"}] * 4, LoadSpec.closed(2), processes=2,
                              cell_id="x", transport=fake)
    assert fake.calls == [] and fake.sent == []  # refused before anything was sent
