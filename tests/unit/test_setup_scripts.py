"""What `make setup` checks and takes from where before it builds: the system packages
(scripts/check_system.sh, run first by `make setup` and `make test`, and what .ci/run installs)
and torch's CPU build from one index (scripts/setup_venv.sh, which the Dockerfile runs too).
tests/integration/test_setup_torch_index.py resolves the venvs against PyPI and a torch index."""

import os
import re
import shutil
import subprocess
import sys
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


# scripts/steps.py: how `make setup`, `make run` and `make test` run their steps

STEPS = ROOT / "scripts" / "steps.py"


def _env() -> dict[str, str]:
    """This environment less the make (`make test`) and the steps' settings (.ci/run's) it runs in."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")
            and not k.startswith(("STEPS_", "SERVEBENCH_STEPS_"))}


def _steps(folder: Path, makefile: str, *steps: str) -> subprocess.CompletedProcess:
    """steps.py run in ``folder`` on ``makefile`` as `make` runs it (stdout a pipe, as in CI)."""
    (folder / "Makefile").write_text(makefile)
    return subprocess.run([sys.executable, str(STEPS), *steps], cwd=folder, capture_output=True,
                          text=True, timeout=60, env=_env())


# `a` and `b` each wait (10 s at most) for the other to have started: they pass only side by side
SIDE_BY_SIDE = """\
a:
\t@echo "[ 50%] Building CXX object a.o"; touch a.started
\t@for i in $$(seq 100); do test -e b.started && break; sleep 0.1; done; test -e b.started
b:
\t@echo "Collecting numpy==2.0"; touch b.started
\t@for i in $$(seq 100); do test -e a.started && break; sleep 0.1; done; test -e a.started
c:
\t@test -e a.started -a -e b.started && echo "c after a and b"
"""


def test_steps_run_side_by_side_one_line_each_their_output_in_their_logs(tmp_path):
    done = _steps(tmp_path, SIDE_BY_SIDE, "a", "b", "c:a,b")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    finished = [line for line in lines if line.endswith(")")]
    assert sorted(line.split()[2] for line in finished) == ["a", "b", "c"]
    assert all(re.fullmatch(r"\[ ?\d+:\d\d\] \S+ +done \(\d+ s\)", line) for line in finished)
    assert finished[-1].split()[2] == "c"
    # what the steps printed is in their logs, not on the terminal
    assert "c after a and b" in (tmp_path / "build/logs/c.log").read_text()
    assert "Building" not in done.stdout and "Collecting" not in done.stdout
    # the first status line says what is running (off a terminal: a plain line)
    assert [part.split()[0] for part in lines[0][len("[ 0:00] "):].split(" | ")] == ["a", "b"]


FAILING = """\
slow:
\t@sleep 1; echo slow finished
bad:
\t@echo "x.cpp:12:3: error: 'y' was not declared"; for i in $$(seq 40); do echo "line $$i"; done; exit 3
after-bad:
\t@echo never
"""


def test_a_failing_step_names_its_log_and_shows_its_last_lines(tmp_path):
    done = _steps(tmp_path, FAILING, "slow", "bad", "after-bad:bad")
    assert done.returncode == 1
    out = done.stdout
    assert re.search(r"bad +FAILED \(exit 2\) after \d+ s; its log: build/logs/bad\.log", out)
    shown = [line[4:] for line in out.splitlines() if line.startswith("  | ")]
    # its last 30 lines, led by the first error line they lack
    assert shown[0] == "(line 1) x.cpp:12:3: error: 'y' was not declared"
    assert shown[2:-1] == [f"line {i}" for i in range(12, 41)] and "Error 3" in shown[-1]
    assert "after-bad   not started: it needs bad" in out
    assert re.search(r"slow +done", out)  # what was running finished
    assert not (tmp_path / "build/logs/after-bad.log").exists()
    assert out.splitlines()[-1].endswith("failed: bad (its log: build/logs/bad.log)")


def test_on_a_terminal_the_progress_is_one_line_rewritten_in_place(tmp_path):
    if not shutil.which("script"):
        pytest.skip("no script(1) to run it on a terminal")
    (tmp_path / "Makefile").write_text(SIDE_BY_SIDE)
    done = subprocess.run(["script", "-qec", f"{sys.executable} {STEPS} a b c:a,b", "/dev/null"],
                          cwd=tmp_path, capture_output=True, timeout=60,
                          env={**_env(), "TERM": "xterm"})
    out = done.stdout.decode()
    assert done.returncode == 0, out
    assert "\r\x1b[K[ 0:00] a" in out  # the status line, rewritten in place
    # what stays on the screen: each line as its last rewrite left it -- the steps' lines only
    screen = [line.rsplit("\x1b[K", 1)[-1].strip() for line in out.split("\n")]
    assert sorted(line.split()[2] for line in screen if line) == ["a", "b", "c"]
    assert all(re.fullmatch(r"\[ ?\d+:\d\d\] \S+ +done \(\d+ s\)", line) for line in screen if line)


def test_progress_reads_the_compile_pip_and_the_dag_from_a_steps_log(tmp_path):
    sys.path.insert(0, str(STEPS.parent))
    try:
        import steps
    finally:
        sys.path.remove(str(STEPS.parent))
    log = tmp_path / "step.log"
    seen = steps.Progress(log)
    assert seen.read() == ""
    for text, says in [
        ("-- Configuring done\n", "-- Configuring done"),
        ("[  3%] Building C object ggml.c.o\n[ 45%] Building CXX", "compiling 3%"),
        ("X object llama.cpp.o\n", "compiling 45%"),
    ]:
        with log.open("a") as f:
            f.write(text)
        assert seen.read() == says
    pip = steps.Progress(tmp_path / "pip.log")
    (tmp_path / "pip.log").write_text("Collecting torch==2.13.0+cpu\nCollecting numpy==2.1\n")
    assert pip.read() == "2 packages collected"
    with (tmp_path / "pip.log").open("a") as f:
        f.write("Installing collected packages: numpy, torch\n")
    assert pip.read() == "installing 2 packages"
    dag = steps.Progress(tmp_path / "dag.log")
    (tmp_path / "dag.log").write_text(
        "INFO - [DAG TEST] starting task_id=plan map_index=-1\n"
        "INFO - [DAG TEST] end task task_id=plan map_index=-1\n"
        "INFO - [DAG TEST] starting task_id=bench map_index=-1\n")
    assert dag.read() == "1 tasks done, bench"
    with (tmp_path / "dag.log").open("a") as f:
        f.write("Z [info     ] plan: 12 units on 1 hosts, 48 cells from local.yaml [servebench.plan]\n"
                "Z [info     ] starting adder-llamacpp--f16: llama-server --model f16.gguf\n"
                "Z [info     ] cell adder-llamacpp/f16/fixed-64x32/c1 (c1): ok ttft p50 12.7 ms\n"
                "Z [info     ] starting adder-vllm--awq: vllm serve\n")
    assert dag.read() == "1 tasks done, bench: unit 2 of 12 (adder-vllm--awq), 1 cells"


def test_a_steps_make_keeps_the_callers_variables_but_not_its_jobserver(monkeypatch):
    sys.path.insert(0, str(STEPS.parent))
    try:
        import steps
    finally:
        sys.path.remove(str(STEPS.parent))
    monkeypatch.setenv("MAKEFLAGS", r"k -j2 --jobserver-auth=3,4 -- Y=a\ b VLLM_VENV=/v")
    assert steps.sub_make_env()["MAKEFLAGS"] == r"k -- Y=a\ b VLLM_VENV=/v"
    monkeypatch.setenv("MAKEFLAGS", " -j")
    assert steps.sub_make_env()["MAKEFLAGS"] == ""


def test_every_step_the_makefile_runs_is_a_target_of_its_own():
    """`make setup/run/test` name their steps; each still runs alone (`make vllm`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    named = set()
    for target in ("setup", "run", "test"):
        done = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        line = next(l for l in done.stdout.splitlines() if "scripts/steps.py" in l)
        specs = line.split("scripts/steps.py", 1)[1].split()
        named |= {s.split(":")[0] for s in specs}
    assert {"venv", "stacks", "vllm", "quant", "llama", "models", "airflow-db", "dag"} == named
    for step in sorted(named):
        done = subprocess.run(["make", "-n", "--no-print-directory", step], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (step, done.stderr)
