"""Benchmark the load generator against the fake OpenAI server (prints numbers; not a test).

For each concurrency (default 64 and 256) it prints:

* capacity — server flat out (no TTFT/ITL), 256 tokens per request: streamed tokens/s over the
  measured window, client CPU seconds per 100k tokens, tokens per client CPU-second;
* fidelity — server at 100 ms TTFT, 20 ms between tokens, 64 tokens: the bias of the client's
  TTFT and ITL against the server's recorded truth (client minus server, ms, p50 and p99).
  Server TTFT = first chunk write - request arrival (kernel receive time of its first byte;
  the bias against the server event loop's own receive stamp is printed too); server ITL =
  gaps between its chunk writes.

The server runs in its own process (uvloop for capacity; the stdlib loop for fidelity, where its
kernel receive timestamps need it), sharing the machine's cores with the client.
Run when the machine is otherwise idle and quote ``uptime`` with the numbers:

    .venv/bin/python benchmarks/loadgen.py [--client fast|httpx] [--concurrency 64 256]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from servebench.loadgen.engine import LoadSpec, run_load_sync
from servebench.metrics import ttft_s
from servebench.testing import FakeServerConfig, serve_in_subprocess

CHAT = "/v1/chat/completions"


def body(n: int) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": n,
            "stream_options": {"include_usage": True}}


def cpu_s(pid: int) -> float:
    """User+system CPU seconds of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def capacity(conc: int, client: str, seconds: float, processes: int) -> None:
    cfg = FakeServerConfig(output_tokens=256, uvloop=True)
    with serve_in_subprocess(cfg) as srv:
        n = conc * 2 + int(seconds * 600)  # ~600 req/s is ~150k tok/s of 256-token requests
        s0 = cpu_s(srv.proc.pid)
        res = run_load_sync(srv.url, CHAT, [body(256)] * (n + conc), LoadSpec.closed(conc),
                            warmup=conc, cell_id="cap", client=client, duration_s=seconds,
                            collect_text=True, processes=processes)
        server_cpu = cpu_s(srv.proc.pid) - s0  # includes the warm-up: an upper bound
    toks = sum(sum(r.chunk_tokens) for r in res.records)
    bad = sum(not r.ok for r in res.records)
    tps = toks / res.duration_s
    print(f"capacity  c={conc:<4} {client:5} procs={res.processes}: {tps:10,.0f} streamed tok/s | "
          f"{res.client_cpu_s / toks * 1e5:6.3f} client CPU s/100k tok | "
          f"{toks / res.client_cpu_s:10,.0f} tok per client CPU-s | {len(res.records)} req "
          f"({bad} errors) in {res.duration_s:.1f} s | loop lag p95 {res.loop_lag.p95_ms:.1f} ms | "
          f"server CPU {server_cpu / res.duration_s:.0%} of a core")


def fidelity(conc: int, client: str, rounds: int, processes: int) -> None:
    # stdlib loop: the server's kernel receive timestamps need it (see FakeServerConfig)
    cfg = FakeServerConfig(ttft_s=0.100, itl_s=0.020, output_tokens=64, uvloop=False)
    with serve_in_subprocess(cfg) as srv:
        n = conc * rounds
        res = run_load_sync(srv.url, CHAT, [body(64)] * (n + conc), LoadSpec.closed(conc),
                            warmup=conc, cell_id="fid", client=client, processes=processes)
        truth = {q["request_id"]: q for q in srv.truth()["requests"]}
    ttft_bias, ttft_bias_loop, itl_bias = [], [], []
    for r in res.records:
        q = truth[r.request_id]
        if not r.ok or len(r.chunk_times) != len(q["chunk_times"]):
            continue
        ttft_bias.append(ttft_s(r) - (q["first_chunk_at"] - q["received_at"]))
        ttft_bias_loop.append(ttft_s(r) - (q["first_chunk_at"] - q["received_loop_at"]))
        itl_bias.extend(np.diff(r.chunk_times) - np.diff(q["chunk_times"]))
    tb, tl, ib = (np.array(x) * 1e3 for x in (ttft_bias, ttft_bias_loop, itl_bias))
    p = np.percentile
    print(f"fidelity  c={conc:<4} {client:5} procs={res.processes}: TTFT bias p50 {p(tb, 50):+6.2f} ms "
          f"p99 {p(tb, 99):+6.2f} ms | ITL bias p50 {p(ib, 50):+6.3f} ms p99 {p(ib, 99):+6.3f} ms | "
          f"{len(tb)}/{len(res.records)} req matched | send lag p99 {res.send_lag.p99_ms:.2f} ms, "
          f"loop lag p95 {res.loop_lag.p95_ms:.2f} ms\n"
          f"          (TTFT bias vs the server's event-loop receive stamp instead of the kernel's: "
          f"p50 {p(tl, 50):+6.2f} ms p99 {p(tl, 99):+6.2f} ms)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--client", default="fast", choices=["fast", "httpx"])
    p.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    p.add_argument("--seconds", type=float, default=6.0, help="capacity run length")
    p.add_argument("--rounds", type=int, default=4, help="fidelity: requests per worker")
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--only", choices=["capacity", "fidelity"], default=None)
    a = p.parse_args()
    print(f"load average before: {os.getloadavg()}, {os.cpu_count()} CPUs")
    t = time.time()
    for conc in a.concurrency:
        if a.only != "fidelity":
            capacity(conc, a.client, a.seconds, a.processes)
        if a.only != "capacity":
            fidelity(conc, a.client, a.rounds, a.processes)
    print(f"load average after: {os.getloadavg()} ({time.time() - t:.0f} s)")


if __name__ == "__main__":
    main()
