"""Provisioners: where a variant's server comes from; importing this package registers each
kind, and this is where a kind is looked up by name (``servebench.provision.interface`` has
the interface and the life cycle)."""

from servebench.provision import ec2, kubernetes, local, static  # noqa: F401  (they register)
from servebench.provision.interface import REGISTRY, LaunchError, Provisioner


def get_provisioner(kind: str) -> type[Provisioner]:
    """The provisioner class of ``kind`` (KeyError naming the known ones)."""
    try:
        return REGISTRY[kind]
    except KeyError:
        raise KeyError(f"unknown provision kind {kind!r}; known: {sorted(REGISTRY)}") from None


def provision_kinds() -> list[str]:
    return sorted(REGISTRY)


__all__ = ["LaunchError", "Provisioner", "get_provisioner", "provision_kinds"]
