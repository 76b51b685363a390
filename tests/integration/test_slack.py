"""post_digest against a local HTTP server that speaks Slack's chat.postMessage."""
import json
import logging

import pytest
from servebench.notify.slack import (
    SECTION_LIMIT,
    build_blocks,
    post_digest,
    split_sections,
    write_digest,
)

pytestmark = pytest.mark.integration
TOKEN = "xoxb-secret-test-token-123"


DIGEST = """# servebench digest: nightly (2025-03-01)

- **run**: `scheduled__2025-03-01T00:00:00+00:00`

## cpu (llama.cpp)

| variant | conc | TTFT p50 |
|---------|-----:|---------:|
| q8_0    |    1 |     12.3 |

## Invalid and failed cells

- **invalid** `cpu / q4 / chat / c=1`: finish_reason <eos> & stop
"""


def test_post_digest_sends_blocks_and_hides_token(slack_server, caplog):
    url, calls, _ = slack_server
    caplog.set_level(logging.DEBUG)
    ts = post_digest(DIGEST, token=TOKEN, channel="#bench", base_url=url)
    assert ts == "1700000000.000001"
    assert len(calls) == 1
    call = calls[0]
    assert call["path"] == "/api/chat.postMessage"
    assert call["auth"] == f"Bearer {TOKEN}"  # the token travels only in the header
    body = call["body"]
    assert body["channel"] == "#bench"
    blocks = body["blocks"] if isinstance(body["blocks"], list) else json.loads(body["blocks"])
    assert blocks[0] == {"type": "header", "text": {"type": "plain_text",
                                                    "text": "servebench digest: nightly (2025-03-01)"}}
    sections = [b["text"]["text"] for b in blocks[1:]]
    assert all(b["type"] == "section" and b["text"]["type"] == "mrkdwn" for b in blocks[1:])
    text = "\n".join(sections)
    assert "*cpu (llama.cpp)*" in text and "```\n| variant" in text
    assert "&lt;eos&gt; &amp; stop" in text and "*invalid*" in text
    assert TOKEN not in json.dumps(body)
    assert TOKEN not in caplog.text


def test_long_digest_splits_into_sections(slack_server):
    url, calls, _ = slack_server
    rows = "\n".join(f"| v{i:04d} | {i:4d} | {i * 1.5:8.1f} |" for i in range(400))
    md = "# big\n\n## t\n\n| variant | conc | TTFT |\n|---|---:|---:|\n" + rows + "\n"
    post_digest(md, token=TOKEN, channel="C1", base_url=url)
    blocks = calls[0]["body"]["blocks"]
    sections = [b["text"]["text"] for b in blocks[1:]]
    assert len(sections) >= 4  # ~12,000 characters of table
    assert all(len(s) <= SECTION_LIMIT for s in sections)
    # the table is cut into complete code blocks, no row lost or broken
    assert sections[0].startswith("*t*\n\n```")
    for s in sections:
        assert s.endswith("```") and s.count("```") == 2
    table_lines = [l for s in sections for l in s.splitlines() if l.startswith("| v0")]
    assert table_lines == rows.splitlines()


def test_no_token_posts_nothing(slack_server, tmp_path):
    url, calls, _ = slack_server
    assert post_digest(DIGEST, token=None, channel="C1", base_url=url) is None
    assert calls == []
    p = write_digest(DIGEST, tmp_path / "out" / "digest.md")
    assert p.read_text() == DIGEST


def test_split_sections_unit():
    text = "\n".join(["x" * 50] * 200)
    parts = split_sections(text, limit=500)
    assert all(len(p) <= 500 for p in parts) and "\n".join(parts) == text
    title, blocks = build_blocks("no heading here")
    assert title == "servebench digest" and blocks[1]["text"]["text"] == "no heading here"


PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 2048


def test_charts_go_into_the_thread_with_files_upload_v2(slack_server):
    url, calls, _ = slack_server
    ts = post_digest(DIGEST + "\n- a regression ([chart](charts-x/change-0.png))\n",
                     token=TOKEN, channel="#bench", base_url=url,
                     files=[("regression: t/q4", "change-0.png", PNG),
                            ("t: latency vs throughput", "target-0.png", PNG)])
    paths = [c["path"] for c in calls]
    assert paths == ["/api/chat.postMessage", "/api/files.getUploadURLExternal",
                     "/api/files.getUploadURLExternal", "/upload/F1", "/upload/F2",
                     "/api/files.completeUploadExternal"]
    assert [c["body"]["bytes"] for c in calls if c["path"].startswith("/upload/")] == [len(PNG)] * 2
    complete = calls[-1]["body"]
    assert complete["channel_id"] == "C1" and complete["thread_ts"] == ts  # in the thread
    text = json.dumps(calls[0]["body"]["blocks"])
    assert "charts-x" not in text  # a file beside the digest means nothing in Slack


def test_a_429_is_retried_after_its_retry_after(slack_server):
    url, calls, script = slack_server
    script.append((429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "1"}))
    ts = post_digest(DIGEST, token=TOKEN, channel="#bench", base_url=url)
    assert ts is not None
    assert [c["path"] for c in calls] == ["/api/chat.postMessage"] * 2
    assert calls[1]["at"] - calls[0]["at"] >= 1.0


@pytest.mark.parametrize("answer", [
    (200, {"ok": False, "error": "invalid_auth"}, {}),
    (200, {"ok": False, "error": "channel_not_found"}, {}),
    (500, {"ok": False, "error": "internal_error"}, {}),
])
def test_slack_failing_keeps_the_digest_file_and_the_run(slack_server, tmp_path, monkeypatch,
                                                         caplog, answer):
    import datetime as dt
    from pathlib import Path

    from servebench.pipeline import send_digest
    from servebench.results.schema import rows_to_table
    from servebench.results.store import ResultStore

    url, calls, script = slack_server
    script.append(answer)
    day = dt.date(2026, 11, 30)
    store = ResultStore(str(tmp_path / "data"))
    store.publish("r1", day, {
        "runs": rows_to_table("runs", [dict(run_id="r1", run_date=day, sweep_name="s",
                                            dag_id="nightly_benchmark")]),
        "cells": rows_to_table("cells", [dict(run_id="r1", run_date=day, cell_id="t/v/w/c1",
                                              target="t", stack="llama_cpp", variant="v",
                                              workload="w", load_point="c1", status="ok")])})
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SERVEBENCH_SLACK_BASE_URL", url)
    where = send_digest({"run_id": "r1", "run_date": day.isoformat()})
    reason = answer[1]["error"]
    assert f"failed: {reason}" in where
    assert Path(where.split(" (Slack")[0]).read_text().startswith("# servebench digest")
    assert "posting the digest to Slack" in caplog.text and reason in caplog.text
    assert TOKEN not in caplog.text and TOKEN not in where


def test_a_night_that_breaks_is_heard_with_its_task_and_error(slack_server, tmp_path,
                                                             monkeypatch):
    """The nightly DAG fails at its first task (a sweep that is not there): the failure is
    posted through the digest's notifier and kept in the store, with the task, the error and
    the run's link."""
    from airflow.dag_processing.dagbag import DagBag
    from servebench.settings import PROJECT_ROOT

    url, calls, _ = slack_server
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SERVEBENCH_SLACK_BASE_URL", url)
    monkeypatch.setenv("SERVEBENCH_AIRFLOW_URL", "http://airflow.example:8080")
    dag = DagBag(dag_folder=str(PROJECT_ROOT / "dags")).dags["nightly_benchmark"]
    run = dag.test(run_conf={"sweep": str(tmp_path / "no-such-sweep.yaml")})
    assert run.state == "failed"
    posts = [json.dumps(c["body"]) for c in calls if c["path"].endswith("chat.postMessage")]
    [heard] = posts  # once per run: the publish that had nothing to publish is not posted
    assert "nightly_benchmark failed" in heard and "Task `plan`" in heard, heard
    assert "no-such-sweep.yaml" in heard and TOKEN not in heard
    assert "http://airflow.example:8080/dags/nightly_benchmark/runs/" in heard
    kept = {p.name: p.read_text() for p in (tmp_path / "data" / "failures").rglob("*.md")}
    # each task that failed is kept: the cause, and the two with nothing to work on
    assert set(kept) == {"plan.md", "publish.md", "digest.md"}
    assert "no-such-sweep.yaml" in kept["plan.md"]
    assert "nothing was planned" in kept["publish.md"]
    assert "no digest: the detect task did not run to the end" in kept["digest.md"]


@pytest.mark.parametrize("where", ["local", "s3"])
def test_hosts_failing_together_are_posted_once_and_each_kept(where, s3_endpoint,
                                                              slack_server, tmp_path,
                                                              monkeypatch):
    """A mapped bench task's hosts failing at the same moment: their failure callbacks race
    (threads released together, each with its own store client) against a local folder and
    against S3 (moto on loopback). Every host's failure is kept under its map index, and the
    run is posted once -- in each of several rounds, since a race can fall either way."""
    import threading
    from types import SimpleNamespace

    from servebench.notify.failure import POSTED, announce_failure
    from servebench.results.store import ResultStore
    from servebench.settings import Settings

    url, calls, _ = slack_server
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SERVEBENCH_SLACK_BASE_URL", url)
    uri = "s3://bench/night" if where == "s3" else str(tmp_path / "data")
    settings = Settings(results_uri=uri, s3_endpoint_url=s3_endpoint,
                        airflow_url="http://airflow.example:8080")
    hosts = 4
    for round_ in range(3):
        run_id = f"scheduled__race-{round_}"
        start, errors = threading.Barrier(hosts), []

        def fail(host, run_id=run_id, start=start, errors=errors):
            ti = SimpleNamespace(dag_id="nightly_benchmark", task_id="bench", run_id=run_id,
                                 try_number=1, map_index=host)
            start.wait()
            try:
                announce_failure({"ti": ti, "run_id": run_id,
                                  "exception": RuntimeError(f"host {host} lost")}, settings)
            except Exception as exc:  # noqa: BLE001 - surfaced by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=fail, args=(h,)) for h in range(hosts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        posts = [c["body"] for c in calls if c["path"].endswith("chat.postMessage")
                 and run_id in json.dumps(c["body"])]
        assert len(posts) == 1, f"round {round_}: {len(posts)} posts"
        store = ResultStore(uri, endpoint_override=s3_endpoint)
        folder = f"failures/nightly_benchmark--{run_id}"
        kept = sorted(p.rsplit("/", 1)[1] for p in store.find(folder))
        assert kept == sorted([POSTED, *(f"bench[{h}].md" for h in range(hosts))])
        claimed = json.loads(store.get_bytes(f"{folder}/{POSTED}"))["task"]
        assert f"Task `{claimed}`" in json.dumps(posts[0])  # the claimant's failure was posted
        for h in range(hosts):
            assert f"host {h} lost" in store.get_bytes(f"{folder}/bench[{h}].md").decode()


def test_a_night_late_past_its_deadline_is_heard_once(slack_server, tmp_path, monkeypatch):
    """The hourly nightly_deadline DAG on a store with no night in it: the latest night past
    its deadline is posted, with what Airflow says of the nightly's live runs (this shared
    test database may hold some), and the next hour is quiet."""
    from airflow.dag_processing.dagbag import DagBag
    from servebench.settings import PROJECT_ROOT

    url, calls, _ = slack_server
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SERVEBENCH_SLACK_BASE_URL", url)
    monkeypatch.setenv("SERVEBENCH_AIRFLOW_URL", "http://airflow.example:8080")
    dag = DagBag(dag_folder=str(PROJECT_ROOT / "dags")).dags["nightly_deadline"]
    assert dag.test().state == "success"
    posts = [json.dumps(c["body"]) for c in calls if c["path"].endswith("chat.postMessage")]
    [heard] = posts
    assert "is late" in heard and "queued or running" in heard, heard
    assert "http://airflow.example:8080/dags/nightly_benchmark" in heard and TOKEN not in heard
    assert dag.test().state == "success"  # an hour later: said already
    assert len([c for c in calls if c["path"].endswith("chat.postMessage")]) == 1
    assert len(list((tmp_path / "data" / "failures").rglob("deadline.md"))) == 1
