"""The venv set-up scripts resolve with PyPI and a torch CPU index alone: no machine pip
configuration (PIP_CONFIG_FILE=/dev/null, no PIP_* variables), TORCH_INDEX_URL pointed at a
loopback PEP 503 index laid out like PyTorch's (`<index>/torch/` listing the CPU wheel, served
from this machine's wheel folder), and each script's pip commands run as `make setup` runs them,
the install only resolved (SETUP_VENV_DRY_RUN: --dry-run --report). Checked: torch is the wheel
that index served, every other package comes from PyPI, and the torch index is asked for torch
and nothing else. Where that index does not answer, one probe, one line, and torch from pip's
own find-links. Needs PyPI (CI reaches it) and the CPU wheel in /opt/wheels."""

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WHEELS = Path("/opt/wheels")
PYPI_FILES = "https://files.pythonhosted.org/"
INDEX_PATH = "/whl/cpu"  # PyTorch's: https://download.pytorch.org/whl/cpu/torch/


def _pins(requirements: Path) -> dict[str, str]:
    """Normalised name -> version of every `name==version` line."""
    pins = {}
    for line in requirements.read_text().splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==(\S+)", line.split("#", 1)[0].strip())
        if m:
            pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return pins


TORCH = _pins(ROOT / "requirements-vllm.txt")["torch"]
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


@pytest.fixture(scope="module")
def torch_wheel() -> Path:
    found = sorted(WHEELS.glob(f"torch-{TORCH}-{TAG}-{TAG}-*.whl"))
    if not found:
        pytest.skip(f"no torch-{TORCH}-{TAG} wheel in {WHEELS} to serve as the torch CPU index")
    return found[0]


@pytest.fixture(scope="module")
def torch_index(torch_wheel):
    """A loopback index shaped like PyTorch's CPU one; yields (url, sha256, requested paths)."""
    digest = hashlib.sha256(torch_wheel.read_bytes()).hexdigest()
    href = f"{INDEX_PATH}/{quote(torch_wheel.name)}"
    page = (f'<!DOCTYPE html><html><body><a href="{href}#sha256={digest}">'
            f"{torch_wheel.name}</a><br/></body></html>").encode()
    requested: list[str] = []

    class Index(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            path = urlparse(self.path).path
            requested.append(path)
            if path == f"{INDEX_PATH}/torch/":
                body, kind = page, "text/html"
            elif path == href:
                body, kind = None, "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length",
                             str(len(body) if body is not None else torch_wheel.stat().st_size))
            self.end_headers()
            if body is not None:
                self.wfile.write(body)
            else:
                with torch_wheel.open("rb") as f:
                    while chunk := f.read(1 << 20):
                        self.wfile.write(chunk)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}{INDEX_PATH}", digest, requested
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("script, venv_var, requirements", [
    ("setup_stacks_venv.sh", "STACKS_VENV", "requirements-stacks.txt"),
    ("setup_vllm_venv.sh", "VLLM_VENV", "requirements-vllm.txt"),
    ("setup_quant_venv.sh", "QUANT_VENV", "requirements-quant.txt"),
])
def test_the_setup_script_resolves_with_pypi_and_the_torch_cpu_index_alone(
        script, venv_var, requirements, torch_index, torch_wheel, tmp_path):
    index_url, digest, requested = torch_index
    requested.clear()
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
               TORCH_INDEX_URL=index_url, SETUP_VENV_DRY_RUN=str(report),
               PYTHON=sys.executable, **{venv_var: str(tmp_path / "venv")})
    # the configuration pip sees in that environment: none of this machine's
    config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], env=env,
                            capture_output=True, text=True, check=True).stdout
    assert not re.search(r"find-links|index-url|constraint", config), config

    done = subprocess.run([str(ROOT / "scripts" / script)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]

    installs = {re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower(): i
                for i in json.loads(report.read_text())["install"]}
    torch = installs.pop("torch")
    assert torch["metadata"]["version"] == TORCH
    assert unquote(torch["download_info"]["url"]).endswith("/" + torch_wheel.name)
    assert torch["download_info"]["archive_info"]["hashes"]["sha256"] == digest
    # the torch index was asked for torch only; everything else is PyPI's
    assert set(requested) == {f"{INDEX_PATH}/torch/", f"{INDEX_PATH}/{quote(torch_wheel.name)}"}
    elsewhere = {n: i["download_info"]["url"] for n, i in installs.items()
                 if not i["download_info"]["url"].startswith(PYPI_FILES)}
    assert not elsewhere
    # no CUDA (llmcompressor's nvidia-ml-py is NVML's ctypes binding: it loads no library
    # until asked, and nothing here asks)
    assert not [n for n in installs if (n.startswith("nvidia-") and n != "nvidia-ml-py")
                or n == "triton"]
    pins = _pins(ROOT / requirements)
    assert pins["torch"] == TORCH
    resolved = {n: i["metadata"]["version"] for n, i in installs.items()}
    assert {n: resolved.get(n) for n in pins if n != "torch"} == \
        {n: v for n, v in pins.items() if n != "torch"}


@pytest.fixture
def silent_index():
    """A torch index URL whose host takes the connection and never answers (a listening socket
    nobody accepts on): what pip would wait on, then retry, for each of its retries."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}{INDEX_PATH}"
    finally:
        sock.close()


def test_an_unreachable_torch_index_is_probed_once_then_pips_own_find_links_serve_torch(
        silent_index, torch_wheel, tmp_path):
    """The index is asked once, for TORCH_INDEX_PROBE_S seconds (2 here), one line says so, and
    torch comes from what pip is configured with (PIP_FIND_LINKS here): no retries."""
    links = tmp_path / "links"
    links.mkdir()
    (links / torch_wheel.name).symlink_to(torch_wheel)
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_FIND_LINKS=str(links), TORCH_INDEX_URL=silent_index, TORCH_INDEX_PROBE_S="2",
               SETUP_VENV_DRY_RUN=str(report), PYTHON=sys.executable,
               STACKS_VENV=str(tmp_path / "venv"))
    done = subprocess.run([str(ROOT / "scripts" / "setup_stacks_venv.sh")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    said = [line for line in done.stderr.splitlines() if silent_index in line]
    assert len(said) == 1 and "not reachable (timed out)" in said[0], done.stderr
    assert f"torch=={TORCH} from pip's own configuration" in said[0]
    assert "Retrying" not in done.stderr
    installs = {re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower(): i
                for i in json.loads(report.read_text())["install"]}
    torch = installs.pop("torch")
    assert torch["metadata"]["version"] == TORCH
    assert unquote(torch["download_info"]["url"]).endswith("/" + torch_wheel.name)
    assert not {n: i["download_info"]["url"] for n, i in installs.items()
                if not i["download_info"]["url"].startswith(PYPI_FILES)}
