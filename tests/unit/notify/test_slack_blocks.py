"""The Slack message a night with a regression produces, pinned as a fixture: a change in the
digest's text or layout shows up here as a diff to review (regenerate with
``SERVEBENCH_UPDATE_FIXTURES=1``)."""

import datetime as dt
import json
import os
from pathlib import Path

import pandas as pd
from servebench.notify.digest import render_digest
from servebench.notify.slack import build_blocks

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "slack_digest_blocks.json"
DAY = dt.date(2026, 11, 30)


def _digest() -> str:
    run = dict(run_id="scheduled__2026-11-30T02:00:00+00:00", run_date=DAY, sweep_name="local",
               sweep_file="include/sweeps/local.yaml", suite_git_sha="0123456789abcdef",
               hardware="AMD EPYC x2 cores (no GPU); isa avx2 fma f16c")
    cells = pd.DataFrame([
        dict(cell_id="adder/f16/fixed/c4", target="adder", stack="llama_cpp", variant="f16",
             workload="fixed", load_point="c4", concurrency=4, status="ok", ttft_ms_p50=5.9,
             ttft_ms_p95=8.6, tpot_ms_p50=1.24, tpot_ms_p95=1.39, output_throughput=2699.0,
             n_errors=0, n_requests=24, accuracy=0.97, gate_verdict="baseline"),
        dict(cell_id="adder/q4_k_m/fixed/c4", target="adder", stack="llama_cpp",
             variant="q4_k_m", workload="fixed", load_point="c4", concurrency=4,
             status="invalid", reason="client_saturated: send lag p99 64.9 ms > 50 ms",
             ttft_ms_p50=7.1, ttft_ms_p95=10.9, tpot_ms_p50=1.08, tpot_ms_p95=1.43,
             output_throughput=2869.0, n_errors=0, n_requests=24, accuracy=0.965,
             gate_verdict="pass"),
    ])
    changes = pd.DataFrame([dict(
        series_id="adder/f16/fixed/c4/ttft_ms_p95#0a1b2c3d", target="adder", stack="llama_cpp",
        variant="f16", workload="fixed", load_point="c4", metric="ttft_ms_p95",
        kind="regression", before=7.4, after=8.6, change_pct=16.2, z=6.1, drastic=False,
        change_date=dt.date(2026, 11, 27), nights_since=4,
        cause="engine_version b7100 -> b7200", finding="f1")])
    charts = {"adder/f16/fixed/c4/ttft_ms_p95#0a1b2c3d": "charts-x/change-0.png",
              "target:adder": "charts-x/target-0.png"}
    return render_digest(cells, run, "s3://bench/results", changes, charts)


def test_the_slack_message_is_the_pinned_one():
    title, blocks = build_blocks(_digest())
    got = {"text": title, "blocks": blocks}
    if os.environ.get("SERVEBENCH_UPDATE_FIXTURES"):
        FIXTURE.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n")
    assert got == json.loads(FIXTURE.read_text())
