"""What every part of the EC2 provisioner asks AWS through: the boto3 clients made from the
Airflow AWS connection, the tags every instance of ours carries, the instance lookup, and a
target's ec2 spec."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servebench.config import Ec2Provision

if TYPE_CHECKING:
    from servebench.config import TargetSpec

PROJECT_TAG, PROJECT = "project", "servebench"  # the tag every instance of ours carries
LIVE_STATES = ["pending", "running", "stopping", "stopped"]
API_MAX_ATTEMPTS = 5  # per EC2/SSM call, first try included


def has_connection(conn_id: str) -> bool:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    return True


def aws_clients(conn_id: str, region: str | None):
    """(ec2, ssm) boto3 clients from the Airflow AWS connection (its credentials, region and
    ``endpoint_url`` extra)."""
    from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook
    from airflow.providers.amazon.aws.hooks.ssm import SsmHook
    from botocore.config import Config

    # throttling and 5xx are retried with backoff, a bounded number of times
    config = Config(retries={"mode": "standard", "total_max_attempts": API_MAX_ATTEMPTS})
    ec2 = EC2Hook(aws_conn_id=conn_id, region_name=region, api_type="client_type",
                  config=config).conn
    ssm = SsmHook(aws_conn_id=conn_id, region_name=region, config=config).conn
    return ec2, ssm


def instance_tags(instance: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def find_instances(ec2, filters: list[dict]) -> list[dict]:
    found = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            found += reservation["Instances"]
    return found


def ec2_spec(target: TargetSpec) -> Ec2Provision:
    if not isinstance(target.provision, Ec2Provision):
        raise TypeError(f"target {target.name!r} is not provisioned by ec2")
    return target.provision
