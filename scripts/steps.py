#!/usr/bin/env python3
"""Runs make targets side by side as the steps of `make setup`, `make run` and `make test`,
one line per step on the terminal and each step's full output in its own log file.

    scripts/steps.py STEP[:AFTER,AFTER...]...

STEP is a make target, run as `make --no-print-directory STEP` in the current folder (the
targets keep working one by one: `make vllm`, `make llama`); it starts once every AFTER step
has finished, and steps with nothing left to wait for run at the same time (pip mostly waits
on the network, the compiler on the CPU). Its stdout and stderr go to build/logs/STEP.log
(STEPS_LOG_DIR).

The terminal gets, per step, `[m:ss] STEP  done (1 min 31 s)` with the clock from
SERVEBENCH_STEPS_T0 (epoch seconds; the Makefile sets it once per `make`, so a whole `make run`
shares one clock) and, on a terminal, one status line rewritten in place with each running
step's progress: the compile's percentage, pip's package count, the DAG's finished tasks.
Elsewhere (CI, a pipe) that status is a plain line every STEPS_STATUS_EVERY seconds (60).
A failing step's line names its log and shows its last STEPS_LOG_TAIL lines (30), with the
first error line above them when the tail does not hold it; the steps already running finish,
the ones waiting on it are not started, and the exit status is 1. Ctrl-C stops every step.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.5
NAME_WIDTH = 11

COMPILE = re.compile(r"^\[ *(\d+)%\]")
COLLECTED = re.compile(r"^(?:Collecting|Requirement already satisfied:) ")
INSTALLING = "Installing collected packages: "
TASK_START = re.compile(r"\[DAG TEST\] starting task_id=(\S+)")
TASK_END = "[DAG TEST] end task task_id="
# inside the DAG's bench task (servebench's own log lines): the plan, each unit's start, each cell
PLAN = re.compile(r"\] plan: (\d+) units on ")
UNIT_START = re.compile(r"\] starting (\S+): ")
CELL = re.compile(r"\] cell \S+ \([^)]*\): ")
ERROR = re.compile(r"\berror\b|Error:|\*\*\*", re.IGNORECASE)


def clock(seconds: float) -> str:
    """The step lines' clock: `[ 1:23]`, `[61:05]`."""
    minutes, secs = divmod(int(seconds), 60)
    return f"[{minutes:2d}:{secs:02d}]"


def duration(seconds: float) -> str:
    """`7 s`, `1 min 31 s`."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60} s"


class Progress:
    """What a running step is doing, read from its log as it grows (only the new bytes are
    read: the DAG's log grows while cells are timed): the compile's percentage (cmake's
    `[ 45%]`), pip's packages collected then installed, the DAG's tasks finished and the one
    running (with the unit of the plan's that runs and the cells measured), else the log's
    last line."""

    def __init__(self, log: Path):
        self.log = log
        self.offset = 0
        self.partial = b""
        self.percent = self.collected = self.installing = self.tasks_done = None
        self.task = ""
        self.units = self.unit_index = self.cells = 0
        self.unit = ""
        self.last = ""
        self.installed = False

    def feed(self, line: str) -> None:
        if not line.strip():
            return
        self.last = line.strip()
        if m := TASK_START.search(line):
            self.task, self.tasks_done = m.group(1), self.tasks_done or 0
        elif TASK_END in line:
            self.tasks_done = (self.tasks_done or 0) + 1
        elif m := PLAN.search(line):
            self.units = int(m.group(1))
        elif m := UNIT_START.search(line):
            self.unit, self.unit_index = m.group(1), self.unit_index + 1
        elif CELL.search(line):
            self.cells += 1
        elif m := COMPILE.match(line):
            self.percent = int(m.group(1))
        elif line.startswith(INSTALLING):
            self.installing = len(line[len(INSTALLING):].split(","))
        elif line.startswith("Successfully installed"):
            self.installed = True
        elif COLLECTED.match(line):
            self.collected = (self.collected or 0) + 1

    def read(self) -> str:
        try:
            with self.log.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        for line in lines:
            self.feed(line.decode(errors="replace"))
        return self.summary()

    def summary(self) -> str:
        if self.tasks_done is not None:
            units = (f": unit {self.unit_index} of {self.units} ({self.unit}), {self.cells} cells"
                     if self.unit else "")
            return f"{self.tasks_done} tasks done, {self.task}{units}"
        if self.percent is not None:
            return f"compiling {self.percent}%"
        if self.installed:
            return "checking"
        if self.installing is not None:
            return f"installing {self.installing} packages"
        if self.collected is not None:
            return f"{self.collected} package{'s' * (self.collected != 1)} collected"
        return self.last[:40]


def parse(specs: list[str]) -> dict[str, list[str]]:
    """STEP[:AFTER,...] arguments -> {step: [after, ...]}, in the order given."""
    steps: dict[str, list[str]] = {}
    for spec in specs:
        name, _, after = spec.partition(":")
        steps[name] = [a for a in after.split(",") if a]
    for name, after in steps.items():
        unknown = [a for a in after if a not in steps]
        if unknown:
            raise SystemExit(f"steps.py: {name} waits on {', '.join(unknown)}, not a step here")
    ordered: set[str] = set()
    while len(ordered) < len(steps):
        ready = {n for n, after in steps.items() if n not in ordered and set(after) <= ordered}
        if not ready:
            raise SystemExit("steps.py: these steps wait on each other: "
                             + ", ".join(n for n in steps if n not in ordered))
        ordered |= ready
    return steps


def sub_make_env() -> dict[str, str]:
    """The environment of a step's make: the caller's, less its -j and jobserver (a step is one
    make of its own; command-line variables, `make setup VLLM_VENV=...`, still reach it)."""
    env = dict(os.environ)
    flags = env.get("MAKEFLAGS", "")
    head, sep, variables = flags.partition(" -- ")
    kept = [f for f in head.split() if not f.startswith(("-j", "--jobserver"))]
    env["MAKEFLAGS"] = " ".join(kept) + (sep + variables if sep else "")
    env.pop("MFLAGS", None)
    return env


@dataclass
class Step:
    name: str
    after: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    started: float = 0.0
    ended: float | None = None
    status: str = "waiting"  # waiting | running | done | failed | skipped
    progress: Progress | None = None


class Display:
    """One line per event; on a terminal, a status line kept at the bottom and rewritten."""

    def __init__(self, t0: float, stream=sys.stdout):
        self.t0 = t0
        self.out = stream
        self.tty = stream.isatty() and os.environ.get("TERM") != "dumb"
        self.status_every = float(os.environ.get("STEPS_STATUS_EVERY", "60"))
        self.last_status = 0.0  # the first status line says at once what started
        self.shown = ""

    def now(self) -> str:
        return clock(time.time() - self.t0)

    def line(self, text: str) -> None:
        self.clear()
        self.out.write(text + "\n")
        self.out.flush()

    def clear(self) -> None:
        if self.shown:
            self.out.write("\r\x1b[K")
            self.shown = ""

    def status(self, running: list[Step]) -> None:
        if not running:
            self.clear()
            return
        parts = []
        for step in running:
            parts.append(f"{step.name} {step.progress.read()}".strip())
        text = f"{self.now()} " + " | ".join(parts)
        if self.tty:
            text = text[:shutil.get_terminal_size((100, 20)).columns - 1]
            if text != self.shown:
                self.out.write("\r\x1b[K" + text)
                self.out.flush()
                self.shown = text
        elif time.time() - self.last_status >= self.status_every:
            self.line(text)
            self.last_status = time.time()


def tail(log: Path, lines: int) -> list[str]:
    """The log's last `lines` lines, with its first error line before them when they lack it."""
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    last = text[-lines:]
    first_error = next((i for i, l in enumerate(text) if ERROR.search(l)), None)
    if first_error is not None and first_error < len(text) - lines:
        return [f"(line {first_error + 1}) {text[first_error]}", "...", *last]
    return last


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    steps = {name: Step(name, after, Path()) for name, after in parse(argv).items()}
    logs = Path(os.environ.get("STEPS_LOG_DIR", "build/logs"))
    logs.mkdir(parents=True, exist_ok=True)
    for step in steps.values():
        step.log = logs / f"{step.name}.log"
    t0 = float(os.environ.get("SERVEBENCH_STEPS_T0") or time.time())
    shown = Display(t0)
    tail_lines = int(os.environ.get("STEPS_LOG_TAIL", "30"))
    make = os.environ.get("MAKE", "make")
    env = sub_make_env()
    failed: list[Step] = []

    def label(step: Step) -> str:
        return f"{shown.now()} {step.name:<{NAME_WIDTH}}"

    try:
        while True:
            for step in steps.values():
                if step.status != "waiting":
                    continue
                befores = [steps[a] for a in step.after]
                if any(b.status in ("failed", "skipped") for b in befores):
                    step.status = "skipped"
                    waits = ", ".join(b.name for b in befores if b.status in ("failed", "skipped"))
                    shown.line(f"{label(step)} not started: it needs {waits}")
                elif all(b.status == "done" for b in befores):
                    with step.log.open("wb") as log:
                        step.proc = subprocess.Popen(
                            [make, "--no-print-directory", step.name], env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
                    step.started, step.status = time.time(), "running"
                    step.progress = Progress(step.log)
            for step in steps.values():
                if step.status != "running" or step.proc.poll() is None:
                    continue
                step.ended = time.time()
                took = duration(step.ended - step.started)
                if step.proc.returncode == 0:
                    step.status = "done"
                    shown.line(f"{label(step)} done ({took})")
                    continue
                step.status = "failed"
                failed.append(step)
                shown.line(f"{label(step)} FAILED (exit {step.proc.returncode}) after {took}; "
                           f"its log: {step.log}")
                shown.line("\n".join(f"  | {l}" for l in tail(step.log, tail_lines)))
                running = [s.name for s in steps.values() if s.status == "running"]
                if running:
                    shown.line(f"{label(step)} letting {', '.join(running)} finish "
                               "(Ctrl-C stops them)")
            running = [s for s in steps.values() if s.status == "running"]
            if not running and not any(s.status == "waiting" for s in steps.values()):
                break
            shown.status(running)
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        for step in steps.values():
            if step.status == "running":
                step.proc.terminate()
        for step in steps.values():
            if step.status == "running":
                step.proc.wait()
        shown.line(f"{shown.now()} interrupted; the logs are in {logs}")
        return 130
    if failed:
        shown.line(f"{shown.now()} failed: " + ", ".join(f"{s.name} (its log: {s.log})"
                                                        for s in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
