"""Bench tasks hand rows to publish through the store's scratch area."""

from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore

RUN = "manual__2026-11-30T09:00:00+00:00"


def _cells(unit: str, n: int):
    return rows_to_table("cells", [
        {"run_id": RUN, "run_date": "2026-11-30", "cell_id": f"{unit}/w/c{i}", "target": "t",
         "stack": "llama_cpp", "variant": unit, "workload": "w", "concurrency": i,
         "status": "ok"} for i in range(n)
    ])


def test_scratch_round_trip_replace_and_drop(tmp_path):
    store = ResultStore(str(tmp_path))
    store.write_scratch(RUN, "t--f16", "cells", _cells("f16", 2))
    store.write_scratch(RUN, "t--q8/0", "cells", _cells("q8", 3))  # odd unit names survive
    store.write_scratch(RUN, "t--f16", "cells", _cells("f16", 4))  # a retry replaces
    got = store.read_scratch(RUN)
    assert sorted(got) == ["t--f16", "t--q8/0"]
    assert got["t--f16"]["cells"].num_rows == 4
    assert got["t--q8/0"]["cells"].num_rows == 3
    # scratch is never visible to readers of the published tables
    assert store.read_table("cells").num_rows == 0
    store.drop_scratch(RUN)
    assert store.read_scratch(RUN) == {}


def test_put_text_and_find(tmp_path):
    store = ResultStore(str(tmp_path))
    uri = store.put_text("digests/date=2026-11-30/run.md", "# hi\n")
    assert store.find("digests") == [uri]
    assert store.find("nothing-here") == []
