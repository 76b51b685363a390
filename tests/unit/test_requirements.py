"""Every third-party module the code imports is declared in the requirements file of the place
that imports it: the library, its DAGs and plugins in requirements.txt (which pyproject's
dependencies repeat), the tests and benchmarks in requirements-dev.txt (on top of it), the
script the quantization venv runs in requirements-quant.txt, and nothing only the tests use
sits in the runtime file."""

import ast
import re
import sys
from importlib.metadata import distributions, packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OWN = {"servebench", "__future__"}
# run by the quantization venv's python (servebench.quantize.make), never imported by the library
QUANT_VENV_FILES = ("include/servebench/quantize/oneshot.py",)
# the tests' own helper modules and the project's scripts (scripts/steps.py), imported by name
# from their folder
TEST_HELPERS = {p.stem for folder in ("tests", "benchmarks", "scripts")
                for p in (ROOT / folder).rglob("*.py")}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            names |= _declared(path.parent / line[3:].strip())
        elif line:
            names.add(_norm(re.match(r"[A-Za-z0-9_.-]+", line).group(0)))
    return names


def _imports(*folders: str, files: tuple[str, ...] = ()) -> dict[str, str]:
    """Top-level module -> the first file that imports it, over every .py under ``folders``
    (but QUANT_VENV_FILES) and ``files``."""
    found: dict[str, str] = {}
    paths = [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))
             if str(p.relative_to(ROOT)) not in QUANT_VENV_FILES] + [ROOT / f for f in files]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return {m: f for m, f in found.items()
            if m not in sys.stdlib_module_names and m not in OWN and m not in TEST_HELPERS}


def _undeclared(imports: dict[str, str], declared: set[str]) -> list[str]:
    dists = packages_distributions()
    missing = []
    for module, where in sorted(imports.items()):
        candidates = {_norm(d) for d in dists.get(module, [])}
        if not candidates & declared:
            missing.append(f"{module} ({where}; distributions {sorted(candidates) or '?'})")
    return missing


def test_the_library_dags_and_plugins_declare_what_they_import():
    assert not _undeclared(_imports("include", "dags", "plugins"),
                           _declared(ROOT / "requirements.txt"))


def test_the_quantization_script_declares_what_it_imports_in_its_venvs_file():
    sites = sorted((ROOT / ".venv-quant").glob("lib/python3*/site-packages"))
    if not sites:
        pytest.skip("no .venv-quant to read the distributions from (make quant)")
    dists: dict[str, list[str]] = {}
    for dist in distributions(path=[str(sites[0])]):
        tops = (dist.read_text("top_level.txt") or "").split() or \
            {str(f).split("/")[0].removesuffix(".py") for f in dist.files or ()}
        for top in tops:
            dists.setdefault(top, []).append(dist.metadata["Name"])
    imports = _imports(files=QUANT_VENV_FILES)
    assert {"llmcompressor", "torch", "transformers"} <= set(imports)
    declared = _declared(ROOT / "requirements-quant.txt")
    missing = [m for m in imports if not {_norm(d) for d in dists.get(m, [])} & declared]
    assert not missing


def test_the_tests_and_benchmarks_declare_what_they_import():
    assert not _undeclared(_imports("tests", "benchmarks"),
                           _declared(ROOT / "requirements-dev.txt"))


def test_nothing_only_the_tests_use_is_a_runtime_requirement():
    runtime = _declared(ROOT / "requirements.txt")
    dists = packages_distributions()
    used = {_norm(d) for m in _imports("include", "dags", "plugins") for d in dists.get(m, [])}
    test_only = {_norm(d) for m in _imports("tests", "benchmarks") for d in dists.get(m, [])}
    assert not (runtime & (test_only - used)) - {"pytest"}, runtime & (test_only - used)


def test_pyproject_depends_on_what_requirements_txt_declares():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = {_norm(re.match(r"[A-Za-z0-9_.-]+", d).group(0)) for d in project["dependencies"]}
    assert listed == _declared(ROOT / "requirements.txt")
