"""The names and defaults the DAG files show at parse time, defined once. This module imports
nothing: a DAG file may import it at top level and stay light to parse."""

DEFAULT_SWEEP = "include/sweeps/local.yaml"  # the local default (relative to the project root)
NIGHTLY_DAG_ID = "nightly_benchmark"  # the nightly history (trends, the Benchmarks view)
# 02:00 UTC: results and digest are ready before the team's morning (the digest names the
# scheduled nights that have no committed run)
NIGHTLY_SCHEDULE = "0 2 * * *"
CLI_DAG_ID = "servebench-cli"  # what `servebench run` records as its dag_id (its own history)
# the release gate's default thresholds: metric -> the largest relative worsening allowed
RELEASE_GATE_THRESHOLDS = {"ttft_ms_p95": 0.25, "tpot_ms_p50": 0.15, "output_throughput": 0.10,
                           "goodput": 0.10}
