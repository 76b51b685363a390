"""Reading Airflow connections: an absent one means "not configured" (boto3's default chain,
the digest as a file); any other failure to read one is raised, never silently replaced."""

import pytest
from servebench import connections
from servebench.settings import Settings


def test_an_undefined_connection_is_not_configured(monkeypatch):
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    assert connections.aws_session("servebench_test_no_such_conn") == (None, None)
    settings = Settings(slack_conn_id="servebench_test_no_such_conn")
    assert connections.slack_credentials(settings) == (None, None)


def test_a_connection_that_cannot_be_read_is_raised(monkeypatch):
    from airflow.sdk import BaseHook

    def broken(conn_id):
        raise RuntimeError(f"secrets backend unreachable while reading {conn_id}")

    monkeypatch.setattr(BaseHook, "get_connection", staticmethod(broken))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    with pytest.raises(RuntimeError, match="secrets backend unreachable"):
        connections.slack_credentials(Settings())
    with pytest.raises(RuntimeError, match="secrets backend unreachable"):
        connections.aws_session("aws_default")


def test_a_defined_slack_connection_gives_its_token(monkeypatch):
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SERVEBENCH_TEST_SLACK",
                       '{"conn_type": "slack", "password": "xoxb-test-token", '
                       '"extra": {"base_url": "http://127.0.0.1:9/api/"}}')
    settings = Settings(slack_conn_id="servebench_test_slack")
    assert connections.slack_credentials(settings) == ("xoxb-test-token", "http://127.0.0.1:9/api/")
