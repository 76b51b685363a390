"""Test-wide environment: Airflow points at the project's own home, dags/ and no examples.

Set before anything imports Airflow. `make test` exports the same values; these defaults let
`pytest` run directly too (the integration DAG test needs `make airflow-db` once).
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("AIRFLOW_HOME", str(ROOT / ".airflow"))
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault(
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{ROOT / '.airflow' / 'airflow.db'}"
)
