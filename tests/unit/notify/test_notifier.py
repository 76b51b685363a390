"""One failure policy for every announcement: a notifier that fails is said, never raised --
the nightly digest and the release gate's verdict alike."""

import pytest
from servebench.errors import NotificationError, ReleaseGateFailed
from servebench.notify.notifier import Notifier, announce
from servebench.release.gate import conclude
from servebench.settings import Settings


class Recorder(Notifier):
    name = "Slack #bench"

    def __init__(self, fail: bool = False):
        self.fail, self.posted = fail, []

    def post(self, markdown, files=()):
        if self.fail:
            raise NotificationError("Slack #bench failed: channel_not_found")
        self.posted.append(markdown)
        return "Slack #bench (ts=1.2)"


def test_announce_says_where_or_why(caplog):
    assert announce(None, "the digest", "hi") == ""
    ok = Recorder()
    assert announce(ok, "the digest", "hi") == " and Slack #bench (ts=1.2)"
    assert ok.posted == ["hi"]
    assert (announce(Recorder(fail=True), "the digest", "hi")
            == " (Slack #bench failed: channel_not_found)")
    assert "posting the digest to Slack #bench failed" in caplog.text


def _decision(overall: str) -> dict:
    return {"target": "t", "candidate": "q8", "baseline": "f16", "repetitions": 3,
            "overall": overall, "perf": [], "quality": {"gate_verdict": "pass"},
            "on_inconclusive": "needs_person"}


def test_a_passing_gate_passes_when_slack_is_down(tmp_path):
    settings = Settings(results_uri=str(tmp_path))
    concluded = conclude(_decision("pass"), "gate-1", settings, notifier=Recorder(fail=True))
    assert concluded["outcome"] == "ship"
    assert concluded["where"].endswith("(Slack #bench failed: channel_not_found)")
    assert list(tmp_path.glob("release_gates/date=*/*.md"))  # the verdict is kept


def test_a_failing_gate_fails_and_is_announced(tmp_path):
    settings = Settings(results_uri=str(tmp_path))
    slack = Recorder()
    with pytest.raises(ReleaseGateFailed, match="and Slack #bench"):
        conclude(_decision("fail"), "gate-2", settings, notifier=slack)
    assert len(slack.posted) == 1
