"""A stand-in EC2 data plane behind moto's control plane, for the ec2 provisioner's tests.

moto (server mode, in this process) answers the EC2 and SSM APIs; it keeps records but runs
nothing. This module plays the machines: every instance moto says is running becomes a test
host of its own -- a Linux network namespace whose veth carries the instance's private
address (moto gives addresses from the test subnet, 10.213.0.0/24, bridged to this machine at
10.213.0.1) -- and its SSM agent: a command sent to the instance is run by bash inside its
namespace, with ``docker_shim.py`` as its container runtime, and moto's record of the
invocation is updated as the agent would (InProgress, then Success or Failed with the real
exit code and output). A command sent to an instance with no host yet is refused with
InvalidInstanceId, as SSM refuses an agent that is not online. A terminated instance's
namespace is torn down with everything running in it.

Nothing here reaches beyond this machine: the addresses live on the bridge and in the
namespaces only.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

BRIDGE = "sbbr0"
GATEWAY = "10.213.0.1"
VPC_CIDR = "10.213.0.0/16"
SUBNET_CIDR = "10.213.0.0/24"
SHIM = Path(__file__).with_name("docker_shim.py")
# every stand-in instance's nvidia-smi: the GPU a g6.xlarge has (the worker has none, so the
# cells' ``gpu`` can only have come from the instance), GPU_USED_MIB of it in use
GPU_ROW = "NVIDIA L4, 550.54.15, 2040 MHz, Disabled"
GPU_USED_MIB = 1234
NVIDIA_SMI = f"""#!/bin/sh
case "$1" in
  --query-gpu=memory.used) echo '{GPU_USED_MIB}' ;;
  --query-gpu=*) echo '{GPU_ROW}' ;;
  *) echo '| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |' ;;
esac
"""

# every stand-in instance's libnvidia-ml.so.1, as the launch script's energy sampler loads it
# (ctypes): one NVIDIA L4 whose total energy counter advances with the machine's load -- 1 J
# per busy jiffy (10 ms of a core at 100 W), from /proc/stat -- so a cell that works the
# stand-in's server counts joules, and an idle one next to none
FAKE_NVML_C = r"""
#include <stdio.h>
#include <string.h>
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) { *h = (void *)1; return i ? 2 : 0; }
int nvmlDeviceGetName(void *h, char *name, unsigned int n) {
  strncpy(name, "NVIDIA L4", n); return 0; }
int nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj) {
  unsigned long long user, nice, sys, idle, iowait, irq, softirq, steal;
  FILE *f = fopen("/proc/stat", "r");
  if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys,
                   &idle, &iowait, &irq, &softirq, &steal) != 8) { if (f) fclose(f); return 999; }
  fclose(f);
  *mj = (user + nice + sys + irq + softirq + steal) * 1000ULL;
  return 0;
}
"""


# every stand-in instance's block devices and the commands that format and mount them: the
# launch script runs as root on this machine, so no real lsblk, mkfs, mdadm, mount or
# systemctl may ever answer it. Each host's devices are in its state dir (``instance-store``:
# "NAME MODEL" lines, as ``lsblk -d -n -o NAME,MODEL`` prints them); what the script did to
# them is logged to ``disk.log``, its mounts to ``mounts``.
DISK_SHIMS = {
    "lsblk": '#!/bin/sh\ncat "$DOCKER_SHIM_STATE/instance-store" 2>/dev/null || true\n',
    "mountpoint": '#!/bin/sh\ngrep -qxF "$2" "$DOCKER_SHIM_STATE/mounts" 2>/dev/null\n',
    "mount": ('#!/bin/sh\necho "mount $*" >> "$DOCKER_SHIM_STATE/disk.log"\n'
              'for last; do :; done\necho "$last" >> "$DOCKER_SHIM_STATE/mounts"\n'),
    **{name: f'#!/bin/sh\necho "{name} $*" >> "$DOCKER_SHIM_STATE/disk.log"\n'
       for name in ("mkfs.xfs", "mdadm", "systemctl")},
}
EBS_ROOT = "nvme0n1 Amazon Elastic Block Store"


def ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip", "netns", "exec", netns, "ip", *args] if netns else ["ip", *args]
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def namespaces_available() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    probe = f"sbprobe{os.getpid() % 10000}"
    try:
        done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True,
                              check=False)
    except FileNotFoundError:
        return "iproute2's `ip` is not installed"
    if done.returncode:
        return f"`ip netns add` failed: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


@dataclass
class Host:
    instance_id: str
    address: str
    netns: str
    state_dir: Path
    commands: queue.Queue = field(default_factory=queue.Queue)
    ran: list[dict] = field(default_factory=list)


class StandInHosts:
    """Materializes moto's EC2 instances as namespaces and runs their SSM commands."""

    def __init__(self, endpoint: str, region: str, workdir: Path, images: dict[str, str]):
        import boto3

        self.ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name=region)
        self.region = region
        self.workdir = workdir
        self.images = images
        self.hosts: dict[str, Host] = {}
        # instances whose host was torn down at termination (what their agents ran stays)
        self.gone: dict[str, Host] = {}
        # False: no agent registers (an instance without an SSM instance profile, an AMI
        # without the agent): every command is refused as SSM refuses an agent not online
        self.agents_online = True
        # the NVMe instance-store volumes each new instance has (lsblk NAME MODEL lines)
        self.instance_store: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._bin = workdir / "bin"
        self._lib = workdir / "lib"  # the stand-in GPU's NVML

    # -- the network -------------------------------------------------------------------------
    def network(self) -> str:
        """A VPC and subnet in moto whose addresses this machine can reach: the subnet id."""
        vpc = self.ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
        return self.ec2.create_subnet(VpcId=vpc, CidrBlock=SUBNET_CIDR)["Subnet"]["SubnetId"]

    def __enter__(self) -> StandInHosts:  # noqa: PYI034 (a final class in a test)
        self._bin.mkdir(parents=True, exist_ok=True)
        docker = self._bin / "docker"
        docker.write_text(f"#!/bin/sh\nexec {sys.executable} {SHIM} \"$@\"\n")
        docker.chmod(0o755)
        smi = self._bin / "nvidia-smi"
        smi.write_text(NVIDIA_SMI)
        smi.chmod(0o755)
        self._lib.mkdir(parents=True, exist_ok=True)
        (self._lib / "fake_nvml.c").write_text(FAKE_NVML_C)
        # g++ (the build needs it) compiling C: no C++ name mangling
        subprocess.run(["g++", "-x", "c", "-shared", "-fPIC", "-o",
                        str(self._lib / "libnvidia-ml.so.1"),
                        str(self._lib / "fake_nvml.c")], check=True)
        for name, text in DISK_SHIMS.items():
            shim = self._bin / name
            shim.write_text(text)
            shim.chmod(0o755)
        ip("link", "del", BRIDGE, check=False)
        ip("link", "add", BRIDGE, "type", "bridge")
        ip("addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        ip("link", "set", BRIDGE, "up")
        self._install_agent()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._watcher.join(timeout=10)
        for host in list(self.hosts.values()):
            self._remove(host)
        ip("link", "del", BRIDGE, check=False)
        self._uninstall_agent()

    # -- instances come and go -----------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.is_set():
            pages = self.ec2.get_paginator("describe_instances").paginate()
            instances = [i for p in pages for r in p["Reservations"] for i in r["Instances"]]
            for inst in instances:
                iid, state = inst["InstanceId"], inst["State"]["Name"]
                if state == "running" and iid not in self.hosts and iid not in self.gone:
                    self._add(iid, inst["PrivateIpAddress"])
                elif state in ("shutting-down", "terminated", "stopped") and iid in self.hosts:
                    self._remove(self.hosts[iid])
            self._stop.wait(0.2)

    def _add(self, iid: str, address: str) -> None:
        n = len(self.hosts) + len(self.gone)
        netns, outer, inner = f"sbi{n}", f"sbh{n}", f"sbn{n}"
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "add", netns], check=True)
        ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        ip("link", "set", inner, "netns", netns)
        ip("link", "set", outer, "master", BRIDGE)
        ip("link", "set", outer, "up")
        ip("link", "set", "lo", "up", netns=netns)
        ip("addr", "add", f"{address}/24", "dev", inner, netns=netns)
        ip("link", "set", inner, "up", netns=netns)
        ip("route", "add", "default", "via", GATEWAY, netns=netns)
        host = Host(iid, address, netns, self.workdir / iid)
        host.state_dir.mkdir(parents=True, exist_ok=True)
        (host.state_dir / "instance-store").write_text(
            "\n".join([EBS_ROOT, *self.instance_store]) + "\n")
        threading.Thread(target=self._agent, args=(host,), daemon=True).start()
        with self._lock:
            self.hosts[iid] = host

    def _remove(self, host: Host) -> None:
        with self._lock:
            self.hosts.pop(host.instance_id, None)
            self.gone[host.instance_id] = host
        host.commands.put(None)
        pids = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True,
                              text=True, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", host.netns], capture_output=True, check=False)

    def host(self, instance_id: str, timeout: float = 30.0) -> Host:
        """The stand-in host of ``instance_id``, once the watcher has made it (it polls moto
        every 0.2 s: a test that launched an instance may ask before then)."""
        deadline = time.monotonic() + timeout
        while instance_id not in self.hosts:
            assert time.monotonic() < deadline, f"no stand-in host for {instance_id}"
            time.sleep(0.05)
        return self.hosts[instance_id]

    def running_servers(self) -> dict[str, list[str]]:
        """Each host's live processes (what still runs 'on the instance')."""
        return {iid: subprocess.run(["ip", "netns", "pids", h.netns], capture_output=True,
                                    text=True, check=False).stdout.split()
                for iid, h in list(self.hosts.items())}

    # -- the SSM agent ---------------------------------------------------------------------------
    def _install_agent(self) -> None:
        from moto.ssm.exceptions import SSMException
        from moto.ssm.models import SimpleSystemManagerBackend

        original = SimpleSystemManagerBackend.send_command
        hosts = self

        def send_command(backend, *args, **kwargs):
            ids = list(kwargs.get("instance_ids") or [])  # moto extends the list it is given
            missing = [i for i in ids if i not in hosts.hosts or not hosts.agents_online]
            if missing:
                raise SSMException("InvalidInstanceId",
                                   f"Instances {missing} not in a valid state for account")
            command = original(backend, *args, **kwargs)
            # moto adds every instance of the account when Targets is empty: keep the asked
            command.invocations = [i for i in command.invocations if i["InstanceId"] in ids]
            for invocation in command.invocations:
                invocation.update(Status="InProgress", StatusDetails="InProgress",
                                  ResponseCode=-1)
                hosts.hosts[invocation["InstanceId"]].commands.put(
                    (command.parameters["commands"], invocation))
            return command

        self._original_send = original
        SimpleSystemManagerBackend.send_command = send_command

    def _uninstall_agent(self) -> None:
        from moto.ssm.models import SimpleSystemManagerBackend

        SimpleSystemManagerBackend.send_command = self._original_send

    def _agent(self, host: Host) -> None:
        """Runs the host's commands one at a time, as the SSM agent does."""
        env = {**os.environ, "PATH": f"{self._bin}:{os.environ['PATH']}",
               "LD_LIBRARY_PATH": str(self._lib),
               "DOCKER_SHIM_STATE": str(host.state_dir),
               "DOCKER_SHIM_IMAGES": json.dumps(self.images)}
        while True:
            item = host.commands.get()
            if item is None:
                return
            lines, invocation = item
            script = "\n".join(lines)
            try:
                done = subprocess.run(["ip", "netns", "exec", host.netns, "bash", "-c", script],
                                      capture_output=True, text=True, env=env, timeout=300,
                                      check=False)
                rc, out, err = done.returncode, done.stdout, done.stderr
            except subprocess.TimeoutExpired as exc:
                rc, out, err = 124, exc.stdout or "", f"timed out: {exc}"
            host.ran.append({"script": script, "rc": rc, "at": time.time()})
            status = "Success" if rc == 0 else "Failed"
            invocation.update(Status=status, StatusDetails=status, ResponseCode=rc,
                              StandardOutputContent=out[-24000:],
                              StandardErrorContent=err[-8000:])
