"""What a test that is not about a measurement's validity may accept of a cell measured here.

Every cell is judged on two things (``servebench.metrics``): the server's answers (errors,
output lengths, usage, the served model, the prompts' cache) and the measurement itself --
whether this client kept up (``client_saturated``) and saw the tokens arrive apart
(``timing_unresolved``). The second pair judges the host the client ran on: on a shared 2-core
machine a stall of a few milliseconds rightly makes a cell invalid. That verdict is those rules'
own business (tests/unit/test_metrics.py); a test about a provisioner, a pipeline, a fault or
another rule asserts with :func:`assert_measured` that its cells were measured and that no rule
but those two fired, so that it passes or fails on what it is about, not on how the host
scheduled a few milliseconds.
"""

from __future__ import annotations

# the reasons of the rules that judge the client's host, not the server (metrics.py's
# "validity of the measurement itself")
HOST_RULES = ("client_saturated:", "timing_unresolved:")


def other_reasons(cell: dict) -> list[str]:
    """The cell's invalid reasons other than the host's (a row's ``reason`` joins its reasons
    with '; ')."""
    reason = cell.get("reason")
    parts = reason.split("; ") if isinstance(reason, str) and reason else []
    return [part for part in parts if not part.startswith(HOST_RULES)]


def assert_measured(cells) -> None:
    """Each of ``cells`` (rows, as dicts) was measured -- not failed, some requests answered --
    and nothing but the host's rules made it invalid."""
    cells = list(cells)
    assert cells, "no cells"
    for cell in cells:
        assert cell["status"] in ("ok", "invalid") and cell["n_ok"] > 0 \
            and not other_reasons(cell), (cell["cell_id"], cell["status"], cell["reason"])
