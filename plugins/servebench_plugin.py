"""The Benchmarks view in the Airflow UI: the board of ``servebench.view.board`` (latest runs, what
the last nights raised, gate verdicts, trend charts), mounted in the API server at
``/servebench`` and shown under Browse -> Benchmarks. Wiring only: the page is built in
``include/servebench/view/board.py``."""

from typing import ClassVar

from airflow.plugins_manager import AirflowPlugin
from servebench.defaults import BOARD_PATH
from servebench.view.board import create_app


class ServebenchPlugin(AirflowPlugin):
    name = "servebench"
    fastapi_apps: ClassVar[list[dict]] = [
        {"app": create_app(), "url_prefix": BOARD_PATH, "name": "servebench benchmarks"}]
    external_views: ClassVar[list[dict]] = [
        {"name": "Benchmarks", "href": BOARD_PATH.lstrip("/") + "/", "url_route": "benchmarks",
         "destination": "nav", "category": "browse"}]
