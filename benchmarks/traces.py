"""What does replaying a slice of a huge trace cost? (a script, not a test)

    .venv/bin/python benchmarks/traces.py                     # 20M rows in a temp dir, removed
    .venv/bin/python benchmarks/traces.py --dir /tmp/sb-trace # kept, and reused when present
    .venv/bin/python benchmarks/traces.py --max-duration-s 600 --max-requests 0

Writes ``--rows`` (20,000,000) rows in Azure's LLM inference trace format (the 2024 release's
CSV: ``TIMESTAMP`` as ``2024-05-10 00:00:00.009930+00:00``, ``ContextTokens``,
``GeneratedTokens``; a week of Poisson arrivals, log-normal lengths), built in chunks with
numpy and pyarrow. Then, each in a fresh process so that every peak is its own:

  baseline      the imports and the tokenizer, nothing read: what every process holds anyway
  plan          what the plan does with a trace workload (``max_sequence_tokens``)
  replay setup  what a unit does: for each of ``--variants`` (2) variants, the warm-up's
                prompts (``--warmup`` 2) and the measured cell's (``build_prompts``); the
                trace's own part (the first ``trace_requests``) is timed apart

each printing its wall time, the process's peak RSS (``VmHWM``) and Arrow's peak
allocation, and how many times the trace file was opened for its rows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from servebench.config import TraceWorkload
from servebench.settings import PROJECT_ROOT

TOKENIZER = PROJECT_ROOT / "include" / "models" / "adder-3m"
NAME = "azure-2024.csv"
WEEK_S = 7 * 24 * 3600
START_US = 1_715_299_200_000_000  # 2024-05-10 00:00:00 UTC


def write_trace(path: Path, rows: int, *, chunk: int = 1_000_000, seed: int = 0) -> None:
    """``rows`` rows of Azure's 2024 format, in arrival order, ``chunk`` at a time."""
    rng = np.random.default_rng(seed)
    mean_gap_us = WEEK_S * 1e6 / rows
    now = START_US
    options = pacsv.WriteOptions(include_header=False, quoting_style="none")
    schema = pa.schema([("TIMESTAMP", pa.string()), ("ContextTokens", pa.int64()),
                        ("GeneratedTokens", pa.int64())])
    with path.open("wb") as sink:
        sink.write(b"TIMESTAMP,ContextTokens,GeneratedTokens\n")
        with pacsv.CSVWriter(sink, schema, write_options=options) as writer:
            for start in range(0, rows, chunk):
                n = min(chunk, rows - start)
                stamps = now + np.cumsum(rng.exponential(mean_gap_us, n)).astype(np.int64)
                now = int(stamps[-1])
                text = pc.binary_join_element_wise(
                    pa.array(stamps, pa.timestamp("us")).cast(pa.string()), "+00:00", "")
                context = np.clip(rng.lognormal(7.0, 1.0, n), 1, 30_000).astype(np.int64)
                generated = np.clip(rng.lognormal(4.5, 1.0, n), 1, 4_000).astype(np.int64)
                writer.write_batch(pa.record_batch([text, pa.array(context),
                                                    pa.array(generated)], schema=schema))


def workload(args: argparse.Namespace) -> TraceWorkload:
    return TraceWorkload(kind="trace", name="azure", path=NAME,
                         max_requests=args.max_requests or None,
                         max_duration_s=args.max_duration_s,
                         max_input_tokens=args.max_input_tokens)


def peak_rss_mb() -> float:
    """This process's peak resident memory: Linux's ``VmHWM``. Not ``ru_maxrss``, which
    ``exec`` carries over from the parent as it was at the fork (here: the trace's writer)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def measure(args: argparse.Namespace) -> dict:
    """One measurement, in this process (``--measure``)."""
    from servebench import traces
    from servebench.tokenizer import FileTokenizer
    from servebench.workloads import build_prompts, max_sequence_tokens, trace_requests

    reads = []
    rows = traces._rows

    def counted(*a, **k):
        reads.append(a[0])
        return rows(*a, **k)

    traces._rows = counted
    tokenizer = FileTokenizer(TOKENIZER)
    root, w = Path(args.dir), workload(args)
    out: dict = {}
    start = time.perf_counter()
    if args.measure == "plan":
        out["longest"] = max_sequence_tokens(w, root)
    elif args.measure == "replay":
        out["requests"] = len(trace_requests(w, root))
        out["trace_s"] = time.perf_counter() - start
        for variant in range(args.variants):
            build_prompts(w, tokenizer, 1, root, key=f"v{variant}:warmup", count=args.warmup)
            build_prompts(w, tokenizer, 1, root, key=f"v{variant}")
    out["seconds"] = time.perf_counter() - start
    out["peak_rss_mb"] = peak_rss_mb()
    out["arrow_peak_mb"] = pa.default_memory_pool().max_memory() / 2**20
    out["reads"] = len(reads)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--max-requests", type=int, default=2000, help="0: none")
    parser.add_argument("--max-duration-s", type=float, default=None)
    parser.add_argument("--max-input-tokens", type=int, default=None)
    parser.add_argument("--variants", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--dir", default=None, help="keep the trace here (reused if present)")
    parser.add_argument("--measure", choices=("baseline", "plan", "replay"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args)))
        return
    keep = args.dir is not None
    directory = Path(args.dir) if keep else Path(tempfile.mkdtemp(prefix="sb-trace-"))
    try:
        path = directory / NAME
        if not path.exists():
            directory.mkdir(parents=True, exist_ok=True)
            start = time.perf_counter()
            write_trace(path, args.rows)
            print(f"wrote {args.rows:,} rows, {path.stat().st_size / 2**20:,.0f} MiB, "
                  f"in {time.perf_counter() - start:.1f} s: {path}")
        print(f"limits: max_requests={args.max_requests or None} "
              f"max_duration_s={args.max_duration_s} max_input_tokens={args.max_input_tokens}")
        same = [f"--max-requests={args.max_requests}", f"--variants={args.variants}",
                f"--warmup={args.warmup}", f"--dir={directory}"]
        same += [f"--max-duration-s={args.max_duration_s}"] if args.max_duration_s else []
        same += [f"--max-input-tokens={args.max_input_tokens}"] if args.max_input_tokens else []
        for kind in ("baseline", "plan", "replay"):
            done = subprocess.run([sys.executable, __file__, *same, f"--measure={kind}"],
                                  check=True, capture_output=True, text=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            extra = (f", of which the trace {result['trace_s']:.2f} s "
                     f"({result['requests']} requests)" if kind == "replay" else "")
            print(f"{kind:>9}: {result['seconds']:6.2f} s{extra}; peak RSS "
                  f"{result['peak_rss_mb']:.0f} MB, Arrow peak {result['arrow_peak_mb']:.1f} MB, "
                  f"file read {result['reads']}x")
    finally:
        if not keep:
            shutil.rmtree(directory)


if __name__ == "__main__":
    main()
