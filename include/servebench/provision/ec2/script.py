"""The shell script SSM runs on an instance for each variant: the instance store put to use
(the first time), the previous variant's container and images removed, the image pulled, the
container started, its memory sampled until it ends, the instance's GPU energy counter read
into a log; and the marks it prints for the launch
to read (the image's digest, the instance's GPUs and CUDA version, the instance store's
device)."""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from servebench.memory import MIB, MemorySample
from servebench.provenance import GPU_QUERY, describe_gpus

if TYPE_CHECKING:
    from servebench.config import Ec2Provision
    from servebench.stacks.adapter import ContainerLaunch

log = logging.getLogger(__name__)
CONTAINER = "servebench-server"
DIGEST_MARK = "servebench-image-digest:"  # the line the launch script prints
GPU_MARK = "servebench-gpus:"  # the instance's nvidia-smi rows (GPU_QUERY), ';'-joined
CUDA_MARK = "servebench-cuda:"  # the CUDA version its driver reports


# the model name EC2 gives its NVMe instance-store volumes (the root EBS volume's is "Amazon
# Elastic Block Store"): only these are ever formatted
INSTANCE_STORE_MODEL = "Amazon EC2 NVMe Instance Storage"
INSTANCE_STORE = "/opt/servebench/instance-store"
INSTANCE_STORE_MARK = "servebench-instance-store:"  # the device the script put it on
# the container's peak memory, kept by MEMORY_SAMPLER: "<Pss KiB> <GPU MiB or -> <samples>"
MEMORY_DIR = "/opt/servebench/memory"
MEMORY_PEAK = f"{MEMORY_DIR}/peak"
MEMORY_INTERVAL_S = 1
ROOT_PID = f"docker inspect --format '{{{{.State.Pid}}}}' {CONTAINER}"
# started before the container (the script's last line), it waits up to 2 min for it; then the
# container's process tree (its init, ``docker inspect``'s State.Pid on the host, and every
# descendant) summed every MEMORY_INTERVAL_S as servebench.memory sums a local server's
# (Pss: shared pages once), with the instance's GPU memory in use (the container alone runs
# there), the peaks rewritten to MEMORY_PEAK after each sample; it ends with the container
MEMORY_SAMPLER = f"""for _ in $(seq 120); do
  root="$({ROOT_PID} 2>/dev/null || true)"
  case "$root" in ''|0) sleep 1 ;; *) break ;; esac
done
case "$root" in ''|0) exit 0 ;; esac
rss=0; gpu=-; n=0
while [ -d "/proc/$root" ]; do
  now=0
  for p in $(ps -e -o pid=,ppid= | awk -v r="$root" '{{up[$1] = $2}} END {{for (k in up)
      {{x = k; while (x != r && (x in up) && x + 0 > 1) x = up[x]; if (x == r) print k}}}}'); do
    kib="$(awk '/^Pss:/ {{print $2}}' "/proc/$p/smaps_rollup" 2>/dev/null || true)"
    now=$((now + ${{kib:-0}}))
  done
  [ "$now" -gt "$rss" ] && rss=$now
  if command -v nvidia-smi >/dev/null 2>&1; then
    mib="$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null \\
      | awk '$1 ~ /^[0-9]+$/ {{s += $1; n++}} END {{if (n) print s}}')"
    if [ -n "$mib" ] && {{ [ "$gpu" = - ] || [ "$mib" -gt "$gpu" ]; }}; then gpu=$mib; fi
  fi
  n=$((n + 1))
  echo "$rss $gpu $n" > {MEMORY_PEAK}.tmp && mv {MEMORY_PEAK}.tmp {MEMORY_PEAK}
  sleep {MEMORY_INTERVAL_S}
done"""


ENERGY_DIR = "/opt/servebench/energy"
ENERGY_LOG = f"{ENERGY_DIR}/readings"
ENERGY_INTERVAL_S = 0.1
ENERGY_LIFETIME_S = 12 * 3600  # a sampler outlived by its instance stops by itself
# the instance's GPUs' cumulative energy (NVML's nvmlDeviceGetTotalEnergyConsumption, mJ,
# Volta and later; nvidia-smi has no query field for it), summed, every ENERGY_INTERVAL_S into
# ENERGY_LOG as "<epoch s> <J>", after one header line: "source: <what counts>" or "none:
# <why>". Standard library only (ctypes on the driver's own libnvidia-ml.so.1): the GPU AMIs
# have python3 and the driver, and nothing is installed on the instance for it.
ENERGY_SAMPLER = f"""import ctypes, sys, time
out = open({ENERGY_LOG!r}, "a", buffering=1)
def stop(why):
    out.write("none: " + why + "\\n")
    sys.exit(0)
try:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
except OSError as exc:
    stop("no NVML on the instance (" + str(exc) + ")")
if nvml.nvmlInit_v2() != 0:
    stop("NVML did not initialise (no NVIDIA driver loaded)")
count = ctypes.c_uint(0)
nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
handles, names = [], []
for i in range(count.value):
    handle, name = ctypes.c_void_p(), ctypes.create_string_buffer(96)
    nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle))
    nvml.nvmlDeviceGetName(handle, name, 96)
    handles.append(handle)
    names.append(name.value.decode(errors="replace"))
if not handles:
    stop("NVML found no GPU")
def total():
    mj = 0
    for handle in handles:
        value = ctypes.c_ulonglong(0)
        rc = nvml.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(value))
        if rc != 0:
            stop("NVML has no total energy counter on this GPU (error " + str(rc) + ", "
                 "before Volta)")
        mj += value.value
    return mj / 1000
total()
shown = ", ".join(n + " x" + str(names.count(n)) if names.count(n) > 1 else n
                  for n in dict.fromkeys(names))
out.write("source: GPUs (NVML total energy consumption, " + str(len(handles)) + ": " + shown
          + "), the instance's every GPU, read on the instance\\n")
until = time.time() + {ENERGY_LIFETIME_S}
while time.time() < until:
    out.write("%.3f %.3f\\n" % (time.time(), total()))
    time.sleep({ENERGY_INTERVAL_S})
"""


def energy_sampler_lines(sampler: str = ENERGY_SAMPLER) -> list[str]:
    """Shell lines that restart ``sampler`` (ENERGY_SAMPLER) in the background, detached from
    the SSM command, on a fresh log; without python3 the log says so."""
    pid = f"{ENERGY_DIR}/pid"
    return [f"mkdir -p {ENERGY_DIR}",
            f'[ -s {pid} ] && kill "$(cat {pid})" 2>/dev/null || true',
            f"rm -f {ENERGY_LOG} {pid}",
            f"cat > {ENERGY_DIR}/sample.py <<'SERVEBENCH_EOF'", sampler, "SERVEBENCH_EOF",
            "if command -v python3 >/dev/null 2>&1; then",
            f"  nohup setsid python3 {ENERGY_DIR}/sample.py </dev/null >/dev/null 2>&1 &",
            f"  echo $! > {pid}",
            f"else echo 'none: no python3 on the instance to read NVML' > {ENERGY_LOG}; fi"]


def energy_readings_command(start: float, end: float, margin_s: float = 1.0) -> str:
    """The shell line that prints the readings log's header and its lines within
    ``margin_s`` of either end of a window (a few dozen lines, whatever the cell's length:
    SSM returns at most 24,000 characters)."""
    a0, a1, b0, b1 = start - margin_s, start + margin_s, end - margin_s, end + margin_s
    return (f"awk 'NR == 1 || ($1 >= {a0:.3f} && $1 <= {a1:.3f}) || "
            f"($1 >= {b0:.3f} && $1 <= {b1:.3f})' {ENERGY_LOG} 2>/dev/null || true")


def energy_header(text: str | None) -> tuple[str | None, str]:
    """(source, why): what the log's header says counts the instance's energy, or why
    nothing does (source None)."""
    first = (text or "").splitlines()[:1]
    line = first[0].strip() if first else ""
    if line.startswith("source: "):
        return line.removeprefix("source: "), ""
    if line.startswith("none: "):
        return None, line.removeprefix("none: ")
    return None, f"the instance kept no energy readings ({ENERGY_LOG}: {line[:200] or 'empty'})"


def instance_store_lines(model_cache: str) -> list[str]:
    """Shell lines that, once per instance (a mounted store is left as it is), put Docker's
    data and ``model_cache`` on the instance's NVMe instance-store volumes, when it has any:
    one is formatted (XFS), several are striped first (RAID 0); Docker is stopped while its
    data directory moves (no container runs yet at the first launch). A 70B model's weights
    and an engine image or two fit on the local NVMe of the instance types that serve them
    (several TB on p4d/p5/g6e), where a default root volume fills."""
    q = shlex.quote
    store, cache = q(INSTANCE_STORE), q(model_cache)
    return [
        f"if ! mountpoint -q {store}; then",
        "  devices=\"$(lsblk -d -n -o NAME,MODEL | awk "
        f"'/{INSTANCE_STORE_MODEL}/ {{print \"/dev/\" $1}}')\"",
        '  if [ -n "$devices" ]; then',
        "    set -- $devices",
        '    dev="$1"',
        '    if [ "$#" -gt 1 ]; then',
        '      mdadm --create /dev/md/servebench --run --level=0 --raid-devices="$#" "$@"',
        "      dev=/dev/md/servebench",
        "    fi",
        '    mkfs.xfs -f "$dev"',
        f'    mkdir -p {store} && mount "$dev" {store}',
        "    systemctl stop docker.socket docker",
        f"    mkdir -p {store}/docker {store}/model-cache /var/lib/docker {cache}",
        f"    mount --bind {store}/docker /var/lib/docker",
        f"    mount --bind {store}/model-cache {cache}",
        "    systemctl start docker",
        f'    echo {INSTANCE_STORE_MARK} "$dev ($# volume(s))"',
        "  fi",
        "fi"]


def render_script(launch: ContainerLaunch, spec: Ec2Provision, *, hub_cache: str) -> list[str]:
    """The shell lines SSM runs on the instance: its instance store put to use (the first
    time, where it has one: ``instance_store_lines``), the previous variant's container removed,
    every image but this variant's deleted (a target's variants may each bring an engine
    image of 10-20 GB: the root volume holds one, not all), the image pulled (its digest
    and the instance's GPUs printed for provenance), the new container started.
    Volumes under the worker's hub cache (``hub_cache``) map to the instance's
    ``model_cache``; any other host path is a path on the instance."""
    q = shlex.quote
    keep = f"docker image inspect --format '{{{{.Id}}}}' {q(launch.image)} 2>/dev/null || true"
    lines = ["set -eu", *(instance_store_lines(spec.model_cache) if spec.instance_store else []),
             f"docker rm -f {CONTAINER} >/dev/null 2>&1 || true",
             # the previous variants' images go; this one's stays (no second pull of it)
             f'keep="$({keep})"',
             'docker images --quiet --no-trunc | sort -u | { grep -vxF "${keep:-none}" '
             "|| true; } | xargs -r docker rmi --force >/dev/null 2>&1 || true",
             f"mkdir -p {q(spec.model_cache)}"]
    args = ["docker", "run", "-d", "--name", CONTAINER, "--restart", "no"]
    if launch.gpus:
        args += ["--gpus", str(launch.gpus)]
    if launch.shm_size:
        args += ["--shm-size", launch.shm_size]
    for container_port, host_port in sorted(launch.ports.items()):
        args += ["-p", f"{host_port}:{container_port}"]
    for host, inside in sorted(launch.volumes.items()):
        if host == hub_cache or host.startswith(hub_cache + "/"):
            host = spec.model_cache + host[len(hub_cache):]
        args += ["-v", f"{host}:{inside}"]
    for i, (inside, text) in enumerate(sorted(launch.files.items())):
        path = f"/opt/servebench/files/{i}-{inside.rsplit('/', 1)[-1]}"
        lines += ["mkdir -p /opt/servebench/files",
                  f"cat > {q(path)} <<'SERVEBENCH_EOF'", text.rstrip("\n"), "SERVEBENCH_EOF"]
        args += ["-v", f"{path}:{inside}:ro"]
    for key, value in sorted(launch.env.items()):
        args += ["-e", f"{key}={value}"]
    if spec.hf_token_parameter:
        lines.append(
            "HF_TOKEN=\"$(aws ssm get-parameter --with-decryption --name "
            f"{q(spec.hf_token_parameter)} --query Parameter.Value --output text)\"")
        lines.append("export HF_TOKEN")
        args += ["-e", "HF_TOKEN"]  # passed by name: its value is in no command line
    if launch.entrypoint:
        args += ["--entrypoint", launch.entrypoint[0]]
    args += [launch.image, *(launch.entrypoint or [])[1:], *launch.command]
    digest = ("docker image inspect --format '{{index .RepoDigests 0}}' "
              f"{q(launch.image)} 2>/dev/null || true")
    gpus = (f"nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader 2>/dev/null "
            "| paste -sd ';' - || true")
    cuda = ("nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\\([0-9.]*\\).*/\\1/p' "
            "| head -n 1 || true")
    lines += [f"docker pull {q(launch.image)}", f'echo {DIGEST_MARK} "$({digest})"',
              # the instance's own GPUs, for the cells' provenance (not the worker's)
              f'echo {GPU_MARK} "$({gpus})"', f'echo {CUDA_MARK} "$({cuda})"',
              *energy_sampler_lines(), *memory_sampler_lines(), shlex.join(args)]
    return lines


def memory_sampler_lines(sampler: str = MEMORY_SAMPLER) -> list[str]:
    """Shell lines that start ``sampler`` (MEMORY_SAMPLER) in the background, detached from
    the SSM command (which returns while it runs), the previous variant's peak removed."""
    return [f"mkdir -p {MEMORY_DIR}", f"rm -f {MEMORY_PEAK}",
            f"cat > {MEMORY_DIR}/sample.sh <<'SERVEBENCH_EOF'", sampler, "SERVEBENCH_EOF",
            f"nohup setsid bash {MEMORY_DIR}/sample.sh </dev/null >/dev/null 2>&1 &"]


def sampled_memory(text: str) -> MemorySample:
    """The sampler's peaks (MEMORY_PEAK's line) as a unit's memory; each None with why."""
    fields = text.split()
    if len(fields) != 3 or not fields[0].isdigit():
        return MemorySample.unmeasured("the instance kept no memory sample of the container "
                                       f"({MEMORY_PEAK}: {text.strip()[:200] or 'empty'})")
    rss_kib, gpu_mib, samples = fields
    how = f"every {MEMORY_INTERVAL_S} s on the instance from the container's start, {samples} " \
          "samples"
    device = (int(gpu_mib) * MIB, f"nvidia-smi memory.used, the instance's GPUs, {how}") \
        if gpu_mib.isdigit() else (None, "no nvidia-smi on the instance")
    return MemorySample(int(rss_kib) * 1024,
                        f"the container's process tree, Pss summed {how}", *device)


def script_marks(output: str) -> dict[str, str]:
    """What the script's output says after each of its marks (``DIGEST_MARK``, ``GPU_MARK``,
    ``CUDA_MARK``, ``INSTANCE_STORE_MARK``), by mark."""
    return {mark: line[len(mark):].strip() for line in output.splitlines()
            for mark in (DIGEST_MARK, GPU_MARK, CUDA_MARK, INSTANCE_STORE_MARK)
            if line.startswith(mark)}


@dataclass(frozen=True)
class Launched:
    """A variant's container on its target's instance: the image the launch asked for and,
    once the script ran, what its marks report (the digest it pulled, the instance's GPUs)."""

    target: str
    image: str
    digest: str | None = None
    gpus: str | None = None

    def reported(self, output: str, instance_id: str) -> Launched:
        """This launch with what the script's ``output`` marks (``script_marks``)."""
        marked = script_marks(output)
        if marked.get(INSTANCE_STORE_MARK):
            log.info("instance %s: Docker's images and the model cache on its instance store, "
                     "%s", instance_id, marked[INSTANCE_STORE_MARK])
        return replace(self, digest=marked.get(DIGEST_MARK) or self.digest,
                       gpus=describe_gpus(marked.get(GPU_MARK, "").split(";"),
                                          marked.get(CUDA_MARK) or None))

    @property
    def pulled(self) -> str:
        """The image's digest, where the script read one; else the image asked for."""
        return self.digest or self.image
