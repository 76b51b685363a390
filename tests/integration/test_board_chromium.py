"""The Benchmarks view's pages served for real (the app the Airflow plugin mounts, on uvicorn
on 127.0.0.1, Airflow's auth dependency answered yes as a logged-in reader would get it) and
opened in headless Chromium over a store of 23 nights whose q4 regression (from night 20) is
among the last week's findings: the regression found on the board and its link followed to
its chart and the provenance around it; the trend panels narrowed to one variant, workload
and metric by the form's query, each night's hover; two runs side by side; screenshots kept as
CI artifacts. The view under Airflow's own login is test_celery_airflow.py's."""

import re
import socket
import threading
import time
from html import unescape

import pytest
import uvicorn
from browser import CHROMIUM, dump_dom, screenshot, text_of
from servebench.settings import Settings
from servebench.view.board import create_app

pytestmark = pytest.mark.integration


def _serve(store):
    """The board app over ``store`` on uvicorn on a free loopback port; yields its base URL."""
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
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def served(fresh_regression_history):
    store = fresh_regression_history[0]
    for base in _serve(store):
        yield store, base


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_the_view_finds_the_regression_clicks_through_filters_and_compares(served, tmp_path):
    store, base = served
    profile = tmp_path / "profile"
    board = dump_dom(base + "/", profile)
    raised = board.split("Raised in the last")[1].split("Quality gate")[0]
    assert "Regressions (1)" in text_of(raised)
    # each line built as HTML: bold and code are tags, no Markdown shows in the view
    assert "**" not in text_of(raised) and "`" not in text_of(raised), text_of(raised)
    assert "<strong>TTFT p95 +" in raised and "<code>t / q4 / w / c1</code>" in raised
    [href] = re.findall(r'<a class="finding" href="([^"]+)"', raised)
    finding = f"{base}/{unescape(href)}"
    dom = dump_dom(finding, profile)
    text = text_of(dom).replace("-&gt;", "->")
    assert "regression: TTFT p95 +" in text and "t / q4 / w / c1" in text
    assert "**" not in text and "`" not in text
    assert "cause: engine_version b1 -> b2" in text
    assert dom.count('src="data:image/png;base64,') == 1  # the series, its noise band
    assert '<tr class="differs"><td>engine_version</td>' in dom
    assert dom.count("report?run_id=") == 2  # the runs either side of the change
    shot = screenshot(finding, profile, "benchmarks-finding.png", size="1280,1200")
    assert shot.stat().st_size > 20_000

    narrowed = dump_dom(base + "/?variant=q4&workload=w&metric=ttft_ms_p95&nights=12", profile)
    trends = [d.split('id="trends"')[1] for d in (board, narrowed)]
    # both metrics' panels and the latest night's curve; then the one metric and the curve
    assert [t.count('<div class="panels"') for t in trends] == [2, 1]
    assert [t.count('src="data:image/png;base64,') for t in trends] == [1, 1]
    # 12 nights of q4 alone, each a point whose hover names its value and run; the change
    # night dashed, its cause on hover
    points = re.findall(r'<circle class="night"[^>]*><title>([^<]+)</title>', trends[1])
    assert len(points) == 12 and all(p.startswith("q4 · ") and " (TTFT p95), run scheduled__"
                                     in p for p in points)
    assert 'class="change regression"' in trends[1]
    assert '<option value="q4" selected="">' in narrowed
    screenshot(base + "/?variant=q4&workload=w&metric=ttft_ms_p95", profile,
               "benchmarks-trends.png")

    runs = store.read_table("runs").to_pandas().sort_values("run_date")
    a, b = runs["run_id"].iloc[19], runs["run_id"].iloc[20]
    compare = dump_dom(f"{base}/compare?a={a}&b={b}", profile)
    assert "Two runs side by side" in compare and compare.count("<tr><td>t / ") == 2
    screenshot(f"{base}/compare?a={a}&b={b}", profile, "benchmarks-compare.png",
               size="1280,900")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_a_newly_failing_cell_and_a_gate_failure_click_through_to_their_pages(synthetic_history,
                                                                              tmp_path):
    """The 30-night store's last week: f16's cell failing (SIGSEGV) and q4's gate failing,
    each line followed from the board to its page."""
    profile = tmp_path / "profile"
    for base in _serve(synthetic_history[0]):
        board = dump_dom(base + "/", profile)
        raised = board.split("Raised in the last")[1].split("Quality gate (latest")[0]
        failing = raised.split("Newly failing cells (1)")[1].split("</ul>")[0]
        gate = raised.split("Quality gate failures (1)")[1].split("</ul>")[0]
        pages = {}
        for name, section in (("failing", failing), ("gate", gate)):
            [href] = re.findall(r'<a class="finding" href="([^"]+)"', section)
            pages[name] = f"{base}/{unescape(href)}"
        text = text_of(dump_dom(pages["failing"], profile))
        assert "newly failing" in text and "SIGSEGV" in text
        assert "status ok failed" in " ".join(text.split())
        dom = dump_dom(pages["gate"], profile)
        assert "gate failure: t / q4: accuracy 0.80 vs 0.90" in text_of(dom)
        assert dom.count('src="data:image/png;base64,') == 1
        shot = screenshot(pages["failing"], profile, "benchmarks-failing.png",
                          size="1280,1100")
        assert shot.stat().st_size > 20_000
