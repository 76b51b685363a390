"""The Benchmarks view's pages served for real (the app the Airflow plugin mounts, on uvicorn
on 127.0.0.1, Airflow's auth dependency answered yes as a logged-in reader would get it) and
opened in headless Chromium over the 30-night store: the trend panels narrowed to one variant
and metric by the form's query, each night's hover, a raised change's page with its chart and
the provenance around it, two runs side by side; screenshots kept as CI artifacts. The view
under Airflow's own login is test_celery_airflow.py's."""

import re
import socket
import threading
import time

import pytest
import uvicorn
from browser import CHROMIUM, dump_dom, screenshot, text_of
from servebench.board import create_app
from servebench.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(synthetic_history):
    store = synthetic_history[0]
    app = create_app(Settings(results_uri=store.uri))
    [access] = app.router.dependencies
    app.dependency_overrides[access.dependency] = lambda: None  # a reader Airflow let in
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.1)
    yield store, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_the_view_filters_clicks_through_and_compares(served, tmp_path):
    store, base = served
    profile = tmp_path / "profile"
    everything = dump_dom(base + "/", profile)
    narrowed = dump_dom(base + "/?variant=q4&metric=ttft_ms_p95&nights=12", profile)
    trends = [d.split("id=\"trends\"")[1] for d in (everything, narrowed)]
    # both metrics' panels and the latest night's curve; then the one metric and the curve
    assert [t.count('<div class="panels"') for t in trends] == [2, 1]
    assert [t.count('src="data:image/png;base64,') for t in trends] == [1, 1]
    # 12 nights of q4, each a point whose hover names its value and run
    points = re.findall(r'<circle class="night"[^>]*><title>([^<]+)</title>', trends[1])
    assert len(points) == 12 and all(" (TTFT p95), run scheduled__" in p for p in points)
    assert '<option value="q4" selected="">' in narrowed
    screenshot(base + "/?variant=q4&metric=ttft_ms_p95", profile, "benchmarks-trends.png")

    alerts = store.read_table("regressions").to_pandas()
    regression = alerts[alerts["kind"] == "regression"].iloc[0]
    finding = (f"{base}/finding?run_id={regression['run_id']}"
               f"&series_id={regression['series_id'].replace('#', '%23')}")
    dom = dump_dom(finding, profile)
    text = text_of(dom)
    assert "regression: TTFT p95 +" in text and "cause: engine_version b1 -> b2" in \
        text.replace("-&gt;", "->")
    assert dom.count('src="data:image/png;base64,') == 1
    assert '<tr class="differs"><td>engine_version</td>' in dom
    shot = screenshot(finding, profile, "benchmarks-finding.png", size="1280,1200")
    assert shot.stat().st_size > 20_000

    runs = store.read_table("runs").to_pandas().sort_values("run_date")
    a, b = runs["run_id"].iloc[19], runs["run_id"].iloc[20]
    compare = dump_dom(f"{base}/compare?a={a}&b={b}", profile)
    assert "Two runs side by side" in compare and compare.count("<tr><td>t / ") == 2
    screenshot(f"{base}/compare?a={a}&b={b}", profile, "benchmarks-compare.png",
               size="1280,900")
