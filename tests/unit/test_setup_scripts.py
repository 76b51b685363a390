"""What `make setup` checks and takes from where before it builds: the system packages
(scripts/check_system.sh, run first by `make setup` and `make test`, and what .ci/run installs)
and torch's CPU build from one index (scripts/setup_venv.sh, which the Dockerfile runs too).
tests/integration/test_setup_torch_index.py resolves the venvs against PyPI and a torch index."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "check_system.sh"
BASH = shutil.which("bash")


def _path_without(tmp_path: Path, *names: str) -> Path:
    """A folder of links to every command on this PATH but ``names`` (the first of each name)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for entry in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(entry):
            continue
        for command in os.scandir(entry):
            target = folder / command.name
            if command.name in names or target.exists() or not os.access(command.path, os.X_OK):
                continue
            target.symlink_to(command.path)
    return folder


def _check(path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BASH, str(CHECK), *args], env={**os.environ, "PATH": path},
                          capture_output=True, text=True, timeout=30)


def _missing(path: str, *groups: str) -> set[str]:
    done = _check(path, "--missing", *groups)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_a_missing_command_is_named_with_the_apt_line_and_fails_the_check(tmp_path):
    here = _missing(os.environ["PATH"], "build")
    without_cmake = str(_path_without(tmp_path, "cmake"))
    assert _missing(without_cmake, "build") == here | {"cmake"}
    done = _check(without_cmake, "build")
    assert done.returncode == 1
    assert "  cmake " in done.stderr  # its line, with what needs it
    apt = [line for line in done.stderr.splitlines() if "apt-get install -y" in line]
    assert len(apt) == 1 and apt[0].split("apt-get install -y ")[1].split() == \
        sorted(here | {"cmake"}, key=["cmake", "g++", "make", "libnuma1"].index)


def test_a_missing_library_is_found_in_ldconfigs_cache(tmp_path):
    here = _missing(os.environ["PATH"], "build")
    folder = _path_without(tmp_path, "ldconfig")
    real = shutil.which("ldconfig") or "/sbin/ldconfig"
    # the machine's own cache, less libnuma
    (folder / "ldconfig").write_text(f"#!{BASH}\n{real} -p | grep -v libnuma\n")
    (folder / "ldconfig").chmod(0o755)
    assert _missing(str(folder), "build") == here | {"libnuma1"}
    done = _check(str(folder), "build")
    assert done.returncode == 1 and "libnuma1" in done.stderr


def test_the_tests_packages_are_checked_for_the_tests_only(tmp_path):
    folder = str(_path_without(tmp_path, "chromium", "chromium-browser", "ip"))
    assert not {"chromium", "iproute2"} & _missing(folder, "build")
    assert {"chromium", "iproute2"} <= _missing(folder, "build", "test")
    assert _check(folder, "test").returncode == 1
    assert _check(folder, "nonsense").returncode == 2


def test_setup_and_test_check_the_system_before_anything_else():
    """`make -n` lists the commands in the order make runs them: the check comes first."""
    # under `make test` (CI) this is a sub-make: MAKELEVEL would make it print "Entering directory"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    for target, check in (("setup", "build"), ("test", "build test")):
        done = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == f"scripts/check_system.sh {check}", target
    # CI installs what the same script says is missing
    assert "scripts/check_system.sh --missing build test" in (ROOT / ".ci" / "run").read_text()


def test_the_torch_index_is_named_in_one_place_which_the_dockerfile_uses_too():
    files = [ROOT / "Dockerfile", ROOT / "Makefile", ROOT / ".ci" / "run",
             *ROOT.glob("requirements*.txt"), *(ROOT / "scripts").iterdir()]
    naming = [p.relative_to(ROOT).as_posix() for p in files
              if p.is_file() and "download.pytorch.org" in p.read_text()]
    assert naming == ["scripts/setup_venv.sh"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    for script in ("setup_stacks_venv.sh", "setup_vllm_venv.sh", "setup_quant_venv.sh"):
        assert f"RUN scripts/{script}\n" in dockerfile
    assert dockerfile.count("ARG TORCH_INDEX_URL\n") == 2  # both stages pass it through


@pytest.mark.parametrize("line", ["torch==2.13.0", "torch>=2.13", "torch"])
def test_a_torch_line_that_is_not_the_cpu_build_is_refused_before_any_venv(line, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"numpy\n{line}  # a comment\n")
    done = subprocess.run([str(ROOT / "scripts" / "setup_venv.sh"), str(tmp_path / "venv"),
                           str(requirements), "pass"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "pin torch's CPU build (torch==X+cpu)" in done.stderr and line in done.stderr
    assert not (tmp_path / "venv").exists()
