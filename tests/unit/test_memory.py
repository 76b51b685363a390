"""A server's peak memory: its process tree sampled as it runs (real processes spawned here,
each holding a known amount), shared pages counted once; nvidia-smi's answer read for the
tree's processes; the weights' files sized."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from servebench.memory import (
    MIB,
    TreeSampler,
    files_bytes,
    parse_compute_apps,
    process_bytes,
    tree_pids,
)

# a parent holding 40 MiB that starts a child holding 80 MiB; each says so, then waits
TREE = textwrap.dedent("""
    import os, subprocess, sys, time
    held = bytearray(40 << 20)
    child = subprocess.Popen([sys.executable, "-c", "import os, time; b = bytearray(80 << 20); "
                              "os.write(1, b'child\\\\n'); time.sleep(600)"])
    os.write(1, b'parent\\n')  # one write each: whole lines
    time.sleep(600)
""")
# 100 MiB written, then a fork that never touches it: shared, copy-on-write
FORKED = textwrap.dedent("""
    import os, time
    held = bytearray(100 << 20)
    os.write(1, b'child\\n' if os.fork() == 0 else b'parent\\n')  # one write each: whole lines
    time.sleep(600)
""")


def _spawn(script: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    watchdog = threading.Timer(60, os.killpg, (proc.pid, signal.SIGKILL))  # never hang
    watchdog.start()
    try:
        said = {proc.stdout.readline().strip(), proc.stdout.readline().strip()}
    finally:
        watchdog.cancel()
    assert said == {"parent", "child"}
    return proc


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _vmrss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        text = status.read()
    return int(next(x for x in text.splitlines() if x.startswith("VmRSS:")).split()[1]) * 1024


def test_the_tree_is_the_server_and_its_descendants_and_its_peak_what_they_hold():
    proc = _spawn(TREE)
    try:
        pids = tree_pids(proc.pid)
        assert len(pids) == 2 and pids[0] == proc.pid
        assert os.getpid() not in pids
        sampler = TreeSampler(proc.pid, interval_s=0.05).start()
        time.sleep(0.3)
        peak = sampler.peak()
        sampler.stop()
        # 120 MiB held, and two interpreters (each ~10 MiB of its own, less of shared libs)
        assert 120 * MIB <= peak.peak_rss_bytes <= 160 * MIB, peak
        assert "2 process(es)" in peak.peak_rss_source
        assert peak.peak_device_memory_bytes is None
        assert sampler.samples >= 3
    finally:
        _kill(proc)
    # the tree is gone: the peak it reached stays the unit's
    assert tree_pids(proc.pid) == []
    assert sampler.peak().peak_rss_bytes == peak.peak_rss_bytes


def test_pages_the_tree_shares_are_counted_once_where_a_sum_of_rss_counts_them_twice():
    proc = _spawn(FORKED)
    try:
        pids = tree_pids(proc.pid)
        assert len(pids) == 2
        rss_sum = sum(_vmrss(p) for p in pids)
        pss_sum = sum(process_bytes(p) for p in pids)
        assert rss_sum >= 200 * MIB  # each process's RSS holds the shared 100 MiB
        assert 100 * MIB <= pss_sum <= 130 * MIB
    finally:
        _kill(proc)
    assert process_bytes(proc.pid) is None  # ended: nothing


def test_device_memory_is_the_trees_processes_in_nvidia_smis_answer():
    proc = _spawn(TREE)
    try:
        child = next(p for p in tree_pids(proc.pid) if p != proc.pid)
        answer = f"{proc.pid}, 1024\n{child}, 512\n1, 40000\n"  # pid 1: another user's
        sampler = TreeSampler(proc.pid, interval_s=0.05, device=lambda: answer)
        sampler.sample()
        peak = sampler.peak()
        assert peak.peak_device_memory_bytes == 1536 * MIB
        assert "nvidia-smi" in peak.peak_device_memory_source
        none = TreeSampler(proc.pid, device=lambda: "1, 40000\n")
        assert none.peak().peak_device_memory_bytes is None
        assert "none of the server's processes" in none.peak().peak_device_memory_source
    finally:
        _kill(proc)


def test_nvidia_smis_compute_apps_are_parsed_by_pid():
    text = "4242, 15360\n4243, [N/A]\n99, 100\n"
    assert parse_compute_apps(text, {4242, 4243}) == 15360 * MIB
    assert parse_compute_apps(text, {7}) is None
    assert parse_compute_apps("", {4242}) is None


def test_the_weights_are_the_model_files_on_disk(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x" * 1000)
    assert files_bytes(gguf) == 1000
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"x" * 700)
    (ckpt / "pytorch_model-00001.bin").write_bytes(b"x" * 300)
    (ckpt / "config.json").write_text("{}" * 500)  # not weights
    assert files_bytes(ckpt) == 1000
    assert files_bytes(tmp_path / "org" / "hub-id") is None
    (tmp_path / "empty").mkdir()
    assert files_bytes(tmp_path / "empty") is None


def test_the_local_models_checkpoint_is_sized():
    from servebench.settings import get_settings

    size = files_bytes(get_settings().resolve("include/models/adder-3m"))
    assert size == 7152200  # model.safetensors: 3.6M bf16 parameters
