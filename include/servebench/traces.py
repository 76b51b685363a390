"""Request traces: the rows a ``trace`` workload replays -- when each request arrives, how long
its input and output are, and which of its leading tokens it shares with other requests.

Three formats are read, each from JSONL, CSV or Parquet (pyarrow reads all three):

- ``servebench``: ``arrival_s`` (seconds from the trace's start), ``input_tokens``,
  ``output_tokens``; optionally ``hash_ids`` (a list, one id per ``block_tokens`` of input, as
  Mooncake's) or ``prefix_group`` with ``prefix_tokens`` (rows of one group share that many
  leading tokens).
- ``azure``: Azure's public LLM inference traces (AzurePublicDataset, 2023 and 2024):
  ``TIMESTAMP`` (a date-time), ``ContextTokens``, ``GeneratedTokens``; no shared prefixes.
- ``mooncake``: Mooncake's FAST'25 traces: ``timestamp`` (milliseconds from the start),
  ``input_length``, ``output_length``, ``hash_ids`` (each a block of 512 tokens; two requests
  sharing a leading run of ids share that prefix).

A row's shared content is a chain of *blocks* ``(key, tokens)``: requests whose chains begin
alike get the same text for those blocks (``workloads``), so a prefix cache sees the reuse the
trace recorded. Errors name the file and the row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from servebench.errors import TraceError

FORMATS = ("servebench", "azure", "mooncake")
# the columns that tell a format, first row's keys
_SIGNATURES = {
    "servebench": {"arrival_s", "input_tokens", "output_tokens"},
    "azure": {"TIMESTAMP", "ContextTokens", "GeneratedTokens"},
    "mooncake": {"timestamp", "input_length", "output_length"},
}


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float  # seconds from the trace's first arrival
    input_tokens: int
    output_tokens: int
    # leading content shared with other rows, in order: (block key, tokens)
    blocks: tuple[tuple[str, int], ...] = ()


def read_trace(path: str | Path, fmt: str = "auto", *, block_tokens: int = 512
               ) -> list[TraceRequest]:
    """The requests of a trace file in arrival order (a stable sort: rows arriving together
    keep the file's order), offsets from the first arrival."""
    path = Path(path)
    rows = _rows(path)
    if not rows:
        raise TraceError(f"{path}: the trace has no rows")
    if fmt == "auto":
        fmt = next((name for name, cols in _SIGNATURES.items() if cols <= set(rows[0])), "")
        if not fmt:
            raise TraceError(
                f"{path}: row 1: columns {sorted(rows[0])} match no trace format; expected "
                + "; ".join(f"{name}: {sorted(cols)}" for name, cols in _SIGNATURES.items()))
    elif fmt not in FORMATS:
        raise TraceError(f"{path}: unknown trace format {fmt!r} (one of {FORMATS})")
    parse = {"servebench": _servebench_row, "azure": _azure_row, "mooncake": _mooncake_row}[fmt]
    requests = []
    for number, row in enumerate(rows, start=1):
        try:
            request = parse(row, block_tokens)
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"{path}: row {number} ({fmt}): {type(exc).__name__}: {exc}"
                             ) from None
        if request.input_tokens <= 0 or request.output_tokens <= 0:
            raise TraceError(f"{path}: row {number} ({fmt}): input and output lengths must be "
                             f"positive, got {request.input_tokens} and {request.output_tokens}")
        requests.append(request)
    requests.sort(key=lambda r: r.arrival_s)
    first = requests[0].arrival_s
    # to the microsecond: a date-time's epoch seconds carry float noise below it
    return [TraceRequest(round(r.arrival_s - first, 6), r.input_tokens, r.output_tokens,
                         r.blocks) for r in requests]


def select(requests: Sequence[TraceRequest], *, time_scale: float = 1.0,
           max_requests: int | None = None, max_duration_s: float | None = None,
           max_input_tokens: int | None = None, max_output_tokens: int | None = None
           ) -> list[TraceRequest]:
    """What a workload replays of a trace: offsets times ``time_scale``, the arrivals within
    ``max_duration_s``, the first ``max_requests``, lengths clipped (a clipped input keeps
    the blocks that still fit whole)."""
    out = []
    for r in requests:
        arrival = r.arrival_s * time_scale
        if max_duration_s is not None and arrival >= max_duration_s:
            break
        n_in = min(r.input_tokens, max_input_tokens or r.input_tokens)
        n_out = min(r.output_tokens, max_output_tokens or r.output_tokens)
        blocks, used = [], 0
        for key, tokens in r.blocks:
            if used + tokens > n_in:
                break
            blocks.append((key, tokens))
            used += tokens
        out.append(TraceRequest(arrival, n_in, n_out, tuple(blocks)))
        if max_requests is not None and len(out) == max_requests:
            break
    return out


def _rows(path: Path) -> list[dict]:
    """Every row of a JSONL, CSV or Parquet file as a dict."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".json"):
            table = pajson.read_json(path)
        elif suffix == ".csv":
            # timestamps stay text: Azure's carry 7 fractional digits, parsed below
            table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
                column_types={"TIMESTAMP": pa.string()}))
        elif suffix == ".parquet":
            table = pq.read_table(path)
        else:
            raise TraceError(f"{path}: a trace is .jsonl, .csv or .parquet, not {suffix!r}")
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from None
    return table.to_pylist()


def _hash_blocks(hash_ids, block_tokens: int) -> tuple[tuple[str, int], ...]:
    """A chain of hash ids as blocks; a block's key is its chain so far (a block is the same
    text only after the same blocks, as a prefix cache keys it)."""
    ids = [int(h) for h in hash_ids or ()]
    return tuple((":".join(map(str, ids[:i + 1])), block_tokens) for i in range(len(ids)))


def _servebench_row(row: dict, block_tokens: int) -> TraceRequest:
    blocks = _hash_blocks(row.get("hash_ids"), block_tokens)
    group = row.get("prefix_group")
    if group not in (None, ""):  # a CSV's rows outside any group leave it empty
        if blocks:
            raise ValueError("give hash_ids or prefix_group, not both")
        tokens = int(row["prefix_tokens"])
        if tokens <= 0:
            raise ValueError(f"prefix_tokens must be positive, got {tokens}")
        blocks = ((f"group:{group}", tokens),)
    return TraceRequest(float(row["arrival_s"]), int(row["input_tokens"]),
                        int(row["output_tokens"]), blocks)


def _azure_row(row: dict, block_tokens: int) -> TraceRequest:
    stamp = row["TIMESTAMP"]
    when = stamp if isinstance(stamp, dt.datetime) else dt.datetime.fromisoformat(str(stamp))
    return TraceRequest(when.timestamp() if when.tzinfo else
                        when.replace(tzinfo=dt.UTC).timestamp(),
                        int(row["ContextTokens"]), int(row["GeneratedTokens"]))


def _mooncake_row(row: dict, block_tokens: int) -> TraceRequest:
    return TraceRequest(float(row["timestamp"]) / 1000.0, int(row["input_length"]),
                        int(row["output_length"]), _hash_blocks(row.get("hash_ids"),
                                                                block_tokens))
