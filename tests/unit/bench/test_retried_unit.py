"""A retried unit (the bench task's next try, against a server that outlived the first: a
static endpoint, a pod, an instance) sends prompts of its own, never the first try's, while
every other part of its cells' keys -- the run's seed, the workload, the load point -- stays
the same. Two VariantRunner runs of one unit against a real (fake OpenAI) server on loopback."""

import yaml
from servebench.bench import VariantRunner
from servebench.config import parse_sweep
from servebench.loadgen.engine import run_load_sync
from servebench.provision import get_provisioner
from servebench.settings import PROJECT_ROOT, get_settings
from servebench.testing import FakeServerConfig, serve_in_thread
from servebench.workloads import build_prompts

SEED = 77  # the plan's: every try of the run shares it
MODEL = "include/models/adder-3m"  # its tokenizer cuts the prompts


def _spec(base_url: str):
    """The local sweep's sampling and load, narrowed to one small fixed workload at two
    points, on a server someone else runs (static: it outlives the task's tries)."""
    local = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    box = {"name": "box", "stack": "transformers", "golden_sets": [],
           "provision": {"kind": "static", "health_path": "/health"},
           "variants": [{"name": "running", "model": MODEL,
                         "endpoint": {"base_url": base_url}}]}
    fixed = {"kind": "fixed", "name": "fixed", "input_tokens": 24, "output_tokens": 4,
             "num_requests": 6}
    return parse_sweep({**local, "workloads": [fixed], "cross_stack": [], "targets": [box],
                        "load": {**local["load"], "concurrency": [1, 2]}}, "test")


def _unit(base_url: str, try_number: int) -> tuple[list[dict], set[str]]:
    """One try of the unit: its cells, and the text of every prompt it sent."""
    sent: set[str] = set()

    def recording(*args, **kwargs):
        items = build_prompts(*args, **kwargs)
        sent.update(m["content"] for item in items for m in item.messages)
        return items

    spec = _spec(base_url)
    target = spec.targets[0]
    settings = get_settings()
    result = VariantRunner(spec, target, target.variants[0], run_id="r", settings=settings,
                           provisioner=get_provisioner("static").attach("r", {}, settings),
                           prompt_seed=SEED, try_number=try_number,
                           build_prompts=recording).run()
    return result.cells, sent


def test_a_retried_unit_sends_none_of_the_first_trys_prompts():
    with serve_in_thread(FakeServerConfig(served_model=MODEL)) as srv:
        first, first_sent = _unit(srv.url, 1)
        retry, retry_sent = _unit(srv.url, 2)
        again, again_sent = _unit(srv.url, 1)
    # every prompt was sent and answered (the stand-in's word counts and one-read answers
    # leave the cells invalid: not what is judged here)
    assert [c["n_ok"] for c in first + retry] == [6] * 4, [c["reason"] for c in first + retry]
    keys = {c["concurrency"]: c["prompt_key"] for c in first}
    # a first try's keys are the ones stored before tries were counted
    assert keys == {1: f"{SEED}:fixed:c1:r0", 2: f"{SEED}:fixed:c2:r0"}
    assert {c["concurrency"]: c["prompt_key"] for c in retry} == \
        {1: f"{SEED}:fixed:c1:r0:try2", 2: f"{SEED}:fixed:c2:r0:try2"}
    # 2 cells x (6 measured + 2 warm-up) prompts each try, none of them the first try's
    assert len(first_sent) == len(retry_sent) == 16
    assert not first_sent & retry_sent
    # the same try reproduces its prompts (a run can be replayed from its stored keys)
    assert again_sent == first_sent and [c["prompt_key"] for c in again] == \
        [c["prompt_key"] for c in first]


def test_an_auto_re_run_sends_a_warm_up_and_prompts_of_its_own():
    """A cell whose client fell behind is run again with more client processes (``auto``):
    the server has cached the first run's warm-up and measured prompts, so the re-run's, its
    warm-up's included, are drawn from keys of their own."""
    runs: list[list[str]] = []

    def rerunning(base_url, path, bodies, spec, *, rerun_bodies, **kwargs):
        runs.append([b["messages"][-1]["content"] for b in bodies])
        again = rerun_bodies(1)  # what run_scaled sends when it scales up
        runs.append([b["messages"][-1]["content"] for b in again])
        return run_load_sync(base_url, path, again, spec, **kwargs)

    with serve_in_thread(FakeServerConfig(served_model=MODEL)) as srv:
        spec = _spec(srv.url)
        target = spec.targets[0]
        settings = get_settings()
        result = VariantRunner(spec, target, target.variants[0], run_id="r", settings=settings,
                               provisioner=get_provisioner("static").attach("r", {}, settings),
                               prompt_seed=SEED, run_load=rerunning).run()
    first, again = runs[0], runs[1]
    warmup = spec.load.warmup_requests
    assert warmup and len(first) == len(again) == warmup + 6
    assert not set(first) & set(again)  # the warm-up too
    assert {c["n_ok"] for c in result.cells} == {6}
