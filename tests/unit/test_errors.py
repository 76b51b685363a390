"""One exception tree: every exception servebench defines is a ServebenchError, the kinds a
caller handles are defined in servebench.errors, and each keeps the builtin it always was."""

import importlib
import inspect
import pkgutil

import servebench
from servebench import errors
from servebench.errors import (
    ContractError,
    LaunchError,
    PlanError,
    PublishError,
    ServebenchError,
    SpecError,
)


def _servebench_exceptions() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(servebench.__path__, "servebench."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            # a private class (the fast client's stale-connection signal) never leaves its module
            if issubclass(obj, BaseException) and obj.__module__.startswith("servebench.") \
                    and not obj.__name__.startswith("_"):
                found.append(obj)
    return sorted(set(found), key=lambda c: f"{c.__module__}.{c.__name__}")


def test_every_exception_is_a_servebench_error_and_the_kinds_live_in_one_module():
    found = _servebench_exceptions()
    assert {c.__name__ for c in found} >= {"SpecError", "PlanError", "LaunchError",
                                           "ContractError", "TeardownError", "ScorerError"}
    for cls in found:
        assert issubclass(cls, ServebenchError), cls
        if cls.__module__ != errors.__name__:  # a module's own refinement of a kind
            assert ServebenchError not in cls.__bases__, cls


def test_each_kind_keeps_its_builtin_and_its_place():
    assert issubclass(PlanError, SpecError) and issubclass(SpecError, ValueError)
    assert issubclass(LaunchError, RuntimeError)
    assert issubclass(ContractError, PublishError) and issubclass(ContractError, ValueError)
    assert LaunchError("no", argv=["llama-server"]).argv == ["llama-server"]


def test_the_public_api_is_importable_from_the_package():
    from servebench import load_history, load_sweep, open_store, run_sweep

    assert callable(load_sweep) and callable(run_sweep) and callable(load_history)
    assert callable(open_store) and set(servebench.__all__) >= {"load_sweep", "run_sweep"}


def test_a_failed_client_process_raises_with_its_own_traceback():
    """A multi-process load whose client process fails: the parent's error carries the child's
    traceback (where it failed), not a relabelled one-liner."""
    import pytest
    from servebench.errors import LoadGeneratorError
    from servebench.loadgen.engine import LoadSpec
    from servebench.loadgen.multiproc import run_load_multiprocess

    with pytest.raises(LoadGeneratorError) as err:
        run_load_multiprocess("http://127.0.0.1:9", "/v1/chat/completions", [{}] * 4,
                              LoadSpec.closed(2), processes=2, cell_id="c", client="nope")
    message = str(err.value)
    assert "Traceback (most recent call last)" in message
    assert "client must be 'fast', 'httpx' or 'auto'" in message and "transport.py" in message
