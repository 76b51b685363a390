"""The run's HTML report opened in a real browser: headless Chromium (Debian's `chromium`)
renders the self-contained file, its DOM carries the regression, the charts and the tables, and
a screenshot is taken (its path is printed, to keep as an artifact)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from servebench.pipeline import send_digest

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_the_report_opens_in_chromium_with_its_charts(synthetic_history, tmp_path,
                                                      monkeypatch):
    store, summaries, _ = synthetic_history
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    alerts = store.read_table("regressions").to_pandas()
    run_id = alerts[alerts["kind"] == "regression"].iloc[0]["run_id"]
    summary = next(s for s in summaries if s["run_id"] == run_id)
    send_digest(summary)
    [report] = [Path(f) for f in store.find(f"reports/date={summary['run_date']}")]
    profile = tmp_path / "profile"
    common = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run([*common, "--dump-dom", report.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    text = re.sub(r"<[^>]+>", " ", dom)
    assert "servebench report: local" in text
    assert "Regressions (1)" in text and "TTFT p95 +" in text
    assert "cause: engine_version b1 -&gt; b2" in dom or "cause: engine_version b1 -> b2" in text
    assert dom.count('src="data:image/png;base64,') == 2  # the change and the target chart
    assert "Provenance" in text and "Invalid and failed cells" in text
    shot = tmp_path / "report.png"
    subprocess.run([*common, "--window-size=1280,2200", f"--screenshot={shot}",
                    report.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"report screenshot: {shot}")
