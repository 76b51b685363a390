"""Callbacks the DAG files wire at parse time. This module imports nothing at top level (a DAG
file imports it and stays light to parse); each callback imports its logic when called."""

from __future__ import annotations

from collections.abc import Mapping


def on_task_failure(context: Mapping) -> None:
    """A task that failed for good is heard: ``servebench.notify.failure``."""
    from servebench.notify.failure import announce_failure

    announce_failure(context)
