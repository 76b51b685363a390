"""A server that closes keep-alive connections after each streamed response (as llama.cpp's
does) must not turn into client-side errors; a server that never answers still must."""

import asyncio
import json
import threading

import pytest
from servebench.loadgen.engine import LoadSpec, run_load_sync

SSE = b"".join(
    b"data: " + json.dumps(e).encode() + b"\n\n"
    for e in [
        {"model": "m", "choices": [{"index": 0, "delta": {"content": "7"}, "finish_reason": None}]},
        {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
        {"model": "m", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
    ]
) + b"data: [DONE]\n\n"


def _serve(answer: bool):
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box = {}

    async def handle(reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            if answer:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(SSE), SSE))
                await writer.drain()
                # close a moment later, when the client has already reused the connection
                await asyncio.sleep(0.02)
        finally:
            writer.close()  # keep-alive was implied, but the connection is gone

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        box["port"] = server.sockets[0].getsockname()[1]
        box["server"] = server
        ready.set()
        try:
            await server.serve_forever()
        except asyncio.CancelledError:
            pass

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    thread.start()
    ready.wait(5)
    return loop, box


def _stop(loop, box):
    async def shutdown():
        box["server"].close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    asyncio.run_coroutine_threadsafe(shutdown(), loop).result(5)


@pytest.mark.parametrize("client", ["fast", "httpx"])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_closed_connections_are_retried_once(client, concurrency):
    loop, box = _serve(answer=True)
    try:
        body = {"model": "m", "messages": [], "max_tokens": 1}
        res = run_load_sync(f"http://127.0.0.1:{box['port']}", "/v1/chat/completions",
                            [body] * 40, LoadSpec.closed(concurrency), cell_id="c",
                            client=client)
    finally:
        _stop(loop, box)
    assert [r.error for r in res.records if not r.ok] == []
    assert all(r.output_text == "7" for r in res.records)


def test_a_server_that_never_answers_is_still_an_error():
    loop, box = _serve(answer=False)
    try:
        res = run_load_sync(f"http://127.0.0.1:{box['port']}", "/v1/chat/completions",
                            [{"model": "m", "max_tokens": 1}] * 3, LoadSpec.closed(1),
                            cell_id="c")
    finally:
        _stop(loop, box)
    assert all(r.error and "RemoteProtocolError" in r.error for r in res.records)
