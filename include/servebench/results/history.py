"""Reading the result history: pyarrow tables per target and date range, and DuckDB views.

Both readers see committed runs only (runs with a manifest under ``_manifests/``), like
``ResultStore.read_table``; a run whose publish crashed, or one being re-published, is invisible.

``load_history(store, "cells", target="llama", since=date(2025, 1, 1))`` prunes partitions on
``date`` without opening the other files, then filters rows by target.

``duckdb_connection(store)`` returns an in-memory DuckDB connection with views ``runs``, ``cells``,
``requests`` and ``evals`` (plus the partition column ``date``). They are pyarrow datasets over the
committed partitions, registered with DuckDB: projections and filters (``date``, ``target``...)
are pushed down to pyarrow, and it works the same for local and S3 stores (no DuckDB httpfs, the
store's own S3 filesystem and credentials are used). The set of runs is fixed when the view is
registered; call ``register_views(con, store)`` again to pick up runs committed later.
"""

from __future__ import annotations

import datetime as dt
from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from servebench.results.schema import TABLES, schema_for
from servebench.results.store import PARTITIONING, ResultStore

DateLike = dt.date | str | None
_ORDER = ("run_date", "run_id", "cell_id", "request_id", "item_id")


def _as_date(value: DateLike) -> dt.date | None:
    if value is None or (isinstance(value, dt.date) and not isinstance(value, dt.datetime)):
        return value
    if isinstance(value, dt.datetime):
        return value.date()
    return dt.date.fromisoformat(str(value)[:10])


def _target_filter(table: str, target: str | Iterable[str]) -> ds.Expression:
    targets = [target] if isinstance(target, str) else list(target)
    names = schema_for(table).names
    if "target" in names:
        return ds.field("target").isin(targets)
    if table == "requests":  # cell ids are "<target>/<variant>/<workload>/c<n>"
        expr = None
        for t in targets:
            e = pc.starts_with(pc.field("cell_id"), pattern=f"{t}/")
            expr = e if expr is None else expr | e
        return expr
    raise ValueError(f"table {table!r} has no target column; load it without target=")


def load_history(
    store: ResultStore,
    table: str = "cells",
    *,
    target: str | Iterable[str] | None = None,
    since: DateLike = None,
    until: DateLike = None,
    columns: list[str] | None = None,
) -> pa.Table:
    """Rows of ``table`` from committed runs with ``since <= run_date <= until`` (both inclusive,
    either open), optionally of one target (or several), ordered by run_date, run_id and id.

    ``columns`` projects (fewer columns read = faster); the partition column ``date`` may be
    asked for too. The date bounds prune whole partitions before any file is opened.
    """
    schema_for(table)
    since, until = _as_date(since), _as_date(until)
    if since and until and since > until:
        raise ValueError(f"since {since} is after until {until}")
    expr: ds.Expression | None = None

    def add(e: ds.Expression) -> None:
        nonlocal expr
        expr = e if expr is None else expr & e

    if since is not None:
        add(ds.field("date") >= since)
    if until is not None:
        add(ds.field("date") <= until)
    if target is not None:
        add(_target_filter(table, target))
    out = store.read_table(table, filters=expr, columns=columns)
    keys = [(c, "ascending") for c in _ORDER if c in out.column_names]
    return out.sort_by(keys) if keys and out.num_rows > 1 else out


# -- DuckDB ----------------------------------------------------------------------------------
def committed_dataset(store: ResultStore, table: str) -> ds.Dataset:
    """A pyarrow dataset over the committed partitions of ``table`` (schema + ``date``)."""
    schema = schema_for(table).append(pa.field("date", pa.date32()))
    committed = store.committed_run_ids()
    dirs = store.table_dirs(table) if committed else []
    if not dirs:
        return ds.dataset(schema.empty_table())
    fragments = [fragment for path in dirs
                 for fragment in ds.dataset(path, filesystem=store._fs,  # noqa: SLF001
                                            format="parquet", partitioning=PARTITIONING,
                                            schema=schema)
                 .get_fragments(filter=ds.field("run_id").isin(committed))]
    return ds.FileSystemDataset(fragments, schema=schema, format=ds.ParquetFileFormat(),
                                filesystem=store._fs)  # noqa: SLF001


def register_views(con, store: ResultStore, tables: Iterable[str] = tuple(TABLES)) -> None:
    """(Re)register ``tables`` as views of ``con`` over the store's committed runs."""
    for name in tables:
        con.register(name, committed_dataset(store, name))


def duckdb_connection(store: ResultStore, *, database: str = ":memory:"):
    """A DuckDB connection with views runs, cells, requests, evals over committed runs."""
    import duckdb

    con = duckdb.connect(database)
    register_views(con, store)
    return con
