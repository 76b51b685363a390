"""The names and defaults the DAG files show at parse time, defined once. This module imports
nothing but the standard library and the metric catalogue (a leaf of it): a DAG file may
import it at top level and stay light to parse."""

import os

from servebench.metric_catalogue import release_thresholds

DEFAULT_SWEEP = "include/sweeps/local.yaml"  # the local default (relative to the project root)
NIGHTLY_DAG_ID = "nightly_benchmark"  # the nightly history (trends, the Benchmarks view)
# 02:00 UTC: results and digest are ready before the team's morning (the digest names the
# scheduled nights that have no committed run)
NIGHTLY_SCHEDULE = "0 2 * * *"
# a night with no committed run this many hours after its scheduled time is announced as late
# (the hourly nightly_deadline DAG; 6: 02:00 -> 08:00 UTC, before the team's morning)
NIGHTLY_DEADLINE_HOURS = float(os.environ.get("SERVEBENCH_NIGHTLY_DEADLINE_HOURS", "6"))
BOARD_PATH = "/servebench"  # where the Benchmarks view is mounted in the Airflow API server
CLI_DAG_ID = "servebench-cli"  # what `servebench run` records as its dag_id (its own history)
# the release gate's default thresholds: metric -> the largest relative worsening allowed (each
# metric's ``release_threshold`` in the catalogue)
RELEASE_GATE_THRESHOLDS = release_thresholds()
# a person's answers to an inconclusive release gate (its person_decides task's options) and
# what each is recorded as (servebench.release.decision)
GATE_PERSON_OPTIONS = {"Approve": "approved", "Reject": "rejected"}
# hosts benchmarked at once by one nightly run (one bench task each; one unit at a time per
# host): each runs its load generator on a worker, so keep it within the workers' free cores
PARALLEL_HOSTS = 4
