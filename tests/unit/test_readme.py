"""README is what a newcomer reads first: it stays short, opens with the two commands, and its
layout names every module of the package under the line of its own folder."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "include" / "servebench"
README = (ROOT / "README.md").read_text()


def _layout_bullets() -> list[str]:
    layout = README.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return [b.replace("\n", " ") for b in re.split(r"\n(?=- )", layout) if b.startswith("- ")]


def _modules() -> list[Path]:
    return sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def test_it_opens_with_the_two_commands_and_stays_short():
    assert README.splitlines()[3:5] == [
        "make run    # build everything, run the nightly_benchmark DAG on this machine, print the summary",
        "make test   # the test suite (CI runs it through .ci/run); make proof: the multi-night proof",
    ]
    assert len(README.splitlines()) <= 160


def _unnamed(bullets: list[str], modules: list[Path]) -> list[str]:
    """The modules no layout bullet names: a top-level one as ``name.py`` anywhere, a
    sub-package's as ``name`` on the bullet that opens with its folder."""
    missing = []
    for module in modules:
        if len(module.parts) == 1:
            found = any(f"`{module.name}`" in b for b in bullets)
        else:
            folder = f"- `{module.parent.as_posix()}/`"
            found = any(b.startswith(folder) and f"`{module.stem}`" in b for b in bullets)
        if not found:
            missing.append(module.as_posix())
    return missing


def test_the_layout_names_every_module_of_the_package_under_its_folder():
    assert len(_modules()) > 100  # the package was found
    assert _unnamed(_layout_bullets(), _modules()) == []


def test_a_module_named_under_another_folder_is_missing():
    bullets = ["- `bench/` a unit: `runner`, `cell`", "- `cli.py` the command; `loadgen/` `rows`"]
    modules = [Path("bench/runner.py"), Path("bench/rows.py"), Path("cli.py"), Path("plan.py")]
    assert _unnamed(bullets, modules) == ["bench/rows.py", "plan.py"]
