"""The local provisioner against real processes: healthy start, stop, launch failure, reaping."""

import sys
import time

import httpx
import pytest
from servebench.provision.local import (
    LocalProvisioner,
    ServerLaunchError,
    _alive,
    free_port,
)


def _fake_server_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "servebench.testing.fake_openai_server", "--port", str(port)]


def test_start_healthy_then_stop(tmp_path):
    prov = LocalProvisioner(tmp_path)
    port = free_port()
    with prov.serving("fake", _fake_server_argv(port), port=port, health_path="/health",
                      timeout_s=30) as server:
        assert httpx.get(server.base_url + "/health").status_code == 200
        assert (tmp_path / "fake.server.json").exists()
        pid = server.pid
    assert not _alive(pid)
    assert not (tmp_path / "fake.server.json").exists()


def test_launch_failure_carries_log_tail_and_cleans_up(tmp_path):
    prov = LocalProvisioner(tmp_path)
    argv = [sys.executable, "-c", "import sys; print('model file is corrupt'); sys.exit(3)"]
    with pytest.raises(ServerLaunchError, match=r"(?s)exited with code 3.*model file is corrupt"):
        prov.start("broken", argv, port=free_port(), health_path="/health", timeout_s=30)
    assert not list(tmp_path.glob("*.server.json"))


def test_a_launch_failure_names_the_first_error_its_log_raised(tmp_path):
    """vLLM's engine dies saying "See root cause above", the cause far up its log: the reason
    leads with the first exception raised, whatever the tail holds."""
    cause = ("ValueError: There is no module or parameter named 'lm_head.weight_packed' in "
             "LlamaForCausalLM.")
    warning = ("(APIServer pid=6) WARNING 12-05 01:26:18 [system_utils.py:255] Found ulimit of "
               "20000 [...]. This can cause fd limit errors like `OSError: [Errno 24] Too many "
               "open files`.")
    script = (f"import sys; print({warning!r}); "
              f"print({'(Worker pid=7) ERROR 12-05 01:26:33 [x.py:953] ' + cause!r}); "
              "[print('noise', i) for i in range(50)]; "
              "print('RuntimeError: Engine core initialization failed. See root cause above.'); "
              "sys.exit(1)")
    prov = LocalProvisioner(tmp_path)
    with pytest.raises(ServerLaunchError) as err:
        prov.start("engine", [sys.executable, "-c", script], port=free_port(),
                   health_path="/health", timeout_s=30)
    first, *rest = str(err.value).splitlines()
    assert first == f"engine exited with code 1 before becoming healthy: {cause}; log tail:"
    assert rest[-1].startswith("RuntimeError: Engine core initialization failed")


def test_never_healthy_times_out_and_is_killed(tmp_path):
    prov = LocalProvisioner(tmp_path)
    argv = [sys.executable, "-c", "import time; time.sleep(600)"]
    with pytest.raises(ServerLaunchError, match="not healthy"):
        prov.start("silent", argv, port=free_port(), health_path="/health", timeout_s=1.5)
    assert not list(tmp_path.glob("*.server.json"))


def test_reap_stops_what_a_crashed_task_left(tmp_path):
    port = free_port()
    server = LocalProvisioner(tmp_path).start(
        "leaked", _fake_server_argv(port), port=port, health_path="/health", timeout_s=30
    )
    # a different provisioner object, as in the teardown task's process
    reaped = LocalProvisioner(tmp_path).reap()
    assert reaped == ["leaked"]
    assert not _alive(server.pid)
    assert LocalProvisioner(tmp_path).reap() == []


def test_stop_reaches_the_whole_process_group(tmp_path):
    prov = LocalProvisioner(tmp_path)
    port = free_port()
    child_pid_file = tmp_path / "child.pid"
    # the server spawns a child (as `transformers serve` workers would); both must die
    script = (
        "import os, subprocess, sys, time;"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
        f"open({str(child_pid_file)!r}, 'w').write(str(p.pid));"
        f"os.execv(sys.executable, {_fake_server_argv(port)!r})"
    )
    with prov.serving("parent", [sys.executable, "-c", script], port=port,
                      health_path="/health", timeout_s=30):
        child = int(child_pid_file.read_text())
        assert _alive(child)
    assert _gone_or_zombie(child, within_s=5)


def _gone_or_zombie(pid: int, within_s: float) -> bool:
    """Dead, or a zombie waiting for init to reap it (it no longer runs)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False
