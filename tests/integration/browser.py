"""Headless Chromium (Debian's ``chromium``, which .ci/run installs) for the tests that open a
page: the DOM after scripts ran, and a screenshot kept under build/artifacts (its path is printed
in the log, to keep as a CI artifact)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from servebench.settings import PROJECT_ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = PROJECT_ROOT / "build" / "artifacts"


def _run(profile: Path, *args: str) -> str:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180, check=True).stdout


def dump_dom(url: str, profile: Path, *, wait_ms: int = 0) -> str:
    """The page's DOM once loaded (and ``wait_ms`` of virtual time for its scripts)."""
    extra = [f"--virtual-time-budget={wait_ms}"] if wait_ms else []
    return _run(profile, *extra, "--dump-dom", url)


def text_of(dom: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def screenshot(url: str, profile: Path, name: str, *, size: str = "1280,2200",
               wait_ms: int = 0) -> Path:
    """A PNG of the page at ``build/artifacts/<name>``; its path is printed."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / name
    extra = [f"--virtual-time-budget={wait_ms}"] if wait_ms else []
    _run(profile, *extra, f"--window-size={size}", f"--screenshot={shot}", url)
    print(f"screenshot: {shot}")
    return shot
