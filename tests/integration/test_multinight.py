"""The local proof of the nightly loop: twenty nights of the real DAG (llama-server, the
project's model, dates advanced), a real slowdown injected from night 14 on: the victim
variant's llama-server loses its batch slots (--parallel 4 -> 1) under a concurrency of 4, so
three of every four requests wait for whole ones to finish. Its twin (the same model and knobs,
never touched) and the f16 baseline run beside it every night. Within the six slowed nights
the digest names that change -- TTFT worse and, as truly, TPOT better (a lone request decodes
faster); E2E, throughput and cost follow less surely -- with its one cause and its charts, and
nothing else; no earlier night raised anything. (A change of +35-50% is raised on its third
night at the earliest, the evidence test's minimum, later when the host drifted the nights
before: six nights leave it that margin.) The host itself may move on a shared VM (the
untouched variants slower from one night, nothing recorded changed, and a tail of such a
variant moving with its cell by more): that is said apart, as a host change, and never as a
variant's regression."""

import datetime as dt
import re
from pathlib import Path

import pytest
import yaml
from servebench.results.store import ResultStore
from servebench.settings import PROJECT_ROOT
from servebench.trends.confirm import CONFIRMED_HOST
from servebench.trends.nightly import HOST_CELL, HOST_CHANGED

pytestmark = [pytest.mark.integration, pytest.mark.multinight]

NIGHTS, SLOWED_FROM = 20, 14
DAY0 = dt.datetime(2026, 11, 1, 2, tzinfo=dt.UTC)


def _sweep(build, path: Path, slowed: bool) -> str:
    common = {"max_num_seqs": 4, "max_model_len": 512, "threads": 1}
    q8 = {"model": "build/models/adder-3m-q8_0.gguf", "quant": "q8_0", **common}
    victim = {"name": "victim", **q8, "max_num_seqs": 1 if slowed else 4}
    # 256 requests a cell: a p95 over ~13 requests, a p99 over ~3, where 64 left ~3 and ~1 (a
    # host's stalled second made a tail, or the client's send lag, on its own)
    data = build([{"name": "adder", "stack": "llama_cpp", "baseline": "steady",
                   "golden_sets": ["addition"], "variants": [
                       {"name": "steady", "model": "build/models/adder-3m-f16.gguf",
                        "quant": "f16", **common},
                       {"name": "twin", **q8}, victim]}],
                 input_tokens=64, output_tokens=16, num_requests=256, concurrency=4,
                 name="multinight", workload="fixed-64x16")
    # this VM's own speed wanders by ~10% for minutes, and simulated nights seconds apart turn
    # such a minute into a multi-night step: the sweep sets the alert floor a team on such a
    # host would (the slowdown's TTFT moves +50%)
    data["trends"] = {"min_change": 0.2}
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def nights(tmp_path_factory, local_sweep):
    from airflow.dag_processing.dagbag import DagBag

    tmp = tmp_path_factory.mktemp("multinight")
    plain = _sweep(local_sweep, tmp / "plain.yaml", False)
    slowed = _sweep(local_sweep, tmp / "slowed.yaml", True)
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVEBENCH_RESULTS_URI", str(tmp / "data"))
    mp.setenv("SERVEBENCH_WORK_DIR", str(tmp / "runs"))
    mp.delenv("SLACK_BOT_TOKEN", raising=False)
    try:
        dag = DagBag(dag_folder=str(PROJECT_ROOT / "dags")).dags["nightly_benchmark"]
        for night in range(NIGHTS):
            sweep = slowed if night >= SLOWED_FROM else plain
            run = dag.test(logical_date=DAY0 + dt.timedelta(days=night),
                           run_conf={"sweep": sweep, "nightly": True})  # a night each
            assert run.state == "success", night
    finally:
        mp.undo()
    return ResultStore(str(tmp / "data"))


def test_the_slowdown_is_found_with_its_cause_and_nothing_else(nights):
    store = nights
    alerts = store.read_table("changes").to_pandas()
    # a cell whose client the host stalled (send lag p99 ~70 ms: a few nights in a hundred on
    # this shared VM) is refused and listed as newly failing with that reason: a measurement
    # that failed, said as one, never a change of the stack
    failing = alerts[alerts["kind"] == "newly_failing"]
    assert failing["reason"].str.startswith("invalid: client_saturated: ").all(), failing[
        ["variant", "run_date", "reason"]]
    moved = alerts[alerts["kind"].isin(["regression", "improvement"])]
    assert set(moved["variant"]) == {"victim"}, moved[["variant", "metric", "kind", "run_date"]]
    slowed_day = (DAY0 + dt.timedelta(days=SLOWED_FROM)).date()
    assert set(moved["change_date"]) == {slowed_day}
    assert moved["cause"].nunique() == 1  # one change, said once
    assert moved["cause"].iloc[0].startswith("launch args --ctx-size 2048 -> 512; "
                                             "--parallel 4 -> 1")
    worse = set(moved[moved["kind"] == "regression"]["metric"])
    # the headline is TTFT (which percentile proves it first depends on the nights' noise);
    # E2E, cost, throughput follow, less surely
    assert worse & {"ttft_ms_p50", "ttft_ms_p95"}, worse
    # and the KV cache the smaller context holds (2048 -> 512 tokens: the change's own effect,
    # a series of the unit's, the same cause)
    assert worse <= {"ttft_ms_p50", "ttft_ms_p95", "e2e_ms_p95", "output_throughput", "goodput",
                     "cost_per_1m_output_tokens", "kv_cache_tokens"}
    assert set(moved[moved["kind"] == "improvement"]["metric"]) <= {"tpot_ms_p50",
                                                                    "tpot_ms_p95",
                                                                    "itl_ms_p95",
                                                                    "peak_rss_bytes"}
    before = alerts[alerts["run_date"] < slowed_day]
    assert before[before["kind"].isin(["regression", "improvement"])].empty
    # the host itself may move on a shared VM: said apart, never as a variant's regression,
    # and the slowdown is never taken for it
    host = alerts[alerts["kind"] == "host_change"]
    cell_moved = HOST_CELL.split("{")[0]  # a tail moving with its cell's host move
    # or the same morning's relaunches found both sides moved with the host
    remeasured = CONFIRMED_HOST.split("{")[0]
    assert host["cause"].map(lambda c: c == HOST_CHANGED or c.startswith(
        (cell_moved, remeasured))).all(), host[["variant", "metric", "cause"]]
    assert slowed_day not in set(host[host["variant"] == "victim"]["change_date"])


def test_the_digest_of_that_morning_names_it_with_its_charts(nights):
    store = nights
    alerts = store.read_table("changes").to_pandas()
    day = alerts[alerts["kind"] == "regression"]["run_date"].min()
    [digest] = [Path(f) for f in store.find(f"digests/date={day}") if f.endswith(".md")]
    text = digest.read_text()
    section = text.split("## Regressions", 1)[1].split("\n## ", 1)[0]  # that section only
    assert "adder / victim" in section
    # no other variant's series (a confirmation's words name its reference: "against steady")
    assert "`adder / steady" not in section and "`adder / twin" not in section
    assert "--parallel 4 -> 1" in section
    charts = re.findall(r"\(\[chart\]\(([^)]+)\)\)", section)
    assert charts and all((digest.parent / c).read_bytes()[:4] == b"\x89PNG" for c in charts)


def test_manual_runs_marked_nightly_are_the_nights(nights):
    assert nights.read_table("runs").column("nightly").to_pylist() == [True] * NIGHTS
