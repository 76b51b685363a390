"""Versioned Arrow schemas for the result tables, and row -> table conversion.

Tables
  runs      one row per DAG run (provenance + counts)
  cells     one row per target x variant x workload x load point, failed/invalid cells included
  requests  one row per request sent (raw timestamps, so any metric can be recomputed later)
  evals     one row per golden-set item per target/variant
  changes   one row per alert the night raised (servebench.trends): regressions and
            improvements found in the history, cells newly failing, quality-gate failures;
            written by the DAG's detect task after the run is published (a store written
            before this name keeps them as ``regressions``, read as ``changes``: FORMER_NAMES)
  detectability  one row per series the night judged: its noise and the smallest worse
            step it catches within three nights (servebench.trends.detectability); written
            with changes
  units     one row per (target, variant) run: where, and its wall time per phase
  hosts     one row per instance the run paid for: launch to terminate, price, cost
  reaped    one row per instance the instance_janitor DAG terminated (run_id: the run that
            launched it; run_date: the day it was reaped); a log kept beside the runs, not
            part of any run's commit

Every table carries an int ``schema_version`` column (filled automatically) and the schema version
in its metadata. Bump SCHEMA_VERSION when a column changes meaning or type; adding a nullable
column is backwards compatible (readers fill it with null for older files).

Conventions: timestamps are ``timestamp[us, UTC]`` (naive datetimes are taken as UTC); raw request
times are float64 epoch seconds (what the load generator measures); ``run_date`` is date32.
Nullable unless listed in REQUIRED.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

from servebench.errors import SchemaError
from servebench.metric_catalogue import LATENCIES, LATENCY_STATS

SCHEMA_VERSION = 1

CELL_STATUSES = ("ok", "invalid", "failed")
# a cell's quality-gate verdict (evals.gate): null before the gate ran
GATE_VERDICT_VALUES = ("pass", "fail", "inconclusive", "not_judged", "baseline")
# a column per latency and statistic (``ttft_ms_p95``), as the metric catalogue lists them
LATENCY_METRICS = tuple(LATENCIES)

_TS = pa.timestamp("us", tz="UTC")
_STR = pa.string()
_F64 = pa.float64()
_I32 = pa.int32()
_I64 = pa.int64()


def _f(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_)


def _base() -> list[pa.Field]:
    return [_f("schema_version", _I32), _f("run_id", _STR), _f("run_date", pa.date32())]


def _series() -> list[pa.Field]:
    """A trend series' id (target/variant/workload/load_point/metric#<stack,model,hardware>)
    and its parts; workload and load point are null for a variant's series (accuracy, a
    gate, memory)."""
    return [_f("series_id", _STR), _f("target", _STR), _f("stack", _STR), _f("variant", _STR),
            _f("workload", _STR), _f("load_point", _STR), _f("metric", _STR)]


def _latency_fields() -> list[pa.Field]:
    return [_f(f"{m}_{s}", _F64) for m in LATENCY_METRICS for s in LATENCY_STATS]


RUNS = pa.schema(
    _base()
    + [
        _f("logical_date", _TS),
        _f("dag_id", _STR),
        # a night of its DAG's series (trends.series.counts_as_night): false for an ad-hoc
        # trigger, judged against the nights but never one of them; null (older runs) counts
        _f("nightly", pa.bool_()),
        _f("sweep_name", _STR),
        _f("sweep_file", _STR),
        _f("sweep_hash", _STR),
        _f("prompt_seed", _I64),  # the prompts' text (workloads.prompt_key), to reproduce it
        _f("sampling_hash", _STR),
        _f("sampling_json", _STR),
        _f("suite_git_sha", _STR),
        _f("hardware", _STR),
        _f("started_at", _TS),
        _f("finished_at", _TS),
        _f("n_cells", _I64),
        _f("n_ok", _I64),
        _f("n_invalid", _I64),
        _f("n_failed", _I64),
        _f("spec_json", _STR),
        # what the run paid for and what it measured (see ``units`` and ``hosts``)
        _f("acquire_s", _F64),  # the setup task: instances launched and up
        _f("load_s", _F64),  # the units' phases, summed (per unit: the units table)
        _f("warmup_s", _F64),
        _f("golden_s", _F64),
        _f("stop_s", _F64),
        _f("teardown_s", _F64),  # the teardown task
        _f("paid_s", _F64),  # instance-seconds billed (per-unit server time where no instance)
        _f("measure_s", _F64),  # seconds inside measured windows, all cells
        _f("sweep_efficiency", _F64),  # measure_s / paid_s
        _f("paid_usd", _F64),
    ]
)

CELLS = pa.schema(
    _base()
    + [
        _f("cell_id", _STR),
        _f("target", _STR),
        _f("stack", _STR),
        _f("variant", _STR),
        _f("model", _STR),  # the checkpoint the spec names (a recipe variant's base)
        _f("quant", _STR),
        # a recipe variant's: the hash of what made its checkpoint (servebench.quantize)
        _f("recipe_hash", _STR),
        _f("workload", _STR),
        _f("load_point", _STR),  # c4 (closed loop, 4 workers) or r20 (open loop, 20 req/s)
        _f("load_mode", _STR),  # a sweep kind's name: loadgen.modes.SWEEP_MODES
        _f("length_control", _STR),  # exact | natural (bench.rows.length_control; null: exact)
        _f("concurrency", _I32),  # closed: workers; open: in-flight cap (null: none)
        _f("request_rate", _F64),  # open loop: requests/s
        _f("arrival", _STR),  # open loop: poisson | gamma | constant
        # an slo cell's (capacity.py): the most load that held the SLOs (req/s for a rate
        # search, workers for a concurrency one), the least above it that did not (null:
        # the search's high held), every probe as [{load, held, why}]
        _f("slo_search_over", _STR),  # rate | concurrency
        _f("max_load_within_slo", _F64),
        _f("max_load_failed_at", _F64),
        _f("slo_probes_json", _STR),
        _f("status", _STR),
        _f("reason", _STR),
        _f("n_requests", _I64),
        _f("n_ok", _I64),
        _f("n_errors", _I64),
        _f("error_rate", _F64),
        _f("window_start", _F64),  # measured window, epoch seconds
        _f("window_end", _F64),
        _f("duration_s", _F64),
        _f("request_throughput", _F64),
        _f("output_throughput", _F64),
        _f("total_throughput", _F64),
        _f("goodput", _F64),
        _f("n_good", _I64),  # requests that met every SLO below (goodput's numerator)
        _f("slo_ttft_ms", _F64),
        _f("slo_tpot_ms", _F64),
        _f("slo_e2e_ms", _F64),
        _f("output_tokens_requested", _I32),
        _f("output_tokens_mean", _F64),
        _f("output_tokens_total", _I64),
        _f("prompt_tokens_mean", _F64),
    ]
    + _latency_fields()
    + [
        _f("accuracy", _F64),
        _f("golden_set", _STR),
        _f("accuracy_ci_low", _F64),  # Wilson 95%
        _f("accuracy_ci_high", _F64),
        _f("gate_baseline", _STR),  # the variant this one was gated against
        _f("gate_verdict", _STR),  # GATE_VERDICT_VALUES; not_judged: no golden set
        _f("gate_reason", _STR),
        _f("gate_p_value", _F64),  # exact McNemar on the flipped items
        _f("gate_relative", _F64),  # accuracy / baseline accuracy
        _f("gate_flipped_ids", pa.list_(_STR)),  # items right on the baseline, wrong here
        _f("cross_stack_group", _STR),  # same model and precision on other stacks
        _f("cross_stack_verdict", _STR),  # consistent | differs | inconclusive
        _f("cross_stack_reason", _STR),
        _f("cross_stack_agreement", _F64),  # share of answers equal to the group's majority
        _f("cross_stack_differing_ids", pa.list_(_STR)),
        _f("engine", _STR),
        _f("engine_version", _STR),
        _f("engine_notes", _STR),  # the stack's known limits; a version outside its checked range
        _f("launch_args", _STR),
        _f("image", _STR),  # the container it ran in: repo@sha256:... where the host said
        _f("host", _STR),  # the machine that served it, where provisioned (instance, address)
        # its GPUs as the serving host reports them: ``1x NVIDIA L4 (driver 550.54.15, CUDA
        # 12.4, max SM 2040 MHz, MIG Disabled)`` (nvidia-smi there, or the node's GPU labels)
        _f("gpu", _STR),
        _f("model_file_sha256", _STR),
        # the suite files that built, drove and timed the cell (provenance.measuring_code)
        _f("measuring_code", _STR),
        _f("hardware", _STR),
        _f("sampling_hash", _STR),
        _f("price_per_hour", _F64),
        _f("cost_per_1m_output_tokens", _F64),
        _f("cost_per_1k_successes", _F64),
        # the same from what the run really paid: the target's paid time (launch to
        # terminate, load and golden set and idle included) spread over its measured seconds
        _f("paid_cost_per_1m_output_tokens", _F64),
        _f("paid_cost_per_1k_successes", _F64),
        _f("prefix_cache_hit_rate", _F64),  # over every request the cell sent, warm-up included
        _f("prefix_cache_expected", _F64),  # the share its workload implies (metrics.py)
        _f("prompt_key", _STR),  # what its prompts were drawn from (workloads.prompt_key)
        _f("server_metrics_json", _STR),  # Prometheus deltas over the cell
        # the engine's scheduler while the cell ran (telemetry.engine_telemetry): gauges
        # sampled over the measured window, counters over the cell
        _f("kv_cache_usage_peak", _F64),  # share of the KV cache in use, 0..1
        _f("kv_cache_usage_mean", _F64),
        _f("requests_running_peak", _F64),
        _f("requests_running_mean", _F64),
        _f("requests_waiting_peak", _F64),  # requests queued for a slot
        _f("requests_waiting_mean", _F64),
        _f("preemptions", _F64),
        # speculative decoding, from the engine's counters (telemetry.speculation)
        _f("spec_draft_tokens", _F64),
        _f("spec_accepted_tokens", _F64),
        _f("spec_acceptance_rate", _F64),  # accepted / proposed draft tokens
        _f("spec_acceptance_length", _F64),  # 1 + accepted / verification steps
        _f("telemetry_samples", _I32),
        # its unit's memory, the same in each of the unit's cells (bench.memory; the units
        # row says where each figure came from, or why it is null)
        _f("weights_bytes", _I64),
        _f("kv_cache_tokens", _I64),
        _f("peak_rss_bytes", _I64),
        _f("peak_device_memory_bytes", _I64),
        # the host's energy over the measured window (servebench.energy): null where nothing
        # counted it, energy_source then saying why; what counted it where something did
        _f("energy_j", _F64),
        _f("energy_j_per_output_token", _F64),
        _f("energy_j_per_request", _F64),  # per successful request
        _f("energy_source", _STR),
        _f("client_send_lag_ms_p99", _F64),  # the client's own lag: proof it kept up
        _f("client_loop_lag_ms_p99", _F64),
        _f("client_loop_lag_ms_p95", _F64),  # the statistic client_saturated decides on
    ]
)

REQUESTS = pa.schema(
    _base()
    + [
        _f("cell_id", _STR),
        _f("request_id", _STR),
        _f("warmup", pa.bool_()),
        _f("scheduled_at", _F64),
        _f("sent_at", _F64),
        _f("first_chunk_at", _F64),
        _f("done_at", _F64),
        _f("chunk_times", pa.list_(_F64)),
        _f("chunk_tokens", pa.list_(_I32)),
        _f("prompt_tokens_requested", _I32),
        _f("prompt_tokens", _I32),
        _f("prompt_tokens_cached", _I32),  # usage.prompt_tokens_details.cached_tokens
        _f("output_tokens_requested", _I32),
        _f("output_tokens", _I32),
        _f("finish_reason", _STR),
        _f("http_status", _I32),
        _f("error", _STR),
        _f("served_model", _STR),
        _f("ok", pa.bool_()),  # HTTP 2xx and no transport/stream error
        _f("output_text", _STR),  # what was generated, kept so answers can be audited
    ]
)

EVALS = pa.schema(
    _base()
    + [
        _f("target", _STR),
        _f("stack", _STR),
        _f("variant", _STR),
        _f("golden_set", _STR),
        _f("item_id", _STR),
        _f("reference", _STR),
        _f("answer", _STR),
        _f("score", _F64),
        _f("correct", pa.bool_()),
        _f("latency_ms", _F64),
        _f("finish_reason", _STR),
        _f("error", _STR),
        _f("score_error", _STR),  # the scorer could not judge (e.g. the judge was down)
    ]
)

# unconfirmed: a change the same morning's relaunches did not reproduce (trends.confirm): kept,
# never posted as a regression
CHANGE_KINDS = ("regression", "improvement", "newly_failing", "gate_failure", "host_change",
                "unconfirmed")

CHANGES = pa.schema(
    _base()
    + [
        *_series(),
        _f("kind", _STR),  # one of CHANGE_KINDS
        _f("before", _F64),  # the level before the change (median)
        _f("after", _F64),  # the mean since the change
        _f("change_pct", _F64),
        _f("z", _F64),  # standard errors of the move (drastic: sigmas of the one night)
        _f("drastic", pa.bool_()),
        _f("change_date", pa.date32()),  # the first night of the new level
        _f("change_run_id", _STR),
        _f("nights_since", _I32),  # nights at the new level, this one included
        _f("cause", _STR),  # what the provenance says changed at the change night
        _f("finding", _STR),  # alerts sharing a change night and a cause: one finding
        _f("reason", _STR),  # newly failing / gate failure: why
        # what the same morning's relaunches said of it (trends.confirm; null: not re-measured)
        _f("confirmation", _STR),
        # a suspect made by its ratio to this variant the same night: ``before`` is the level
        # that variant's night implied (null: its own nights' level)
        _f("against", _STR),
    ]
)

# the same morning's re-measurement of a night's suspects (trends.confirm, bench.confirm): one
# row per suspect series, re-measured or not, with its verdict
CONFIRMATIONS = pa.schema(
    _base()
    + [
        *_series(),
        _f("source", _STR),  # alert (raised tonight) | suspect (worse beyond its noise)
        _f("alert_kind", _STR),  # the alert's kind, before the verdict
        _f("reference", _STR),  # the variant relaunched beside it (null: its own nights)
        # the variant whose same night made it a suspect (its ratio to it; null: its own)
        _f("against", _STR),
        _f("launches", _I32),  # relaunches asked of each side
        _f("pairs", _I32),  # relaunches (pairs) that measured the metric
        _f("level", _F64),  # the baseline's level
        _f("value", _F64),  # tonight's value
        _f("night_change_pct", _F64),  # tonight against the baseline
        _f("change_pct", _F64),  # the relaunches' change (against the reference's ratio)
        _f("change_low_pct", _F64),  # its 95% interval
        _f("change_high_pct", _F64),
        _f("level_change_pct", _F64),  # the suspect's relaunches against its nights
        _f("reference_change_pct", _F64),  # the reference's relaunches against its nights
        _f("verdict", _STR),  # one of trends.confirm.VERDICTS
        _f("words", _STR),  # the verdict as the digest says it
        _f("seconds", _F64),  # the session's (its variant's relaunches) wall time
        _f("values_json", _STR),  # each relaunch's value and host canary, suspect and reference
    ]
)

# what each series the night judged can catch (servebench.trends.detectability), beside the
# alerts: one row per series with a value that night
DETECTABILITY = pa.schema(
    _base()
    + [
        *_series(),
        _f("nights", _I32),  # baseline nights it is judged against (after a restart: since)
        _f("level", _F64),  # their median
        _f("noise", _F64),  # robust per-night sigma (binomial for accuracy)
        _f("autocorr", _F64),  # lag-1 autocorrelation of the nights
        _f("binomial_n", _I32),  # accuracy: the golden set's item count
        # the smallest worse step (relative: 0.06 = 6%) the detector raises within three
        # nights at least 90% of the time; inf: none; null: too few nights to judge yet
        _f("detectable", _F64),
        _f("goal", _F64),  # the sweep's trends.detect_at_least for it, relative
    ]
)

REAPED = pa.schema(
    _base()
    + [
        _f("reaped_at", _TS),
        _f("instance_id", _STR),
        _f("instance_type", _STR),
        _f("region", _STR),
        _f("dag_id", _STR),
        _f("target", _STR),
        _f("launched_at", _TS),
        _f("hours_up", _F64),  # launch to reap: what it cost, with the type's price
        _f("reason", _STR),  # expired at ... / its DAG run ... is no longer running
    ]
)

UNITS = pa.schema(
    _base()
    + [
        _f("unit_id", _STR),  # target--variant
        _f("target", _STR),
        _f("variant", _STR),
        _f("provision", _STR),  # local | static | ec2 ...
        _f("host", _STR),
        _f("started_at", _TS),  # launch asked
        _f("ended_at", _TS),  # server stopped
        _f("load_s", _F64),  # launch to healthy: image pull, weight load
        _f("warmup_s", _F64),  # cells' wall time outside their measured windows
        _f("measure_s", _F64),  # inside measured windows
        _f("golden_s", _F64),
        _f("stop_s", _F64),
        _f("golden_failures", _STR),  # golden sets that failed on the variant, with why
        # what it held (servebench.memory): each figure with where it came from, or, where
        # it is null, why
        _f("weights_bytes", _I64),  # the engine's report, else the model files on disk
        _f("weights_source", _STR),
        _f("kv_cache_tokens", _I64),  # the KV cache's capacity as the engine reports it
        _f("kv_cache_source", _STR),
        _f("peak_rss_bytes", _I64),  # launch to stop: the process tree's resident memory
        _f("peak_rss_source", _STR),
        _f("peak_device_memory_bytes", _I64),  # GPU memory in use at its peak
        _f("peak_device_memory_source", _STR),
        # the host canary (servebench.canary) before the launch and after the stop: each
        # part's median time, null where not measured, with where it ran or why not
        _f("canary_before_cpu_ms", _F64),
        _f("canary_before_memory_ms", _F64),
        _f("canary_after_cpu_ms", _F64),
        _f("canary_after_memory_ms", _F64),
        _f("canary_source", _STR),
    ]
)

HOSTS = pa.schema(
    _base()
    + [
        _f("host", _STR),  # instance id
        _f("target", _STR),
        _f("provision", _STR),
        _f("instance_type", _STR),
        _f("launched_at", _TS),
        _f("ended_at", _TS),  # terminated (null: still running at publish)
        _f("billed_s", _F64),  # ended - launched, at least EC2's 60 s minimum
        _f("price_per_hour", _F64),
        _f("cost_usd", _F64),
    ]
)

# the release gate's verdicts, one row per (cell, metric) and one for quality (metric
# ``quality``), kept as a log table (``gate_verdicts/date=.../<run>.parquet``, in no run);
# an inconclusive one's rows get the person's decision once they gave it (gate_decision)
GATE_VERDICTS = pa.schema(
    _base()
    + [
        _f("decided_at", _TS),
        _f("target", _STR),
        _f("baseline", _STR),
        _f("candidate", _STR),
        _f("repetitions", _I32),
        _f("workload", _STR),  # null on the quality row
        _f("load_point", _STR),
        _f("metric", _STR),  # a gated metric's column name, or "quality" (the golden set)
        _f("threshold", _F64),  # the largest relative worsening allowed
        _f("pairs", _I32),  # valid (baseline, candidate) repetition pairs
        _f("worse_mean", _F64),  # mean relative change, positive = worse
        _f("worse_ci_low", _F64),  # its 95% t-interval
        _f("worse_ci_high", _F64),
        _f("verdict", _STR),  # pass | fail | inconclusive; quality also not_judged
        _f("reason", _STR),
        _f("overall", _STR),  # the gate's: pass | fail | inconclusive
        _f("outcome", _STR),  # ship | blocked | needs_person
        # needs_person: what the person decided, in the same rows (null: not asked, or not
        # yet): approved | rejected | unanswered (nobody within the response timeout)
        _f("person_decision", _STR),
        _f("person_name", _STR),  # who: the Airflow user who answered
        _f("person_id", _STR),
        _f("person_decided_at", _TS),  # when they answered (unanswered: when time ran out)
        _f("person_comment", _STR),  # what they wrote in the form's comment, if anything
    ]
)

# Columns that must be present and non-null in every row.
REQUIRED: dict[str, tuple[str, ...]] = {
    "runs": ("schema_version", "run_id", "run_date"),
    "cells": ("schema_version", "run_id", "run_date", "cell_id", "target", "stack", "variant",
              "workload", "status"),
    "requests": ("schema_version", "run_id", "run_date", "cell_id", "request_id", "warmup"),
    "evals": ("schema_version", "run_id", "run_date", "target", "variant", "golden_set", "item_id"),
    "changes": ("schema_version", "run_id", "run_date", "series_id", "target", "metric", "kind"),
    "detectability": ("schema_version", "run_id", "run_date", "series_id", "metric"),
    "confirmations": ("schema_version", "run_id", "run_date", "series_id", "metric",
                      "verdict"),
    "reaped": ("schema_version", "run_date", "reaped_at", "instance_id", "reason"),
    "units": ("schema_version", "run_id", "run_date", "unit_id", "target", "variant"),
    "hosts": ("schema_version", "run_id", "run_date", "host", "target"),
    "gate_verdicts": ("schema_version", "run_id", "run_date", "target", "candidate", "metric",
                      "verdict", "overall", "outcome"),
}


def _finish(name: str, schema: pa.Schema) -> pa.Schema:
    required = set(REQUIRED[name])
    fields = [f.with_nullable(f.name not in required) for f in schema]
    meta = {"servebench.table": name, "servebench.schema_version": str(SCHEMA_VERSION)}
    return pa.schema(fields, metadata=meta)


TABLES: dict[str, pa.Schema] = {
    name: _finish(name, s)
    for name, s in {"runs": RUNS, "cells": CELLS, "requests": REQUESTS, "evals": EVALS,
                    "changes": CHANGES, "detectability": DETECTABILITY,
                    "confirmations": CONFIRMATIONS,
                    "reaped": REAPED, "units": UNITS,
                    "hosts": HOSTS, "gate_verdicts": GATE_VERDICTS}.items()
}
RUNS, CELLS, REQUESTS, EVALS, CHANGES, REAPED, UNITS, HOSTS = (
    TABLES[n] for n in ("runs", "cells", "requests", "evals", "changes", "reaped", "units",
                        "hosts"))
# a table's names in stores written before it was renamed: read with it, never written
FORMER_NAMES: dict[str, tuple[str, ...]] = {"changes": ("regressions",)}
# what the publish of a run writes (and its contract checks); the rest is derived afterwards
PUBLISHED_TABLES = ("runs", "cells", "requests", "evals")


def schema_for(table_name: str) -> pa.Schema:
    try:
        return TABLES[table_name]
    except KeyError:
        raise SchemaError(f"unknown table {table_name!r}; known: {sorted(TABLES)}") from None


def _coerce(value: Any, type_: pa.DataType) -> Any:
    """Accept ISO strings for date/timestamp columns (XCom round-trips turn dates into strings)."""
    if isinstance(value, str):
        if pa.types.is_date32(type_):
            return dt.date.fromisoformat(value[:10])
        if pa.types.is_timestamp(type_):
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if pa.types.is_date32(type_) and isinstance(value, dt.datetime):
        return value.date()
    return value


def _check_cells(rows: list[dict]) -> None:
    for i, r in enumerate(rows):
        status = r.get("status")
        if status not in CELL_STATUSES:
            raise SchemaError(f"cells row {i}: status {status!r} not in {CELL_STATUSES}")
        if status != "ok" and not r.get("reason"):
            raise SchemaError(f"cells row {i} ({r.get('cell_id')}): status {status!r} needs a reason")
        if status == "ok" and r.get("reason") is not None:
            raise SchemaError(f"cells row {i} ({r.get('cell_id')}): reason must be null when ok")
        verdict = r.get("gate_verdict")
        if verdict is not None and verdict not in GATE_VERDICT_VALUES:
            raise SchemaError(f"cells row {i} ({r.get('cell_id')}): gate_verdict {verdict!r} "
                              f"not in {GATE_VERDICT_VALUES}")


def rows_to_table(table_name: str, rows: list[dict]) -> pa.Table:
    """Build a table of ``table_name`` from dict rows.

    Missing nullable columns become null, ``schema_version`` defaults to SCHEMA_VERSION; unknown
    columns, missing required values and values of the wrong type raise SchemaError.
    """
    schema = schema_for(table_name)
    known = set(schema.names)
    required = REQUIRED[table_name]
    out: list[dict] = []
    for i, row in enumerate(rows):
        unknown = sorted(set(row) - known)
        if unknown:
            raise SchemaError(
                f"{table_name} row {i}: unknown column(s) {unknown}; "
                f"add them to servebench.results.schema (and bump SCHEMA_VERSION if needed)"
            )
        r = {"schema_version": SCHEMA_VERSION, **row}
        missing = [c for c in required if r.get(c) is None]
        if missing:
            raise SchemaError(f"{table_name} row {i}: required column(s) {missing} missing or null")
        out.append({f.name: _coerce(r.get(f.name), f.type) for f in schema})
    if table_name == "cells":
        _check_cells(out)
    try:
        return pa.Table.from_pylist(out, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaError(f"{table_name}: a value does not fit the schema: {e}") from e


def empty_table(table_name: str) -> pa.Table:
    return schema_for(table_name).empty_table()


def conform(table_name: str, table: pa.Table) -> pa.Table:
    """Check a ready-made table against the schema (same columns, castable types) and cast it."""
    schema = schema_for(table_name)
    unknown = sorted(set(table.column_names) - set(schema.names))
    if unknown:
        raise SchemaError(f"{table_name}: unknown column(s) {unknown}")
    cols = []
    for f in schema:
        if f.name in table.column_names:
            cols.append(table.column(f.name).cast(f.type))
        elif f.name == "schema_version":
            cols.append(pa.array([SCHEMA_VERSION] * table.num_rows, f.type))
        elif not f.nullable:
            raise SchemaError(f"{table_name}: required column {f.name!r} missing")
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    try:
        return pa.Table.from_arrays(cols, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaError(f"{table_name}: {e}") from e
