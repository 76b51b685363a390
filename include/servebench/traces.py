"""Request traces: the rows a ``trace`` workload replays -- when each request arrives, how long
its input and output are, and which of its leading tokens it shares with other requests.

Three formats are read, each from JSONL, CSV or Parquet (pyarrow reads CSV and Parquet):

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

A replay reads its trace with :func:`load_trace`: only the columns its format uses, streamed
(CSV blocks, Parquet batches, JSONL lines), stopping at the first row past ``max_requests`` /
``max_duration_s`` -- rows after it are neither parsed nor checked, so the file must list its
rows in arrival order (a file whose rows before that point go back in time is read whole and
sorted) -- and once per process for a version of the file (its size and modification time)
and the same limits: the plan, a unit's warm-up and every variant's cells share that read.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from servebench.errors import TraceError

FORMATS = ("servebench", "azure", "mooncake")
# the columns that tell a format, first row's keys
_SIGNATURES = {
    "servebench": {"arrival_s", "input_tokens", "output_tokens"},
    "azure": {"TIMESTAMP", "ContextTokens", "GeneratedTokens"},
    "mooncake": {"timestamp", "input_length", "output_length"},
}
# the columns a format reads besides its signature's, where the file has them
_OPTIONAL = {"servebench": {"hash_ids", "prefix_group", "prefix_tokens"}, "azure": set(),
             "mooncake": {"hash_ids"}}
_BATCH_ROWS = 65_536  # a Parquet batch; a CSV block is _CSV_BLOCK bytes
_CSV_BLOCK = 1 << 16  # pyarrow reads a few dozen blocks ahead
_SLICE_ROWS = 1024  # rows of a batch made Python objects at a time


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
    return _read(Path(path), fmt, block_tokens)


def load_trace(path: str | Path, fmt: str = "auto", *, block_tokens: int = 512,
               time_scale: float = 1.0, max_requests: int | None = None,
               max_duration_s: float | None = None, max_input_tokens: int | None = None,
               max_output_tokens: int | None = None) -> tuple[TraceRequest, ...]:
    """What a replay takes of a trace file: ``select(read_trace(...), ...)``, reading no
    further than the first row past ``max_requests`` / ``max_duration_s`` when the rows
    before it are in arrival order, and read once per process for this version of the file
    (size and modification time) and these arguments."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from None
    return _load(path, stat.st_size, stat.st_mtime_ns, fmt, block_tokens, time_scale,
                 max_requests, max_duration_s, max_input_tokens, max_output_tokens)


@lru_cache(maxsize=16)
def _load(path: Path, size: int, mtime_ns: int, fmt: str, block_tokens: int,
          time_scale: float, max_requests: int | None, max_duration_s: float | None,
          max_input_tokens: int | None, max_output_tokens: int | None
          ) -> tuple[TraceRequest, ...]:
    """``load_trace`` of one version of a file (``size`` and ``mtime_ns`` key the cache)."""
    requests = _read(path, fmt, block_tokens, time_scale=time_scale,
                     max_requests=max_requests, max_duration_s=max_duration_s)
    return tuple(select(requests, time_scale=time_scale, max_requests=max_requests,
                        max_duration_s=max_duration_s, max_input_tokens=max_input_tokens,
                        max_output_tokens=max_output_tokens))


def _read(path: Path, fmt: str, block_tokens: int, *, time_scale: float = 1.0,
          max_requests: int | None = None, max_duration_s: float | None = None
          ) -> list[TraceRequest]:
    """``read_trace``; with limits, the rows up to the first past them (``select``'s test)
    while the rows so far are in arrival order, and every row once one goes back in time."""
    if fmt != "auto" and fmt not in FORMATS:
        raise TraceError(f"{path}: unknown trace format {fmt!r} (one of {FORMATS})")
    names = _columns(path)
    if not names:
        raise TraceError(f"{path}: the trace has no rows")
    if fmt == "auto":
        fmt = next((name for name, cols in _SIGNATURES.items() if cols <= set(names)), "")
        if not fmt:
            raise TraceError(
                f"{path}: row 1: columns {sorted(names)} match no trace format; expected "
                + "; ".join(f"{name}: {sorted(cols)}" for name, cols in _SIGNATURES.items()))
    if missing := _SIGNATURES[fmt] - set(names):
        raise TraceError(f"{path}: row 1 ({fmt}): no column {', '.join(sorted(missing))} "
                         f"among {sorted(names)}")
    wanted = _SIGNATURES[fmt] | _OPTIONAL[fmt]
    parse = {"servebench": _servebench_row, "azure": _azure_row, "mooncake": _mooncake_row}[fmt]
    requests: list[TraceRequest] = []
    in_order = True
    for number, row in enumerate(_rows(path, [n for n in names if n in wanted]), start=1):
        if in_order and max_requests is not None and len(requests) == max_requests:
            break
        try:
            request = parse(row, block_tokens)
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"{path}: row {number} ({fmt}): {type(exc).__name__}: {exc}"
                             ) from None
        in_order = in_order and (not requests or request.arrival_s >= requests[-1].arrival_s)
        if in_order and max_duration_s is not None and requests and round(
                request.arrival_s - requests[0].arrival_s, 6) * time_scale >= max_duration_s:
            break
        if request.input_tokens <= 0 or request.output_tokens <= 0:
            raise TraceError(f"{path}: row {number} ({fmt}): input and output lengths must be "
                             f"positive, got {request.input_tokens} and {request.output_tokens}")
        requests.append(request)
    if not requests:
        raise TraceError(f"{path}: the trace has no rows")
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


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".json", ".csv", ".parquet"):
        raise TraceError(f"{path}: a trace is .jsonl, .csv or .parquet, not {suffix!r}")
    return suffix


def _csv_options(columns: list[str] | None) -> dict:
    # every column as text, converted per row by _csv_value (a block's inferred types need not
    # hold for the next block); timestamps stay text: Azure's carry 7 fractional digits
    return {"read_options": pacsv.ReadOptions(block_size=_CSV_BLOCK, use_threads=False),
            "convert_options": pacsv.ConvertOptions(
                include_columns=columns, strings_can_be_null=True,
                column_types=dict.fromkeys(columns or (), pa.string()))}


def _columns(path: Path) -> list[str]:
    """The columns of a trace file: a CSV's header, a Parquet schema's, a JSONL file's first
    row's keys (none for a file without rows)."""
    suffix = _suffix(path)
    try:
        if suffix == ".csv":
            with pacsv.open_csv(path, **_csv_options(None)) as reader:
                return reader.schema.names
        if suffix == ".parquet":
            with pq.ParquetFile(path) as parquet:
                return parquet.schema_arrow.names
        with path.open(encoding="utf-8") as lines:
            first = next((line for line in lines if line.strip()), None)
    except (OSError, UnicodeDecodeError, pa.ArrowInvalid) as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from None
    return [] if first is None else list(_json_row(path, 1, first))


def _rows(path: Path, columns: list[str]) -> Iterator[dict]:
    """The rows of a JSONL, CSV or Parquet file as dicts of ``columns`` (a JSONL row: all of
    its keys), streamed: a CSV block, a Parquet batch or a line at a time."""
    suffix = _suffix(path)
    if suffix in (".jsonl", ".json"):
        try:
            with path.open(encoding="utf-8") as lines:
                number = 0
                for line in lines:
                    if line.strip():
                        number += 1
                        yield _json_row(path, number, line)
        except (OSError, UnicodeDecodeError) as exc:
            raise TraceError(f"{path}: cannot read the trace: {exc}") from None
        return
    try:
        if suffix == ".csv":
            with pacsv.open_csv(path, **_csv_options(columns)) as reader:
                for batch in reader:
                    yield from _batch_rows(batch, columns, _csv_value)
        else:
            with pq.ParquetFile(path) as parquet:
                for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=columns):
                    yield from _batch_rows(batch, columns, None)
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from None


def _batch_rows(batch: pa.RecordBatch, columns: list[str], convert) -> Iterator[dict]:
    """A batch's rows, made Python objects ``_SLICE_ROWS`` at a time: as far as they are
    taken (``convert``: each cell, if given)."""
    for offset in range(0, batch.num_rows, _SLICE_ROWS):
        part = batch.slice(offset, _SLICE_ROWS)
        for row in zip(*(part.column(name).to_pylist() for name in columns), strict=True):
            yield dict(zip(columns, map(convert, row) if convert else row, strict=True))


def _csv_value(text: str | None) -> int | float | str | None:
    """A CSV cell as a whole-file read would type it: an integer, a number, else text."""
    if text is None:
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _json_row(path: Path, number: int, line: str) -> dict:
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise TraceError(f"{path}: row {number}: not JSON: {exc}") from None
    if not isinstance(row, dict):
        raise TraceError(f"{path}: row {number}: not a JSON object: {line.strip()[:80]}")
    return row


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
