"""A llama-server killed (SIGKILL) while its variant runs: nothing it measured after that is
stored as ok, the cells say how it died, the rest of the variant is not run against a dead
port, and the golden set gives no accuracy number. Real server, real signal (needs `make setup`).
"""

import json
import os
import signal
import threading
import time

import pytest
import yaml
from servebench.bench import VariantRunner
from servebench.config import parse_sweep
from servebench.evals.runner import run_golden_set
from servebench.loadgen.engine import run_load_sync
from servebench.provision.local import LocalProvisioner
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.workloads import build_prompts

pytestmark = pytest.mark.integration


def _spec():
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["workloads"] = [{"kind": "fixed", "name": "fixed", "input_tokens": 64,
                          "output_tokens": 32, "num_requests": 400}]
    data["load"]["concurrency"] = [1, 2]
    data["cross_stack"] = []
    data["targets"] = [{
        "name": "llama", "stack": "llama_cpp", "golden_sets": ["addition"],
        "variants": [{"name": "v", "model": "build/models/adder-3m-q8_0.gguf", "quant": "q8_0",
                      "max_num_seqs": 2, "max_model_len": 512, "threads": 1}],
    }]
    return parse_sweep(data, "test")


def _kill(state_dir) -> None:
    pid = json.loads(next(state_dir.glob("*.server.json")).read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)


def test_a_server_killed_mid_run_fails_its_cells_with_the_signal(tmp_path):
    spec = _spec()
    target = spec.targets[0]
    killers: list[threading.Timer] = []

    def killed_in_the_first_cell(*args, **kwargs):
        # the kill lands inside the first cell's load whatever the host's pace: 0.5 s into
        # its warm-up and 400 requests one at a time (seconds; longer on a slower host)
        if not killers:
            killers.append(threading.Timer(0.5, _kill, args=(tmp_path,)))
            killers[0].start()
        return run_load_sync(*args, **kwargs)

    runner = VariantRunner(spec, target, target.variants[0], run_id="t", settings=get_settings(),
                           provisioner=LocalProvisioner(tmp_path),
                           run_load=killed_in_the_first_cell)
    result = runner.run()
    killers[0].join(timeout=5)
    assert len(result.cells) == 2
    assert all(c["status"] != "ok" for c in result.cells), [c["status"] for c in result.cells]
    reasons = " | ".join(c["reason"] for c in result.cells)
    assert "llama--v killed by SIGKILL (-9)" in reasons and "log tail" not in reasons
    assert result.cells[1]["status"] == "failed"  # never run against the dead port
    assert "the server had died" in result.cells[1]["reason"]
    assert result.evals == [] and all(c.get("accuracy") is None for c in result.cells)
    assert not list(tmp_path.glob("*.server.json"))


def test_a_server_killed_while_its_workload_is_built_says_so(tmp_path):
    """The prompts are built with the server's own tokenizer: a server that dies then fails
    the build with a reset connection, and the cells say how the server died (seen in CI on
    a slow host, where the kill above landed before the first cell)."""
    spec = _spec()
    target = spec.targets[0]

    def killed_first(*args, **kwargs):
        _kill(tmp_path)  # no wait: the build meets the dying server
        return build_prompts(*args, **kwargs)

    result = VariantRunner(spec, target, target.variants[0], run_id="t",
                           settings=get_settings(), provisioner=LocalProvisioner(tmp_path),
                           build_prompts=killed_first).run()
    assert [c["status"] for c in result.cells] == ["failed", "failed"]
    assert all(c["reason"] == "the server had died: llama--v killed by SIGKILL (-9)"
               for c in result.cells), [c["reason"] for c in result.cells]
    assert result.evals == [] and not list(tmp_path.glob("*.server.json"))


def test_a_server_killed_during_the_golden_set_leaves_no_accuracy(tmp_path):
    data = _spec().model_dump(mode="json")
    data["workloads"][0]["num_requests"] = 8  # the perf cells end soon; the kill lands later
    data["load"]["concurrency"] = [2]
    spec = parse_sweep(data, "test")
    target = spec.targets[0]

    def killed_during(*args, **kwargs):  # the golden set starts: the server dies under it
        # killed as it starts (200 items take this model under a second: a timer could land
        # after the last answer), and gone before the first question
        _kill(tmp_path)
        time.sleep(0.5)
        return run_golden_set(*args, **kwargs)

    result = VariantRunner(spec, target, target.variants[0], run_id="t",
                           settings=get_settings(), provisioner=LocalProvisioner(tmp_path),
                           run_golden_set=killed_during).run()
    [cell] = result.cells
    # measured while the server lived, but without a quality number it is not comparable
    assert cell["n_ok"] == 8 and cell["status"] == "invalid"
    assert "the server died during the golden set" in cell["reason"]
    assert "killed by SIGKILL (-9)" in cell["reason"]
    assert cell.get("accuracy") is None and cell.get("golden_set") is None
    # the answers are kept as data, the ones the dead server could not give with their error
    assert result.evals and any(e["error"] for e in result.evals)
    assert not list(tmp_path.glob("*.server.json"))
