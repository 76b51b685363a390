"""What the run talks to outside itself, from Airflow connections or the environment: the
result store (and the AWS session behind an s3:// one), Slack's credentials, the Airflow UI's
base URL. Secrets are read here, when used, and never logged."""

from __future__ import annotations

import logging
import os

from servebench.results.store import ResultStore
from servebench.settings import Settings, get_settings

log = logging.getLogger(__name__)


def airflow_connection(conn_id: str):
    """The Airflow connection ``conn_id``, or None where Airflow is not installed or the
    connection is not defined. Any other failure to read it (a broken secrets backend, a
    malformed connection) is raised: falling back to other credentials, or to no Slack, must
    never hide it."""
    try:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
    except ImportError:
        return None
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        log.info("no Airflow connection %r", conn_id)
        return None


def aws_session(conn_id: str):
    """(boto3 session, endpoint_url) from an Airflow AWS connection, or (None, None) when it is
    not defined (then boto3's default chain is used)."""
    if airflow_connection(conn_id) is None:
        return None, None
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
    return hook.get_session(), hook.conn_config.endpoint_url


def open_store(settings: Settings | None = None) -> ResultStore:
    """The result store (default: the settings' ``results_uri``); for s3:// the credentials
    (and endpoint) of the Airflow AWS connection when one exists, else boto3's default
    chain."""
    settings = settings or get_settings()
    session, endpoint = None, settings.s3_endpoint_url
    if settings.results_uri.startswith("s3://"):
        session, conn_endpoint = aws_session(settings.aws_conn_id)
        endpoint = endpoint or conn_endpoint
    return ResultStore(settings.results_uri, endpoint_override=endpoint, session=session)


def store_problems(settings: Settings) -> list[str]:
    """Where the results go, checked before anything is provisioned: an s3:// store needs
    credentials (the Airflow AWS connection, else boto3's chain: environment, profile, role)."""
    if not settings.results_uri.startswith("s3://"):
        return []
    session, _ = aws_session(settings.aws_conn_id)
    if session is None:
        import boto3

        session = boto3.Session()
    if session.get_credentials() is None:
        return [(f"setting results_uri (SERVEBENCH_RESULTS_URI) {settings.results_uri}: no AWS "
                 f"credentials -- no Airflow connection {settings.aws_conn_id!r} and none in "
                 "boto3's chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, a role)")]
    return []


def slack_credentials(settings: Settings) -> tuple[str | None, str | None]:
    """(token, base_url) from $SLACK_BOT_TOKEN or the Airflow Slack connection; else None."""
    token = os.environ.get("SLACK_BOT_TOKEN")
    base_url = os.environ.get("SERVEBENCH_SLACK_BASE_URL")
    if token:
        return token, base_url
    conn = airflow_connection(settings.slack_conn_id)
    if conn is None:  # the digest goes to a file
        return None, None
    extra = conn.extra_dejson or {}
    return conn.password or None, extra.get("base_url") or base_url


def airflow_url(settings: Settings) -> str | None:
    """The Airflow UI's base URL: ours, else Airflow's own ``[api] base_url`` (unset on a
    local install: then the digest names runs without links)."""
    if settings.airflow_url:
        return settings.airflow_url
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback=None) or None
