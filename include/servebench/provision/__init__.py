"""Provisioners: where a variant's server comes from; importing this package registers each
kind (``servebench.provision.interface`` has the interface and the life cycle)."""

from servebench.provision import ec2, kubernetes, local, static  # noqa: F401
from servebench.provision.interface import (
    Endpoint,
    LaunchError,
    Provisioner,
    get_provisioner,
    provision_kinds,
)

__all__ = ["Endpoint", "LaunchError", "Provisioner", "get_provisioner", "provision_kinds"]
