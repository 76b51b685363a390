"""vLLM's CPU build (`make vllm`), the engine itself: the command lines the adapter renders are
ones its own parser takes, and a vLLM killed mid-cell is reported as llama-server is. The
nightly DAG test measures its cells (exact lengths, prefix cache on and off, telemetry)."""

import json
import os
import signal
import subprocess
import threading
import time

import pytest
import yaml
from engine_variants import (
    VARIANTS,  # tests/engine_variants.py: what the facts test renders
)
from servebench.bench import VariantRunner
from servebench.config import parse_sweep
from servebench.loadgen.engine import run_load_sync
from servebench.provision.local import LocalProvisioner
from servebench.settings import PROJECT_ROOT, Settings, get_settings
from servebench.stacks import get_stack

pytestmark = pytest.mark.integration


PARSE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
for argv in json.load(sys.stdin):
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    validate_parsed_serve_args(args)
print("parsed")
"""


def test_every_rendered_command_line_parses_with_the_installed_vllm(tmp_path):
    """What ``checked_versions`` claims for 0.32: vLLM 0.32's own parser (the API server's,
    which ``vllm serve`` shares) takes every flag and value the adapter renders, for the GPU
    variants of the engine-facts test and the local sweep's CPU variants."""
    settings = get_settings()
    adapter = get_stack("vllm")
    argvs = []
    gpu = Settings(project_root=tmp_path, vllm_venv=tmp_path / "venv")
    for variant in VARIANTS["vllm"]:
        command = adapter.container_launch(variant, port=8000, settings=gpu).command
        argvs.append(["--model", *command])  # `vllm serve MODEL ...` as the API server's
    spec = parse_sweep(yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml")
                                      .read_text()), "local")
    for variant in spec.target("adder-vllm").variants:
        argv = adapter.local_launch(variant, host="127.0.0.1", port=8000,
                                    settings=settings).argv
        # threads: 1, on the first core this worker may use
        assert argv[:3] == ["taskset", "-c", str(min(os.sched_getaffinity(0)))]
        assert argv[4:6] == ["-m", "vllm.entrypoints.openai.api_server"]
        argvs.append(argv[6:])
    out = subprocess.run([str(settings.vllm_venv / "bin" / "python"), "-c", PARSE],
                         input=json.dumps(argvs), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "parsed" in out.stdout, out.stderr[-3000:]


def test_a_vllm_killed_mid_cell_fails_its_cells_with_the_signal(tmp_path, local_sweep):
    local = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    [target] = [t for t in local["targets"] if t["name"] == "adder-vllm"]
    data = local_sweep([{**target, "variants": target["variants"][:1]}], input_tokens=64,
                       output_tokens=32, num_requests=400, concurrency=1)
    data["load"]["concurrency"] = [1, 2]  # the second cell meets a dead port
    spec = parse_sweep(data, "test")
    target = spec.targets[0]

    def killed_under_load(*args, **kwargs):  # the first cell is measuring: the server dies
        pid = json.loads(next(tmp_path.glob("*.server.json")).read_text())["pid"]
        timer = threading.Timer(2.0, os.killpg, (pid, signal.SIGKILL))
        timer.start()
        try:
            return run_load_sync(*args, **kwargs)
        finally:
            timer.cancel()

    t0 = time.monotonic()
    result = VariantRunner(spec, target, target.variants[0], run_id="t",
                           settings=get_settings(), provisioner=LocalProvisioner(tmp_path),
                           run_load=killed_under_load).run()
    assert time.monotonic() - t0 < 600
    assert len(result.cells) == 2
    first, second = result.cells
    assert first["status"] in ("failed", "invalid")
    assert "the server died during the cell: adder-vllm--f32 killed by SIGKILL (-9)" \
        in first["reason"]
    assert second["status"] == "failed"  # never run against the dead port
    assert second["reason"].startswith("the server had died: adder-vllm--f32 killed by SIGKILL")
    assert result.evals == [] and all(c.get("accuracy") is None for c in result.cells)
    assert not list(tmp_path.glob("*.server.json"))
    # the engine's own processes (API server, engine core) went with it: one process group
    argv = json.loads(first["launch_args"])
    port = argv[argv.index("--port") + 1]
    left = subprocess.run(["pgrep", "-f", "--", f"--port {port}"], capture_output=True)
    assert left.stdout == b"", left.stdout
