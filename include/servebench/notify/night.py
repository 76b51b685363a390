"""A committed night told to people: its charts, the HTML report and the digest, kept beside
the results and announced through the notifier."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import pandas as pd

from servebench.canary import canary_lines
from servebench.defaults import NIGHTLY_DAG_ID, NIGHTLY_SCHEDULE
from servebench.janitor import recently_reaped
from servebench.levers import lever_rows
from servebench.notify.charts import latency_throughput_chart, trend_chart
from servebench.notify.detectable import blind_lines
from servebench.notify.digest import render_digest
from servebench.notify.notifier import Notifier, announce
from servebench.notify.report import render_report, report_path
from servebench.results.store import ResultStore, encode_run_id
from servebench.trends.nightly import MOVES, load_nights
from servebench.trends.series import missing_nights

log = logging.getLogger(__name__)


def _draw_charts(store: ResultStore, run_id: str, run_date: str, cells, changes):
    """PNG charts beside the digest: one per regression or improvement, one latency-vs-
    throughput per target. Returns ({series_id or "target:<name>": path relative to the
    digest's folder}, [(title, filename, png)] for Slack's thread, {key: png} for the HTML
    report)."""
    folder = f"charts-{hashlib.sha256(run_id.encode()).hexdigest()[:10]}"
    charts: dict[str, str] = {}
    files: list[tuple[str, str, bytes]] = []
    pngs: dict[str, bytes] = {}

    def keep(key: str, name: str, title: str, png: bytes) -> None:
        rel = f"{folder}/{name}"
        store.put_bytes(f"digests/date={run_date}/{rel}", png)
        charts[key] = rel
        files.append((title, name, png))
        pngs[key] = png

    moved = changes[changes["kind"].isin(MOVES)]
    if not moved.empty:
        _, _, series = load_nights(store, run_id)
        for i, alert in enumerate(moved.to_dict("records")):
            points = series[series["series_id"] == alert["series_id"]]
            keep(alert["series_id"], f"change-{i}.png",
                 f"{alert['kind']}: {alert['series_id'].split('#')[0]}",
                 trend_chart(points, alert))
    for i, target in enumerate(dict.fromkeys(cells["target"])):
        png = latency_throughput_chart(cells, target)
        if png is not None:
            keep(f"target:{target}", f"target-{i}.png", f"{target}: latency vs throughput", png)
    return charts, files, pngs


@dataclass
class Night:
    """What the digest and the report of one committed run are made of."""

    run_id: str
    run_date: str
    cells: pd.DataFrame
    run: dict
    changes: pd.DataFrame  # the run's alerts, both ways (the ``changes`` table)
    charts: dict[str, str]
    files: list
    pngs: dict[str, bytes]
    levers: list[dict]
    missing: list  # the scheduled nights since the last one that have no committed run
    detectability: pd.DataFrame  # what each series judged can catch (trends.detectability)
    confirmations: pd.DataFrame  # the suspects re-measured the same morning (trends.confirm)
    host: list[str]  # what the host canary saw (servebench.canary)

    @classmethod
    def load(cls, store: ResultStore, run_id: str) -> Night:
        runs = store.read_table("runs", run_ids=[run_id]).to_pylist()
        if not runs:
            raise ValueError(f"run {run_id!r} is not committed in {store.uri}")
        run, run_date = runs[0], str(runs[0]["run_date"])
        cells = store.read_table("cells", run_ids=[run_id]).to_pandas()
        changes = store.read_table("changes", run_ids=[run_id]).to_pandas()
        charts, files, pngs = _draw_charts(store, run_id, run_date, cells, changes)
        requests = store.read_table("requests", run_ids=[run_id]).to_pandas()
        all_runs = store.read_table("runs").to_pandas()
        missing = (missing_nights(all_runs, run, NIGHTLY_SCHEDULE)
                   if run.get("dag_id") == NIGHTLY_DAG_ID else [])  # only it has a schedule
        host = canary_lines(store.read_table("units").to_pandas(), all_runs, run_id)
        # what each series can catch, and its noise: the lever intervals' launch noise
        detectability = store.read_table("detectability", run_ids=[run_id]).to_pandas()
        confirmations = store.read_table("confirmations", run_ids=[run_id]).to_pandas()
        return cls(run_id, run_date, cells, run, changes, charts, files, pngs,
                   lever_rows(cells, requests, detectability), missing, detectability,
                   confirmations, host)

    def put_report(self, store: ResultStore, airflow_url: str | None = None) -> str:
        """The HTML report, beside the results (its raised lines linking their pages in the
        Benchmarks view where ``airflow_url`` is known); where."""
        return store.put_text(
            report_path(self.run_date, self.run_id),
            render_report(self.cells, self.run, store.uri, self.changes, self.pngs,
                          self.levers, airflow_url=airflow_url,
                          detectability=self.detectability,
                          confirmations=self.confirmations, host=self.host))

    def tell(self, store: ResultStore, notifier: Notifier | None, *,
             airflow_url: str | None = None) -> str:
        """The digest (Markdown, with its charts) and the report kept beside the results,
        the digest announced; where it went (a failed announcement said, not raised)."""
        markdown = render_digest(self.cells, self.run, store.uri, self.changes,
                                 self.charts, self.levers, airflow_url=airflow_url,
                                 reaped=recently_reaped(store), missing=self.missing,
                                 blind=blind_lines(self.detectability),
                                 confirmations=self.confirmations, host=self.host)
        where = store.put_text(f"digests/date={self.run_date}/{encode_run_id(self.run_id)}.md",
                               markdown)
        log.info("report: %s", self.put_report(store, airflow_url))
        where += announce(notifier, "the digest", markdown, self.files)
        log.info("digest: %s", where)
        return where
