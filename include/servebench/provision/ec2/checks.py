"""What the plan asks before anything is paid for: a variant's container and model
(:func:`variant_problems`), and what the account would refuse (:func:`account_problems`): the
connection, an EC2 ``DryRun`` of each placement's launch, the instance profile's role, the
token parameter."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from servebench.hub import gated_model_problems
from servebench.provision.interface import container_problems
from servebench.provision.ec2.aws import aws_clients, has_connection
from servebench.provision.ec2.launch import ami_root_device, client_token, launch_args

if TYPE_CHECKING:
    from servebench.config import Ec2Provision, VariantSpec
    from servebench.settings import Settings
    from servebench.stacks.adapter import StackAdapter

log = logging.getLogger(__name__)

# the error code of a DryRun EC2 would have carried out (a refused one names its reason)
DRY_RUN_OK = "DryRunOperation"


def account_problems(spec: Ec2Provision, target: str) -> list[str]:
    """What the account would refuse, asked of AWS before anything is paid for: the
    connection, an EC2 ``DryRun`` of each placement's launch (permissions, AMI or launch
    template, subnet, instance type, security groups, instance profile), the instance
    profile's role, the token parameter. A check the worker's identity may not make
    (IAM or SSM reads it needs nowhere else) is logged and skipped."""
    if not has_connection(spec.aws_conn_id):
        return [f"field provision.aws_conn_id: no Airflow connection {spec.aws_conn_id!r} "
                "(the AWS credentials and region)"]
    try:
        ec2, ssm = aws_clients(spec.aws_conn_id, spec.region)
        problems = _dry_run_problems(ec2, spec, target)
        problems += _profile_problems(spec)
        problems += _token_parameter_problems(ssm, spec)
    except BotoCoreError as exc:  # no route to AWS, no credentials: nothing can launch
        return [f"field provision.aws_conn_id: AWS cannot be asked through "
                f"{spec.aws_conn_id!r}: {exc}"]
    return problems


def variant_problems(spec: Ec2Provision, variant: VariantSpec, adapter: StackAdapter,
                     settings: Settings) -> list[str]:
    """The container's checks (``interface.container_problems``) and the gated model's."""
    launch, problems = container_problems(adapter, variant, port=spec.port, settings=settings,
                                          kind="ec2")
    if launch is None:
        return problems
    problems += gated_model_problems(variant.model, token_field="provision.hf_token_parameter",
                                     has_token=bool(spec.hf_token_parameter),
                                     endpoint=settings.hub_endpoint)
    return problems


def _dry_run_problems(ec2, spec: Ec2Provision, target: str) -> list[str]:
    """Each placement's launch asked with ``DryRun``: EC2 answers DryRunOperation where it
    would launch, else why not (UnauthorizedOperation, InvalidAMIID.NotFound,
    InvalidSubnetID.NotFound, an instance type the zone does not offer, ...)."""
    problems = []
    try:
        root_device = ami_root_device(ec2, spec)
    except ClientError as exc:
        return [f"field provision.ami: {exc.response.get('Error', {}).get('Message', exc)}"]
    for i, placement in enumerate(spec.placements()):
        field = "provision" if i == 0 else f"provision.fallbacks[{i - 1}]"
        kwargs = launch_args(spec, placement, token=client_token("plan", target, 0, i),
                             run_id="plan", dag_id="plan", target=target,
                             root_device=root_device)
        kwargs.pop("ClientToken")
        try:
            ec2.run_instances(DryRun=True, **kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") == DRY_RUN_OK:
                continue
            where = placement.subnet_id or "the default subnet"
            problems.append(f"field {field}: EC2 would not launch {placement.instance_type} "
                            f"({placement.market}) in {where}: {error.get('Code')}: "
                            f"{error.get('Message')}")
    return problems


def _profile_problems(spec: Ec2Provision) -> list[str]:
    """The instance profile exists and carries a role (without one the SSM agent has no
    credentials and no variant can start)."""
    if not spec.instance_profile:
        return []
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    name = spec.instance_profile.rsplit("/", 1)[-1]
    iam = AwsBaseHook(aws_conn_id=spec.aws_conn_id, client_type="iam").get_conn()
    try:
        roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code == "NoSuchEntity":
            return [f"field provision.instance_profile: no instance profile {name!r} in the "
                    "account"]
        log.info("not checking instance profile %s: %s", name, code)
        return []
    if not roles:
        return [f"field provision.instance_profile: {name!r} has no role: the SSM agent "
                "gets no credentials (attach one with AmazonSSMManagedInstanceCore)"]
    return []


def _token_parameter_problems(ssm, spec: Ec2Provision) -> list[str]:
    """The SSM parameter the instance reads HF_TOKEN from exists (its value is not read)."""
    if not spec.hf_token_parameter:
        return []
    try:
        found = ssm.describe_parameters(ParameterFilters=[
            {"Key": "Name", "Option": "Equals", "Values": [spec.hf_token_parameter]}])
    except ClientError as exc:
        log.info("not checking parameter %s: %s", spec.hf_token_parameter,
                 exc.response.get("Error", {}).get("Code"))
        return []
    if not found.get("Parameters"):
        return [f"field provision.hf_token_parameter: no SSM parameter "
                f"{spec.hf_token_parameter!r} in the region (the instance reads HF_TOKEN "
                "from it: a gated model fails to load without it)"]
    return []
