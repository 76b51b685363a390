"""Smoke test: does each launched variant of a sweep serve at all? Seconds, not a benchmark.

Each variant is launched exactly as the benchmark launches it (the adapter's command, the
local provisioner), sent ``max_num_seqs`` concurrent chat requests of ``SMOKE_TOKENS`` forced
tokens with the sweep's sampling -- a multi-token prompt and a full batch of decodes, so the
batched (M > 1) matmul kernels run, which is where llama.cpp's AMX tiles crashed while single
requests went through -- and stopped. A server that dies says how (``killed by SIGSEGV``)
and which model file it was serving. ``make models`` runs this over the local sweep, so a
crashing binary/model pair is a build error, not a night of failed cells.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from servebench.config import SweepSpec, TargetSpec, VariantSpec
from servebench.errors import LaunchError, QuantizeError
from servebench.provision.local import LocalProvisioner
from servebench.quantize.inputs import checkpoint_for
from servebench.quantize.make import make_variant
from servebench.settings import Settings
from servebench.stacks import get_stack

log = logging.getLogger(__name__)

SMOKE_TOKENS = 8
_FINISHED = re.compile(r'"finish_reason"\s*:\s*"')
SMOKE_PROMPT = "Add the numbers. 12+34=46. 27+58=85. 61+19=80. 45+36="


@dataclass(frozen=True)
class SmokeResult:
    target: str
    variant: str
    model: str
    problem: str | None  # None: served every request
    resent: int = 0  # requests closed unanswered, answered when sent again

    @property
    def ok(self) -> bool:
        return self.problem is None

    def line(self) -> str:
        status = "serves" if self.ok else f"FAILED: {self.problem}"
        if self.resent:
            status += (f" ({self.resent} request(s) closed without an answer, answered when "
                       "sent again)")
        return f"{self.target}/{self.variant} ({self.model}): {status}"


def smoke_sweep(spec: SweepSpec, settings: Settings, state_dir: Path, *,
                stacks: set[str] | None = None) -> list[SmokeResult]:
    """Smoke every launchable variant of ``spec`` (of ``stacks`` only, when given)."""
    provisioner = LocalProvisioner(state_dir, settings)
    results = []
    for target in spec.targets:
        if stacks and target.stack not in stacks:
            continue
        for variant in target.variants:
            if variant.recipe is not None and target.provision_kind == LocalProvisioner.kind:
                # launched as the benchmark launches it: the recipe's checkpoint, made once
                variant = variant.launching(checkpoint_for(spec, variant, settings))
                try:
                    make_variant(spec, variant, settings)
                except QuantizeError as exc:
                    results.append(SmokeResult(target.name, variant.name, variant.base_model,
                                               f"its recipe failed: {exc}"))
                    continue
            result = smoke_variant(spec, target, variant, settings, provisioner)
            if result is not None:
                log.info("smoke %s", result.line())
                results.append(result)
    return results


def smoke_variant(spec: SweepSpec, target: TargetSpec, variant: VariantSpec,
                  settings: Settings, provisioner: LocalProvisioner) -> SmokeResult | None:
    """Launch, load, stop one variant; None for a target that is not launched here."""
    if target.provision_kind != LocalProvisioner.kind:
        return None
    adapter = get_stack(target.stack)

    def result(problem: str | None) -> SmokeResult:
        return SmokeResult(target.name, variant.name, variant.model, problem)

    problems = [*provisioner.check(target, variant, adapter, settings),
                *provisioner.refusals(target, variant, adapter, settings)]
    if problems:
        return result("; ".join(problems))
    try:  # launched exactly as the benchmark launches it
        server = provisioner.launch(f"smoke-{target.name}--{variant.name}", target, variant,
                                    adapter)
    except LaunchError as exc:
        return result(f"launch failed: {exc}")
    try:
        body = adapter.chat_body(
            served_model=server.served_model,
            messages=[{"role": "user", "content": SMOKE_PROMPT}],
            sampling=spec.sampling, max_tokens=SMOKE_TOKENS,
            force_length=adapter.forces_length(variant), variant=variant,
        )
        url = server.base_url + server.chat_path
        with httpx.Client(timeout=spec.load.request_timeout_s) as client, \
                ThreadPoolExecutor(variant.max_num_seqs) as pool:
            answers = list(pool.map(lambda _: _post(client, url, body),
                                    range(variant.max_num_seqs)))
        died = provisioner.exited(server)
        if died:
            return result(died)
        failures = [problem for problem, _ in answers if problem]
        resent = sum(again for _, again in answers)
        if failures:
            return result(f"{len(failures)}/{len(answers)} requests failed: {failures[0]}")
        return dataclasses.replace(result(None), resent=resent)
    finally:
        provisioner.stop(server)


def _post(client: httpx.Client, url: str, body: dict) -> tuple[str | None, bool]:
    """One request, read to the end of its stream: the problem or None, and whether it was
    sent twice.

    A request whose connection the server closes without a byte of answer is sent once more:
    llama-server (0.3.36) now and then drops one of a batch of concurrent requests so, about
    one smoke in fifteen with the 2 ms answers of the local draft model, allotting it a task
    it never runs; the same request answers when sent again. A server that has died fails
    the second try too."""
    try:
        response = client.post(url, json=body)
    except httpx.RemoteProtocolError as exc:
        log.info("%s closed without an answer (%s): sending it again", url, exc)
        try:
            return _problem(client.post(url, json=body)), True
        except httpx.HTTPError as again:
            return f"{type(again).__name__}: {again}", True
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}", False
    return _problem(response), False


def _problem(response: httpx.Response) -> str | None:
    """What is wrong with a streamed answer, or None."""
    if response.status_code != 200:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    if "[DONE]" not in response.text and not _FINISHED.search(response.text):
        return f"stream ended without [DONE] or a finish_reason: {response.text[-200:]!r}"
    return None
