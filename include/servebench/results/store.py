"""Parquet result store on a local folder or S3, with atomic, idempotent publish per run_id.

Layout under the store root (a local folder or ``s3://bucket/prefix``)::

    {table}/date=YYYY-MM-DD/run_id={encoded run_id}/part-0.parquet   hive-partitioned data
    _staging/{encoded run_id}/{table}/part-0.parquet                  a publish in progress
    _manifests/{encoded run_id}.json                                  commit record, written LAST

A run is *committed* when its manifest exists; ``read_table`` returns rows of committed runs only.
A renamed table is read from its former names' folders too (``schema.FORMER_NAMES``: a store
written before the rename still loads); it is written under its name only.
Publishing the same run_id again removes its manifest, replaces its partitions and writes a new
manifest, so a re-run replaces and never duplicates (during the replace the run is invisible, never
half-visible). Publishes of the *same* run_id racing (a task cleared while its zombie still
writes, a CLI publish beside the DAG's) are serialized by a lease, ``_locks/{encoded run_id}.json``,
created exclusively (``O_EXCL`` locally, a conditional ``If-None-Match: *`` PUT on S3): the
second waits for the first and then replaces it whole, so the partition is one publish's,
never a mix. A lease older than LEASE_S (its holder crashed) is taken over.

S3 requests are retried by the AWS SDK inside pyarrow (5xx, SlowDown throttling, dropped
connections; exponential backoff), at most S3_MAX_ATTEMPTS times each; past that the publish
raises, nothing new is committed, and the task's retry publishes again from the start.

run_id encoding: Airflow run ids contain ':' and '+', so the partition directory uses RFC 3986
percent-encoding (``urllib.parse.quote(run_id, safe="")``). That is reversible and is exactly what
pyarrow's hive partitioning (``segment_encoding="uri"``) and Hive decode, so the ``run_id`` read
back is the original; every file also keeps the original ``run_id`` as a column. The ``date``
partition equals ``run_date`` and is used for pruning: pass ``filters=[("date", ">=", d)]``.

External engines (DuckDB/Athena) pointed at ``uri_for(table)`` see every file, including a run
whose publish crashed before its manifest; join with ``_manifests`` or read through this class.
On S3, pyarrow leaves empty ``dir/`` marker objects after deletes (no option to turn it off);
every reader ignores them.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable
from urllib.parse import quote, unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from servebench.errors import PublishConflict
from servebench.results.schema import (
    FORMER_NAMES,
    SCHEMA_VERSION,
    TABLES,
    conform,
    schema_for,
)

log = logging.getLogger(__name__)

PART_FILE = "part-0.parquet"
STAGING = "_staging"
SCRATCH = "_scratch"
# Rows sorted by the keys history queries filter on, in row groups small enough that the
# Parquet min/max statistics let a reader skip the other targets' rows inside a night's file
# (one 2,000-cell row group made a one-target year load read every row).
LAYOUT: dict[str, tuple[list[str], int | None]] = {
    "cells": (["target", "variant", "workload", "concurrency"], 256),
    "evals": (["target", "variant", "golden_set", "item_id"], 4096),
    "requests": (["cell_id", "request_id"], None),
}
MANIFESTS = "_manifests"
LOCKS = "_locks"
LEASE_S = 1800.0  # a publish holding its lease longer than this crashed: taken over
LEASE_POLL_S = 1.0
S3_MAX_ATTEMPTS = 5  # per S3 request, backoff included
PARTITIONING = ds.partitioning(
    pa.schema([("date", pa.date32()), ("run_id", pa.string())]), flavor="hive"
)


def encode_run_id(run_id: str) -> str:
    """Path-safe, reversible form of a run id (percent-encoding, see module doc)."""
    if not run_id or run_id in (".", ".."):
        raise ValueError(f"invalid run_id {run_id!r}")
    return quote(run_id, safe="")


def decode_run_id(encoded: str) -> str:
    return unquote(encoded)


@dataclass(frozen=True)
class TableEntry:
    rows: int
    files: list[str]


@dataclass(frozen=True)
class Manifest:
    run_id: str
    run_date: dt.date
    committed_at: str
    tables: dict[str, TableEntry]
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        d = asdict(self)
        d["run_date"] = self.run_date.isoformat()
        return json.dumps(d, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        d = json.loads(text)
        return cls(
            run_id=d["run_id"],
            run_date=dt.date.fromisoformat(d["run_date"]),
            committed_at=d["committed_at"],
            tables={k: TableEntry(**v) for k, v in d["tables"].items()},
            schema_version=d.get("schema_version", SCHEMA_VERSION),
            extra=d.get("extra", {}),
        )


def _s3_endpoint(endpoint_override: str | None) -> str | None:
    return (endpoint_override or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL"))


def _s3_filesystem(endpoint_override: str | None, region: str,
                   session: Any) -> pafs.S3FileSystem:
    """S3 filesystem with credentials from ``session`` (a boto3 session, e.g. from the Airflow
    ``aws_default`` connection, else boto3's default chain: env, profile, role...)."""
    kwargs: dict[str, Any] = {
        "region": region,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=S3_MAX_ATTEMPTS),
    }
    creds = session.get_credentials()
    if creds is not None:
        frozen = creds.get_frozen_credentials()
        kwargs.update(
            access_key=frozen.access_key, secret_key=frozen.secret_key, session_token=frozen.token
        )
    endpoint = _s3_endpoint(endpoint_override)
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs.update(scheme=parsed.scheme, endpoint_override=parsed.netloc)
    return pafs.S3FileSystem(**kwargs)


class ResultStore:
    """Parquet result tables under ``uri`` (local path, default ./data, or s3://bucket/prefix).

    ``endpoint_override`` (e.g. ``http://127.0.0.1:9000`` for MinIO/moto; defaults to
    $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL) and ``region`` apply to s3:// only;
    ``filesystem`` injects a ready pyarrow filesystem (then ``uri`` is a path inside it).
    """

    def __init__(
        self,
        uri: str = "./data",
        *,
        endpoint_override: str | None = None,
        region: str | None = None,
        filesystem: pafs.FileSystem | None = None,
        session: Any = None,
    ) -> None:
        self.uri = uri
        if filesystem is not None:
            self._fs, self._root, self._scheme = filesystem, uri.rstrip("/"), ""
        elif uri.startswith("s3://"):
            import boto3  # only needed for s3:// stores
            from botocore.config import Config

            session = session or boto3.Session()
            region = region or session.region_name or "us-east-1"
            self._fs = _s3_filesystem(endpoint_override, region, session)
            self._root, self._scheme = uri[len("s3://"):].strip("/"), "s3://"
            # the lease's conditional PUT, which pyarrow's filesystem cannot send
            self._s3 = session.client(
                "s3", endpoint_url=_s3_endpoint(endpoint_override), region_name=region,
                config=Config(retries={"max_attempts": S3_MAX_ATTEMPTS, "mode": "standard"}))
        elif "://" in uri and not uri.startswith("file://"):
            raise ValueError(f"unsupported store uri scheme: {uri!r} (use a path or s3://)")
        else:
            path = uri[len("file://"):] if uri.startswith("file://") else uri
            self._fs, self._root, self._scheme = pafs.LocalFileSystem(), os.path.abspath(path), ""
        self._local = isinstance(self._fs, pafs.LocalFileSystem)

    def __repr__(self) -> str:  # never includes credentials
        return f"ResultStore({self.uri!r})"

    # ---- paths -------------------------------------------------------------------------
    def _path(self, *parts: str) -> str:
        return "/".join([self._root, *parts])

    def uri_for(self, table: str) -> str:
        """Where ``table`` lives (for DuckDB/Athena: ``{uri}/**/*.parquet`` with hive partitioning)."""
        schema_for(table)
        return f"{self._scheme}{self._path(table)}"

    def table_dirs(self, table: str) -> list[str]:
        """The folders that hold ``table``'s files: its own, and its former names' that a
        store written before its rename keeps (``FORMER_NAMES``), those that exist."""
        paths = [self._path(name) for name in (table, *FORMER_NAMES.get(table, ()))]
        return [path for path in paths if self._exists(path)]

    def _partition_rel(self, table: str, run_date: dt.date, run_id: str) -> str:
        return f"{table}/date={run_date.isoformat()}/run_id={encode_run_id(run_id)}"

    def _manifest_path(self, run_id: str) -> str:
        return self._path(MANIFESTS, f"{encode_run_id(run_id)}.json")

    # ---- filesystem helpers ------------------------------------------------------------
    def _exists(self, path: str) -> bool:
        return self._fs.get_file_info(path).type != pafs.FileType.NotFound

    def _ensure_parent(self, path: str) -> None:
        # S3 has no directories; creating one would leave marker objects behind.
        if self._local:
            self._fs.create_dir(path.rsplit("/", 1)[0], recursive=True)

    def _delete_dir(self, path: str) -> None:
        if self._exists(path):
            self._fs.delete_dir(path)

    def _write_text(self, path: str, text: str) -> None:
        self._write_bytes(path, text.encode())

    def _write_bytes(self, path: str, data: bytes) -> None:
        self._ensure_parent(path)
        if self._local:  # write-then-rename so a reader never sees a half-written manifest
            tmp = f"{path.rsplit('/', 1)[0]}/.{uuid.uuid4().hex}.tmp"
            with self._fs.open_output_stream(tmp) as f:
                f.write(data)
            self._fs.move(tmp, path)
        else:  # a single S3 PUT is atomic
            with self._fs.open_output_stream(path) as f:
                f.write(data)

    # ---- the publish lease -------------------------------------------------------------
    @contextmanager
    def _lease(self, run_id: str, wait_s: float = LEASE_S) -> Iterator[None]:
        """Hold ``run_id``'s publish lease: wait while another publish holds it (up to
        ``wait_s``), take over one older than LEASE_S, release it in every path."""
        if not (self._local or self._scheme == "s3://"):
            yield  # an injected filesystem: no exclusive create to build a lease on
            return
        path = self._path(LOCKS, f"{encode_run_id(run_id)}.json")
        token = uuid.uuid4().hex
        body = json.dumps({"token": token, "since": time.time(), "pid": os.getpid()})
        deadline = time.monotonic() + wait_s
        waited = False
        while not self._create_exclusive(path, body):
            held = self._read_lease(path)
            if held is not None and time.time() - held.get("since", 0) > LEASE_S:
                log.warning("run %s: taking over a publish lease held since %s (crashed)",
                            run_id, dt.datetime.fromtimestamp(held["since"], dt.UTC))
                self._fs.delete_file(path)
                continue
            if time.monotonic() > deadline:
                raise PublishConflict(f"run {run_id}: another publish still holds its lease "
                                      f"({path}) after {wait_s:g} s")
            if not waited:
                log.info("run %s: another publish holds its lease; waiting", run_id)
                waited = True
            time.sleep(LEASE_POLL_S)
        try:
            yield
        finally:
            held = self._read_lease(path)
            if held is not None and held.get("token") == token:
                self._fs.delete_file(path)

    def _create_exclusive(self, path: str, body: str) -> bool:
        """Create ``path`` with ``body`` unless it exists; False when it does."""
        if self._scheme == "s3://":
            from botocore.exceptions import ClientError

            bucket, key = path.split("/", 1)
            try:
                self._s3.put_object(Bucket=bucket, Key=key, Body=body.encode(), IfNoneMatch="*")
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed",
                                                                  "ConditionalRequestConflict"):
                    return False
                raise
            return True
        self._ensure_parent(path)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(body)
        return True

    def _read_lease(self, path: str) -> dict | None:
        try:
            with self._fs.open_input_stream(path) as f:
                return json.loads(f.read())
        except (FileNotFoundError, json.JSONDecodeError):
            return None  # released meanwhile, or caught mid-write: look again

    # ---- manifests ---------------------------------------------------------------------
    def committed_run_ids(self) -> list[str]:
        base = self._path(MANIFESTS)
        if not self._exists(base):
            return []
        infos = self._fs.get_file_info(pafs.FileSelector(base, recursive=False))
        names = [i.base_name for i in infos if i.type == pafs.FileType.File]
        return sorted(
            decode_run_id(n[: -len(".json")])
            for n in names
            if n.endswith(".json") and not n.startswith(".")
        )

    def manifest(self, run_id: str) -> Manifest | None:
        path = self._manifest_path(run_id)
        if not self._exists(path):
            return None
        with self._fs.open_input_stream(path) as f:
            return Manifest.from_json(f.read().decode())

    # ---- publish -----------------------------------------------------------------------
    def publish(
        self, run_id: str, run_date: dt.date | str, tables: dict[str, pa.Table]
    ) -> Manifest:
        """Write all ``tables`` of one run atomically; replaces an earlier publish of ``run_id``
        (a publish of it under way is waited for first: see the module doc)."""
        with self._lease(run_id):
            return self._publish(run_id, run_date, tables)

    def _publish(
        self, run_id: str, run_date: dt.date | str, tables: dict[str, pa.Table]
    ) -> Manifest:
        if isinstance(run_date, str):
            run_date = dt.date.fromisoformat(run_date)
        enc = encode_run_id(run_id)
        unknown = sorted(set(tables) - set(TABLES))
        if unknown:
            raise ValueError(f"unknown table(s) {unknown}; known: {sorted(TABLES)}")
        checked = {name: self._check(name, t, run_id, run_date) for name, t in tables.items()}

        # 1. stage everything; a crash here leaves only _staging/ behind, readers unaffected
        staging = self._path(STAGING, enc)
        self._delete_dir(staging)
        for name, table in checked.items():
            path = self._path(STAGING, enc, name, PART_FILE)
            self._ensure_parent(path)
            keys, rows_per_group = LAYOUT.get(name, ([], None))
            if keys:
                table = table.sort_by([(k, "ascending") for k in keys])
            pq.write_table(table, path, filesystem=self._fs, compression="zstd",
                           row_group_size=rows_per_group)

        # 2. un-commit any earlier publish of this run, then replace its partitions
        previous = self.manifest(run_id)
        if previous is not None:
            self._fs.delete_file(self._manifest_path(run_id))
        names = [*TABLES, *(old for former in FORMER_NAMES.values() for old in former)]
        stale = {self._partition_rel(n, run_date, run_id) for n in names}
        if previous is not None:
            stale |= {f.rsplit("/", 1)[0] for e in previous.tables.values() for f in e.files}
        for rel in sorted(stale):
            self._delete_dir(self._path(rel))
        entries: dict[str, TableEntry] = {}
        for name, table in checked.items():
            rel = f"{self._partition_rel(name, run_date, run_id)}/{PART_FILE}"
            dest = self._path(rel)
            self._ensure_parent(dest)
            self._fs.move(self._path(STAGING, enc, name, PART_FILE), dest)
            entries[name] = TableEntry(rows=table.num_rows, files=[rel])

        # 3. commit: the manifest is the last thing written
        manifest = Manifest(
            run_id=run_id,
            run_date=run_date,
            committed_at=dt.datetime.now(dt.timezone.utc).isoformat(),
            tables=entries,
        )
        self._write_text(self._manifest_path(run_id), manifest.to_json())
        self._delete_dir(staging)
        log.info(
            "published run %s to %s: %s",
            run_id, self.uri, {n: e.rows for n, e in entries.items()},
        )
        return manifest

    def attach(self, run_id: str, run_date: dt.date | str, tables: dict[str, pa.Table]) -> Manifest:
        """Add (or replace) derived ``tables`` of a committed run -- the regressions the detect
        task finds after publish. Each table's partition is replaced by one file move and the
        manifest rewritten last, so running it again replaces, never duplicates."""
        with self._lease(run_id):
            return self._attach(run_id, run_date, tables)

    def _attach(self, run_id: str, run_date: dt.date | str,
                tables: dict[str, pa.Table]) -> Manifest:
        if isinstance(run_date, str):
            run_date = dt.date.fromisoformat(run_date)
        previous = self.manifest(run_id)
        if previous is None:
            raise ValueError(f"run {run_id!r} is not committed: publish it before attaching")
        enc = encode_run_id(run_id)
        checked = {name: self._check(name, t, run_id, run_date) for name, t in tables.items()}
        entries = dict(previous.tables)
        for name, table in checked.items():
            staged = self._path(STAGING, enc, "attach", name, PART_FILE)
            self._ensure_parent(staged)
            pq.write_table(table, staged, filesystem=self._fs, compression="zstd")
            for former in FORMER_NAMES.get(name, ()):  # replaced, not read beside it
                old = entries.pop(former, None)
                for old_file in old.files if old else []:
                    self._delete_dir(self._path(old_file).rsplit("/", 1)[0])
            rel = f"{self._partition_rel(name, run_date, run_id)}/{PART_FILE}"
            self._delete_dir(self._path(rel).rsplit("/", 1)[0])
            self._ensure_parent(self._path(rel))
            self._fs.move(staged, self._path(rel))
            entries[name] = TableEntry(rows=table.num_rows, files=[rel])
        manifest = Manifest(run_id=run_id, run_date=run_date,
                            committed_at=previous.committed_at, tables=entries)
        self._write_text(self._manifest_path(run_id), manifest.to_json())
        self._delete_dir(self._path(STAGING, enc, "attach"))
        log.info("attached to run %s: %s", run_id, {n: t.num_rows for n, t in checked.items()})
        return manifest

    @staticmethod
    def _check(name: str, table: pa.Table, run_id: str, run_date: dt.date) -> pa.Table:
        table = conform(name, table)
        for col, want in (("run_id", run_id), ("run_date", run_date)):
            values = set(table.column(col).to_pylist())
            if values - {want}:
                raise ValueError(f"{name}: {col} values {sorted(map(str, values))} != {want!s}")
        return table

    # ---- scratch: per-unit rows before the run is published -----------------------------
    # Each bench task writes its rows here so that any worker (not just the one that ran the
    # task) can aggregate them; readers never look under _scratch/, and publish clears it.
    def write_scratch(self, run_id: str, unit: str, table_name: str, table: pa.Table) -> None:
        """Replace ``unit``'s rows of ``table_name`` for a run in progress."""
        path = self._path(SCRATCH, encode_run_id(run_id), quote(unit, safe=""),
                          f"{table_name}.parquet")
        self._ensure_parent(path)
        pq.write_table(conform(table_name, table), path, filesystem=self._fs,
                       compression="zstd")

    def read_scratch(self, run_id: str) -> dict[str, dict[str, pa.Table]]:
        """{unit: {table name: rows}} written so far for a run in progress."""
        base = self._path(SCRATCH, encode_run_id(run_id))
        if not self._exists(base):
            return {}
        out: dict[str, dict[str, pa.Table]] = {}
        infos = self._fs.get_file_info(pafs.FileSelector(base, recursive=True))
        for info in sorted(infos, key=lambda i: i.path):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
                continue
            unit = unquote(info.path.rsplit("/", 2)[-2])
            name = info.base_name[: -len(".parquet")]
            table = pq.read_table(info.path, filesystem=self._fs)
            out.setdefault(unit, {})[name] = conform(name, table)
        return out

    def scratch_units(self, run_id: str, table_name: str = "cells") -> set[str]:
        """The units that have kept ``table_name`` for a run in progress (listed, not read:
        a retried bench task skips what its first try finished)."""
        base = self._path(SCRATCH, encode_run_id(run_id))
        if not self._exists(base):
            return set()
        infos = self._fs.get_file_info(pafs.FileSelector(base, recursive=True))
        return {unquote(i.path.rsplit("/", 2)[-2]) for i in infos
                if i.type == pafs.FileType.File and i.base_name == f"{table_name}.parquet"}

    def drop_scratch(self, run_id: str) -> None:
        self._delete_dir(self._path(SCRATCH, encode_run_id(run_id)))

    # ---- log tables (reaped): rows kept beside the runs, in no run's commit -------------------
    def append_log(self, table: str, day: dt.date, key: str, rows: pa.Table) -> str:
        """Write ``rows`` of log table ``table`` as one file of ``day`` (``key`` names it:
        the same key again replaces that file, so a retried task does not double its rows)."""
        rows = conform(table, rows)
        buf = pa.BufferOutputStream()
        pq.write_table(rows, buf)
        rel = f"{table}/date={day.isoformat()}/{encode_run_id(key)}.parquet"
        return self.put_bytes(rel, buf.getvalue().to_pybytes())

    def read_log(self, table: str, since: dt.date | None = None) -> pa.Table:
        """Every row of log table ``table`` (from the day ``since`` on)."""
        schema = schema_for(table)
        base = self._path(table)
        if not self._exists(base):
            return schema.empty_table()
        day = pa.field("date", pa.date32())
        dataset = ds.dataset(base, filesystem=self._fs, format="parquet",
                             schema=schema.append(day),
                             partitioning=ds.partitioning(pa.schema([day]), flavor="hive"))
        expr = ds.field("date") >= since if since is not None else None
        return dataset.to_table(columns=schema.names, filter=expr)

    # ---- side files (digests, reports) ---------------------------------------------------
    def put_text(self, rel_path: str, text: str) -> str:
        """Write a text file under the store root (atomically); returns its URI."""
        return self.put_bytes(rel_path, text.encode())

    def create_text(self, rel_path: str, text: str) -> bool:
        """Write a text file under the store root unless one is there already; True when this
        call created it. Of callers racing for one path exactly one gets True: the publish
        lease's exclusive create (``O_EXCL`` locally, an ``If-None-Match: *`` PUT on S3). An
        injected filesystem has none: there it looks, then writes. A store that fails raises
        OSError (on S3 too)."""
        path = self._path(rel_path)
        if self._scheme == "s3://":
            from botocore.exceptions import BotoCoreError, ClientError

            try:
                return self._create_exclusive(path, text)
            except (BotoCoreError, ClientError) as exc:
                raise OSError(f"creating s3://{path} failed: {exc}") from exc
        if self._local:
            return self._create_exclusive(path, text)
        if self._exists(path):
            return False
        self._write_text(path, text)
        return True

    def put_bytes(self, rel_path: str, data: bytes) -> str:
        """Write a file (a chart, say) under the store root (atomically); returns its URI."""
        path = self._path(rel_path)
        self._write_bytes(path, data)
        return f"{self._scheme}{path}"

    def get_bytes(self, rel_path: str) -> bytes | None:
        """A file under the store root (a report, say); None when there is none."""
        path = self._path(rel_path)
        if not self._exists(path):
            return None
        with self._fs.open_input_stream(path) as f:
            return f.read()

    def find(self, rel_dir: str) -> list[str]:
        """URIs of the files under ``rel_dir`` (empty when it does not exist)."""
        base = self._path(rel_dir)
        if not self._exists(base):
            return []
        infos = self._fs.get_file_info(pafs.FileSelector(base, recursive=True))
        return sorted(f"{self._scheme}{i.path}" for i in infos if i.type == pafs.FileType.File)

    # ---- read --------------------------------------------------------------------------
    def read_table(
        self,
        table: str,
        filters: ds.Expression | list | None = None,
        run_ids: Iterable[str] | None = None,
        columns: list[str] | None = None,
    ) -> pa.Table:
        """Rows of ``table`` from committed runs (optionally only ``run_ids``).

        ``filters`` is a pyarrow expression or DNF list as in ``pyarrow.parquet`` (e.g.
        ``[("date", ">=", datetime.date(2025, 1, 1))]``); filters on ``date``/``run_id``
        prune partitions without opening their files.
        """
        schema = schema_for(table)
        committed = set(self.committed_run_ids())
        if run_ids is not None:
            committed &= set(run_ids)
        columns = columns or schema.names
        dirs = self.table_dirs(table) if committed else []
        if not dirs:
            return schema.empty_table().select(columns)
        parts = [ds.dataset(path, filesystem=self._fs, format="parquet",
                            partitioning=PARTITIONING,
                            schema=schema.append(pa.field("date", pa.date32())))
                 for path in dirs]
        dataset = parts[0] if len(parts) == 1 else ds.dataset(parts)
        expr = ds.field("run_id").isin(sorted(committed))
        if filters is not None:
            if not isinstance(filters, ds.Expression):
                filters = pq.filters_to_expression(filters)
            expr = expr & filters
        return dataset.to_table(columns=columns, filter=expr)
