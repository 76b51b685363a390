"""A llama-server unit measured through the VariantRunner the DAG uses, on a worker whose RAPL
counter is a powercap tree drawing a known power: each cell stores the joules of its measured
window, per output token and per request, and what counted them, and the cells table holds
them; where the worker counts nothing, its cells say why and hold null, never zero.

(needs `make setup`)
"""

import datetime as dt
import os
import threading
import time

import pytest
from measured import assert_measured
from servebench import energy
from servebench.bench import VariantRunner
from servebench.config import parse_sweep
from servebench.provision.local import LocalProvisioner
from servebench.results.schema import rows_to_table
from servebench.settings import get_settings

pytestmark = pytest.mark.integration

WATTS = 35.0
VARIANT = {"name": "f16", "model": "build/models/adder-3m-f16.gguf", "quant": "f16",
           "max_num_seqs": 4, "max_model_len": 512, "threads": 1}


class Package:
    """One RAPL package domain whose ``energy_uj`` advances at ``WATTS`` on a thread, each
    value written whole (a reader never sees half a number)."""

    def __init__(self, root):
        self.domain = root / "intel-rapl:0"
        self.domain.mkdir(parents=True)
        (self.domain / "max_energy_range_uj").write_text("262143328850\n")
        self._write(0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _write(self, uj: int) -> None:
        tmp = self.domain / "energy_uj.tmp"
        tmp.write_text(f"{uj}\n")
        os.replace(tmp, self.domain / "energy_uj")

    def _run(self) -> None:
        t0 = time.time()
        while not self._stop.wait(0.002):
            self._write(int(WATTS * (time.time() - t0) * 1e6))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _cells(tmp_path, local_sweep, powercap):
    spec = parse_sweep(local_sweep(
        [{"name": "llama", "stack": "llama_cpp", "golden_sets": [], "baseline": "f16",
          "variants": [VARIANT]}],
        input_tokens=64, output_tokens=32, num_requests=48, concurrency=2), "test")
    settings = get_settings().model_copy(update={"powercap_root": powercap})
    target = spec.targets[0]
    provisioner = LocalProvisioner(tmp_path / "state", settings)
    return VariantRunner(spec, target, target.variants[0], run_id="t", settings=settings,
                         provisioner=provisioner).run().cells


def published(cells):
    """The rows as the publish step completes them (its run)."""
    return [{**cell, "run_id": "t", "run_date": dt.date(2026, 12, 6)} for cell in cells]


@pytest.fixture
def no_gpu(monkeypatch):
    """This worker's GPUs left out (the counter under test is RAPL's)."""
    monkeypatch.setattr(energy.NvmlCounter, "find",
                        classmethod(lambda cls: (None, "no NVIDIA GPU energy counter (test)")))


def test_each_cell_stores_the_energy_of_its_measured_window(tmp_path, local_sweep, no_gpu):
    with Package(tmp_path / "powercap"):
        cells = _cells(tmp_path, local_sweep, tmp_path / "powercap")
    assert_measured(cells)
    for cell in cells:
        window = cell["duration_s"]
        # the tree's writer is a thread of this process: on a busy host a value may land
        # tens of ms late at either end of the window
        assert cell["energy_j"] == pytest.approx(WATTS * window, rel=0.05,
                                                 abs=WATTS * 0.05), cell
        assert cell["energy_j_per_output_token"] == pytest.approx(
            cell["energy_j"] / cell["output_tokens_total"])
        assert cell["energy_j_per_request"] == pytest.approx(cell["energy_j"] / cell["n_ok"])
        assert cell["energy_source"].startswith("CPU packages (RAPL, intel-rapl:0)")
    assert rows_to_table("cells", published(cells)).column(
        "energy_j_per_output_token").null_count == 0


def test_a_worker_that_counts_nothing_stores_null_and_why(tmp_path, local_sweep, no_gpu):
    cells = _cells(tmp_path, local_sweep, tmp_path / "nothing")
    assert_measured(cells)
    for cell in cells:
        assert cell["energy_j"] is None and cell["energy_j_per_output_token"] is None
        assert cell["energy_source"] == (
            "not measured: no NVIDIA GPU energy counter (test); no RAPL package domain under "
            f"{tmp_path / 'nothing'}")
    assert rows_to_table("cells", published(cells)).column("energy_j").null_count == len(cells)
