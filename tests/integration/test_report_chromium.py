"""The run's HTML report opened in a real browser: headless Chromium (Debian's `chromium`)
renders the self-contained file, its DOM carries the regression, the charts and the tables, and
a screenshot is taken (its path is printed, to keep as an artifact)."""

from pathlib import Path

import pytest
from browser import CHROMIUM, dump_dom, screenshot, text_of
from servebench.pipeline import send_digest

pytestmark = pytest.mark.integration


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_the_report_opens_in_chromium_with_its_charts(synthetic_history, tmp_path,
                                                      monkeypatch):
    store, summaries, _ = synthetic_history
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    alerts = store.read_table("changes").to_pandas()
    run_id = alerts[alerts["kind"] == "regression"].iloc[0]["run_id"]
    summary = next(s for s in summaries if s["run_id"] == run_id)
    send_digest(summary)
    [report] = [Path(f) for f in store.find(f"reports/date={summary['run_date']}")]
    profile = tmp_path / "profile"
    dom = dump_dom(report.as_uri(), profile)
    text = text_of(dom)
    assert "servebench report: local" in text
    assert "Regressions (1)" in text and "TTFT p95 +" in text
    assert "cause: engine_version b1 -&gt; b2" in dom or "cause: engine_version b1 -> b2" in text
    assert dom.count('src="data:image/png;base64,') == 2  # the change and the target chart
    assert "Provenance" in text and "Invalid and failed cells" in text
    shot = screenshot(report.as_uri(), profile, "report.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
