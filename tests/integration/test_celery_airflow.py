"""Airflow as a team runs it: the CeleryExecutor with the machine's PostgreSQL as metadata
database and its Redis as broker, and the scheduler, dag-processor, api-server and one Celery
worker as processes of their own. The nightly DAG is triggered through the REST API (a small
two-variant sweep as its conf), polled to success, and its Parquet read back. Then the
Benchmarks view is opened the way a person opens it -- the Airflow UI's Browse -> Benchmarks
page in headless Chromium, logged in -- a screenshot kept, and the board's content asserted.

Isolated from anything else on the machine: a database of its own (dropped after), its own
Celery queue, free ports.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from browser import CHROMIUM, dump_dom, screenshot, text_of
from servebench.results.store import ResultStore
from servebench.settings import PROJECT_ROOT

pytestmark = pytest.mark.integration

PG = "postgresql+psycopg2://postgres@127.0.0.1:5432"
REDIS = "redis://127.0.0.1:6379/0"
DAG_ID = "nightly_benchmark"
RUN_TIMEOUT_S = 900


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _admin(sql: str) -> None:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def _sweep(local_sweep, path: Path) -> Path:
    common = {"max_num_seqs": 2, "max_model_len": 512, "threads": 1}
    data = local_sweep([{"name": "adder", "stack": "llama_cpp", "baseline": "f16",
                         "golden_sets": ["addition"], "variants": [
                             {"name": "f16", "model": "build/models/adder-3m-f16.gguf",
                              "quant": "f16", **common},
                             {"name": "q8_0", "model": "build/models/adder-3m-q8_0.gguf",
                              "quant": "q8_0", **common}]}],
                       input_tokens=32, output_tokens=24, num_requests=24, concurrency=2,
                       name="celery", workload="fixed-32x24")
    path.write_text(yaml.safe_dump(data))
    return path


class Deployment:
    """The processes of one Airflow deployment, stopped (process group and all) at the end."""

    def __init__(self, home: Path, env: dict[str, str], port: int) -> None:
        self.home, self.env, self.port = home, env, port
        self.url = f"http://127.0.0.1:{port}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.token = ""

    def start(self, name: str, *args: str) -> None:
        log = (self.home / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "airflow", *args], env=self.env, cwd=PROJECT_ROOT,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def logs(self, lines: int = 40) -> str:
        out = []
        for name in self.procs:
            text = (self.home / f"{name}.log").read_text(errors="replace").splitlines()
            out.append(f"--- {name}.log (last {lines} lines)\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **kwargs)

    def wait_for(self, what: str, ok, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            assert not dead, f"{dead} exited while waiting for {what}\n{self.logs()}"
            with contextlib.suppress(httpx.TransportError):
                if ok():
                    return
            time.sleep(2)
        pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}\n{self.logs()}")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, local_sweep):
    tmp = tmp_path_factory.mktemp("celery")
    home, db, queue = tmp / "airflow", f"servebench_it_{os.getpid()}", f"servebench-{os.getpid()}"
    home.mkdir()
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AIRFLOW__") and k not in ("SLACK_BOT_TOKEN", "AIRFLOW_HOME")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"{PG}/{db}",
        "AIRFLOW__CELERY__BROKER_URL": REDIS,
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://postgres@127.0.0.1:5432/{db}",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
        "AIRFLOW__OPERATORS__DEFAULT_QUEUE": queue,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        # only the run the test triggers (not tonight's 02:00 one as well: that is the schedule,
        # which test_dag_integrity checks)
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
        "SERVEBENCH_RESULTS_URI": str(tmp / "data"),
        "SERVEBENCH_WORK_DIR": str(tmp / "runs"),
    })
    _admin(f'DROP DATABASE IF EXISTS "{db}"')
    _admin(f'CREATE DATABASE "{db}"')
    deployment = Deployment(home, env, port)
    try:
        migrate = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env,
                                 capture_output=True, text=True, timeout=600, check=False)
        assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
        deployment.start("api-server", "api-server", "--host", "127.0.0.1", "--port", str(port),
                         "--workers", "1")
        deployment.start("scheduler", "scheduler")
        deployment.start("dag-processor", "dag-processor")
        deployment.start("worker", "celery", "worker", "--queues", queue, "--concurrency", "2")
        deployment.wait_for("the API server", lambda: deployment.api(
            "GET", "/api/v2/monitor/health").status_code == 200, 240)
        deployment.token = deployment.api("GET", "/auth/token").json()["access_token"]
        deployment.sweep = _sweep(local_sweep, tmp / "celery.yaml")
        deployment.data = tmp / "data"
        yield deployment
    finally:
        deployment.stop()
        _admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


@pytest.fixture(scope="module")
def nightly_run(airflow):
    """The nightly DAG triggered over REST and polled until it ends."""
    airflow.wait_for(f"{DAG_ID} to be parsed", lambda: airflow.api(
        "GET", f"/api/v2/dags/{DAG_ID}").status_code == 200, 240)
    started = airflow.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                          json={"logical_date": None, "conf": {"sweep": str(airflow.sweep)}})
    assert started.status_code == 200, started.text
    run_id = started.json()["dag_run_id"]
    state = {}

    def ended() -> bool:
        state.update(airflow.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}").json())
        return state["state"] in ("success", "failed")

    airflow.wait_for(f"run {run_id}", ended, RUN_TIMEOUT_S)
    tasks = airflow.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances").json()
    states = {(t["task_id"], t.get("map_index")): (t["state"], t.get("hostname"))
              for t in tasks["task_instances"]}
    assert state["state"] == "success", f"{states}\n{airflow.logs()}"
    return run_id, states


def test_the_nightly_dag_runs_on_celery_workers_and_publishes_its_parquet(airflow, nightly_run):
    run_id, states = nightly_run
    assert {task for task, _ in states} >= {"plan", "provision", "bench", "teardown_hosts",
                                            "publish", "detect", "digest"}
    assert all(state == "success" for state, _ in states.values()), states
    assert all(host for _, host in states.values())  # each ran on the Celery worker
    store = ResultStore(str(airflow.data))
    [run] = store.read_table("runs", run_ids=[run_id]).to_pylist()
    assert run["dag_id"] == DAG_ID and run["sweep_name"] == "celery" and run["n_cells"] == 2
    cells = store.read_table("cells", run_ids=[run_id]).to_pandas()
    assert sorted(cells["variant"]) == ["f16", "q8_0"]
    # this VM may stall a cell's client (client_saturated): the rule's job; anything else fails
    bad = cells[cells["status"] != "ok"]
    assert bad["reason"].str.contains("client_saturated").all(), bad[["variant", "reason"]]
    requests = store.read_table("requests", run_ids=[run_id]).to_pandas()
    assert (~requests["warmup"]).sum() == 48  # 24 measured per cell, beside the warmups
    assert store.read_table("evals", run_ids=[run_id]).num_rows > 0


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_the_benchmarks_view_opens_in_the_airflow_ui(airflow, nightly_run, tmp_path):
    run_id, _ = nightly_run
    profile = tmp_path / "profile"
    login = f"{airflow.url}/auth/token/login?next="
    # the board itself, as the UI's iframe loads it (the session cookie from logging in)
    dom = dump_dom(login + "/servebench/", profile)
    text = text_of(dom)
    assert "servebench benchmarks" in text and "Latest runs" in text and run_id in text
    assert "celery" in text and "Quality gate (latest run of each sweep)" in text
    assert "adder/q8_0: accuracy" in text  # the gate's verdict on the candidate
    # the target's tok/s and TTFT p95 trend panels, and its latency vs throughput curve
    assert dom.count('<div class="panels"') == 2 and dom.count("data:image/png;base64,") == 1
    # the UI's Benchmarks page: the nav entry, the board framed in it
    ui = dump_dom(login + "/plugin/benchmarks", profile, wait_ms=15000)
    assert "servebench/" in ui and "<iframe" in ui, ui[:2000]
    shot = screenshot(login + "/plugin/benchmarks", profile, "benchmarks-view.png",
                      size="1400,1100", wait_ms=15000)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    # (all-admins mode makes every caller an admin here; tests/unit/view/test_board.py checks that
    # the board refuses a caller without a session)
