"""A cell already invalid for another reason (here: the stand-in server's word counts and
one-read answers; on a busy host, its client's lag) still says it has no quality number when
its golden set fails, beside what it said before. A VariantRunner run against a real (fake
OpenAI) server on loopback."""

import yaml
from servebench.bench import VariantRunner
from servebench.config import parse_sweep
from servebench.provision import get_provisioner
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.testing import FakeServerConfig, serve_in_thread

MODEL = "include/models/adder-3m"


def test_an_invalid_cell_adds_no_quality_number_to_its_reasons():
    def broken(*args, **kwargs):
        raise ConnectionError("server went away mid-eval")

    local = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    with serve_in_thread(FakeServerConfig(served_model=MODEL)) as srv:
        box = {"name": "box", "stack": "transformers", "golden_sets": ["addition"],
               "provision": {"kind": "static", "health_path": "/health"},
               "variants": [{"name": "running", "model": MODEL,
                             "endpoint": {"base_url": srv.url}}]}
        spec = parse_sweep({**local, "cross_stack": [], "targets": [box], "workloads": [
            {"kind": "fixed", "name": "fixed", "input_tokens": 24, "output_tokens": 4,
             "num_requests": 6}], "load": {**local["load"], "concurrency": [1]}}, "test")
        target, settings = spec.targets[0], get_settings()
        [cell] = VariantRunner(spec, target, target.variants[0], run_id="r", settings=settings,
                               provisioner=get_provisioner("static").attach("r", {}, settings),
                               run_golden_set=broken).run().cells
    reasons = cell["reason"].split("; ")
    assert cell["status"] == "invalid" and cell["n_ok"] == 6
    # what made it invalid while measured, then the golden set's failure
    assert len(reasons) >= 2 and not reasons[0].startswith("no quality number"), reasons
    assert reasons[-1] == ("no quality number: golden set addition failed: ConnectionError: "
                           "server went away mid-eval"), reasons
