"""servebench's exceptions, all in this one module: a base and the few kinds a caller handles.

    ServebenchError
    |-- SpecError        a file the user wrote is wrong; the message names the file and field
    |   |-- PlanError        the sweep cannot run as written (before anything is provisioned)
    |   |-- GoldenSetError   a golden set (file and line)
    |   |-- HistoryError     a history to replay (file and column)
    |   `-- TraceError       a request trace to replay (file and row)
    |-- LaunchError      a variant's server could not be had (its log tail in the message)
    |   `-- ServerLaunchError  a local server exited or never became healthy
    |-- QuantizeError    a variant's recipe could not make its checkpoint (the tool's last
    |                    lines in the message)
    |-- TransportError   a request could not be carried (inside the load generator: every
    |                    failed request ends as a record with its error, never raised)
    |-- LoadGeneratorError  a client process of a multi-process load failed (its traceback
    |                    in the message)
    |-- ScorerError      an answer could not be scored, not by the answer's fault
    |-- PublishError     a night's results could not be published
    |   |-- SchemaError      rows that do not fit a result table
    |   |-- ContractError    a batch that broke the data contract (the rendered report)
    |   `-- PublishConflict  another publish of the run still holds its lease
    |-- TeardownError    instances could not be terminated (the janitor retries them)
    |-- NotificationError  a digest or verdict could not be announced (said, never raised
    |                    past ``notify.notifier.announce``)
    `-- ReleaseGateFailed  a release gate's candidate regressed (the DAG run fails on it)

Each kind also derives from the builtin it always was (``ValueError`` for bad input,
``RuntimeError`` for a failure at run time), so ``except ValueError`` around a spec keeps
working. A failed request is not an exception: it is a ``RequestRecord`` with its error, and a
Slack failure is logged and returned by the digest task (docs/faults.md).
"""

from __future__ import annotations

from typing import Protocol


class Rendered(Protocol):
    """What a report must offer to become an error's message (the contract's report)."""

    def render(self) -> str: ...


class ServebenchError(Exception):
    """Anything servebench raises on purpose."""


class SpecError(ServebenchError, ValueError):
    """A sweep spec is invalid; the message names the file and the field."""


class PlanError(SpecError):
    """The sweep cannot run as written; raised before anything is provisioned."""


class GoldenSetError(SpecError):
    """A golden set file is invalid; the message names the file and the line."""


class HistoryError(SpecError):
    """A history file that cannot be replayed; the message names the file and column."""


class TraceError(SpecError):
    """A request trace that cannot be replayed; the message names the file and the row."""


class LaunchError(ServebenchError, RuntimeError):
    """A variant's server could not be had (it exited, never became healthy, or its endpoint
    does not answer); the message says why, with the server's log tail where there is one.
    ``argv`` is the command that was launched, for the failed rows' provenance."""

    def __init__(self, message: str, argv: list[str] | None = None) -> None:
        super().__init__(message)
        self.argv = argv


class ServerLaunchError(LaunchError):
    """A server exited or never became healthy; the message carries its log tail."""


class QuantizeError(ServebenchError, RuntimeError):
    """A recipe could not make its checkpoint (llm-compressor failed, or its venv is missing);
    the message carries the tool's own last lines. The variant's cells fail with it."""


class TransportError(ServebenchError, RuntimeError):
    """A request could not be carried as sent (``loadgen.stream.StaleConnection``: a reused
    connection the server had closed); the load generator turns it into a retry or a record."""


class LoadGeneratorError(ServebenchError, RuntimeError):
    """A load-generator client process failed; the message carries that process's traceback."""


class ScorerError(ServebenchError, RuntimeError):
    """A scorer could not score an answer for a reason that is not the answer's fault."""


class PublishError(ServebenchError, RuntimeError):
    """A night's results could not be published."""


class SchemaError(PublishError, ValueError):
    """Rows that do not fit a result table."""


class ContractError(PublishError, ValueError):
    """A run broke its data contract; the message is the rendered report."""

    def __init__(self, report: Rendered) -> None:
        super().__init__(report.render())
        self.report = report


class PublishConflict(PublishError):
    """Another publish of the run still held its lease after the wait."""


class TeardownError(ServebenchError, RuntimeError):
    """Instances could not be terminated (the janitor will retry them)."""


class NotificationError(ServebenchError, RuntimeError):
    """A notifier (Slack) could not deliver; the message says where and why."""


class ReleaseGateFailed(ServebenchError, RuntimeError):
    """The candidate regressed (or could not be cleared and the params say that fails)."""
