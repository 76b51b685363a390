"""The message a failed task posts, and what is never posted."""

from types import SimpleNamespace

from servebench.errors import ReleaseGateFailed
from servebench.notify.failure import ERROR_LINES, announce_failure, failure_message
from servebench.notify.notifier import Notifier
from servebench.settings import Settings


class Recorder(Notifier):
    name = "Slack #bench"

    def __init__(self):
        self.posted = []

    def post(self, markdown, files=()):
        self.posted.append(markdown)
        return "Slack #bench (ts=1.2)"


def test_the_message_names_the_task_the_error_and_the_run():
    error = RuntimeError("\n".join(f"line {i}" for i in range(10)))
    text = failure_message("nightly_benchmark", "scheduled__x", "publish", 2, error,
                           "http://af/dags/nightly_benchmark/runs/scheduled__x")
    assert "Task `publish` of run `scheduled__x` failed after 2 tries" in text
    assert "RuntimeError: line 0" in text and f"line {ERROR_LINES - 1}" in text
    assert f"line {ERROR_LINES}" not in text and "more lines in the task log" in text
    assert "(http://af/dags/nightly_benchmark/runs/scheduled__x)" in text
    assert "killed, or timed out" in failure_message("d", "r", "t", 1, None, None)


def test_a_run_is_posted_once_and_a_failing_verdict_not_at_all(tmp_path):
    settings, slack = Settings(results_uri=str(tmp_path)), Recorder()

    def context(task, error):
        ti = SimpleNamespace(dag_id="nightly_benchmark", task_id=task, run_id="r1",
                             try_number=1)
        return {"ti": ti, "run_id": "r1", "exception": error}

    announce_failure(context("plan", ValueError("bad")), settings, slack)
    where = announce_failure(context("publish", ValueError("nothing")), settings, slack)
    assert len(slack.posted) == 1 and "1 earlier failure" in where
    assert len(list(tmp_path.rglob("*.md"))) == 2
    gate = ReleaseGateFailed("q4 fails the gate")
    assert "verdict" in announce_failure(context("conclude", gate), settings, slack)
    assert len(slack.posted) == 1
