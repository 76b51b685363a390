"""The metric catalogue is the one place a metric is defined: every consumer names only metrics
it holds, every trended metric is a column of its table, and the package itself imports
nothing but the standard library."""

import ast
import re
from pathlib import Path

from servebench.metric_catalogue import (
    BY_COLUMN,
    CATALOGUE,
    TRENDED,
    VIEWS,
    metric_label,
    release_thresholds,
    shown_in,
)

PACKAGE = Path(__file__).resolve().parents[2] / "include" / "servebench"
# a request latency's column: ttft_ms_p95, e2e_ms_mean
LATENCY_COLUMN = re.compile(r"^(ttft|tpot|itl|e2e)_ms_(mean|p\d+)$")
# calls and lookups whose string argument is a metric's column
METRIC_CALLS = {"metric_label"}
METRIC_MAPS = {"BY_COLUMN", "TRENDED"}


def test_the_consumers_name_only_catalogued_metrics():
    from servebench.defaults import RELEASE_GATE_THRESHOLDS
    from servebench.levers import ENGINE_COLUMNS, LEVERS
    from servebench.notify.digest import METRIC_COLUMNS
    from servebench.results.contract import FRACTIONS, THROUGHPUTS
    from servebench.trends.series import ACCURACY, METRICS, UNIT_METRICS
    from servebench.view.board import FAILING_CHARTS, TREND_METRICS
    from servebench.view.compare import COMPARED

    named = {
        "series": [m.column for m in (*METRICS, ACCURACY, *UNIT_METRICS)],
        "compare": [c for c, _ in COMPARED],
        "levers": [c for c, _ in LEVERS] + [c for c, *_ in ENGINE_COLUMNS],
        "board": [*TREND_METRICS, *FAILING_CHARTS],
        "gate": list(RELEASE_GATE_THRESHOLDS),
        "contract": [*THROUGHPUTS, *FRACTIONS],
        "views": [c for columns in VIEWS.values() for c in columns],
    }
    unknown = {where: sorted(set(cols) - set(BY_COLUMN)) for where, cols in named.items()}
    assert all(not cols for cols in unknown.values()), unknown
    # one label per metric, the catalogue's, wherever a consumer shows one
    labels = {header for header, *_ in METRIC_COLUMNS}
    assert {m.label for m in shown_in("digest")} <= labels
    assert all(label == metric_label(c) for c, label in (*COMPARED, *LEVERS))


def _metric_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants in a metric's position: a latency column's shape anywhere, the
    argument of a catalogue lookup, and what a row's ``metric`` is compared with."""
    found = []

    def text(node) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) \
            else None

    def is_metric_field(node) -> bool:  # row["metric"], row.get("metric")
        if isinstance(node, ast.Subscript):
            return text(node.slice) == "metric"
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and node.args and text(node.args[0]) == "metric")

    for node in ast.walk(tree):
        if text(node) and LATENCY_COLUMN.match(text(node)):
            found.append((node.lineno, text(node)))
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name in METRIC_CALLS and node.args and text(node.args[0]):
                found.append((node.lineno, text(node.args[0])))
        elif isinstance(node, ast.Subscript) and getattr(node.value, "id", None) in METRIC_MAPS:
            if text(node.slice):
                found.append((node.lineno, text(node.slice)))
        elif isinstance(node, ast.Compare) and is_metric_field(node.left):
            for right in node.comparators:
                values = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) \
                    else [right]
                found += [(node.lineno, text(v)) for v in values if text(v)]
    return found


def test_no_module_names_a_metric_the_catalogue_lacks():
    # "quality": a release gate's quality row, not a metric
    allowed = set(BY_COLUMN) | {"quality"}
    unknown = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, value in _metric_literals(ast.parse(path.read_text())):
            if value not in allowed:
                unknown.append(f"{path.relative_to(PACKAGE)}:{line}: {value!r}")
    assert unknown == []


def test_a_made_up_metric_is_caught_by_the_scan():
    tree = ast.parse("x = metric_label('ttft_ms_p42')\nif row['metric'] == 'joules': pass\n"
                     "COLS = ('itl_ms_p99', 'itl_ms_p77')")
    assert {v for _, v in _metric_literals(tree)} - set(BY_COLUMN) == \
        {"ttft_ms_p42", "joules", "itl_ms_p77"}


def test_every_trended_metric_is_a_column_of_its_table():
    from servebench.results.schema import TABLES

    for metric in TRENDED.values():
        schema = TABLES[metric.table]
        assert metric.column in schema.names, (metric.column, metric.table)
    for metric in CATALOGUE:  # and every catalogued one, trended or not
        assert metric.column in TABLES[metric.table].names, metric.column


def test_the_catalogue_is_consistent():
    assert len(BY_COLUMN) == len(CATALOGUE)  # one entry per column
    labels = [m.label for m in CATALOGUE]
    assert len(set(labels)) == len(labels), "two metrics share a label"
    assert all(m.trended for m in CATALOGUE if m.gated)  # the gate judges a series' metric
    assert release_thresholds() == {"ttft_ms_p95": 0.25, "tpot_ms_p50": 0.15,
                                    "output_throughput": 0.10, "goodput": 0.10}
    assert BY_COLUMN["output_throughput"].shown == ("digest", "compare", "levers", "board",
                                                     "finding", "suspect")
    assert BY_COLUMN["tpot_ms_p95"].worse_sign == 1.0 and BY_COLUMN["goodput"].worse_sign == -1.0


def test_the_catalogue_is_a_leaf():
    tree = ast.parse((PACKAGE / "metric_catalogue.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "dataclasses", "typing"}
