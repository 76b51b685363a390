"""The EC2 provisioner (``provision: {kind: ec2, instance_type: ..., ami: ...}``).

One instance per target, launched by the setup task and terminated by the teardown task;
each variant of the target runs on it in turn, as the stack's container
(``StackAdapter.container_launch``) started through SSM Run Command, and is reached over the
instance's address. Every path ends with the instance gone:

- ``ClientToken`` is derived from (run_id, target, attempt): a retried setup task gets the
  instance the first try launched, never a second one;
- every instance is tagged ``project=servebench`` with its run_id, dag_id, target and
  ``expires_at``; the teardown task terminates by those tags (it needs no state from a setup
  task that crashed half-way), and the hourly ``instance_janitor`` DAG terminates whatever is
  past ``expires_at`` or belongs to a DAG run that is no longer running (:func:`reap`);
- credentials and endpoint come from the Airflow AWS connection through the Amazon
  provider's hooks (``EC2Hook``, ``SsmHook``), never from hand-read connection fields.

The container script never carries a secret: ``HF_TOKEN`` is read on the instance from an
SSM SecureString parameter when the spec names one.

One module a concern: ``provisioner`` (the :class:`Ec2Provisioner` life cycle), ``launch``
(RunInstances with its placements and fallbacks, the quota wait, client tokens, the wait for
an instance to come up), ``checks`` (the plan's DryRun, instance-profile and token-parameter
checks), ``script`` (the shell lines SSM runs for a variant, the instance store),
``readiness`` (SSM commands, the container's health and its end), ``reaping`` (termination,
the lease, what a run paid for, the janitor's :func:`reap`), ``aws`` (clients, tags, lookup).
"""

from servebench.provision.ec2.provisioner import Ec2Provisioner  # registers the ec2 kind

__all__ = ["Ec2Provisioner"]
