"""The container runtime of a stand-in EC2 host (see ec2_hosts.py): the ``docker`` that the
provisioner's SSM script calls, for a machine without a Docker engine.

It understands the commands that script uses -- ``rm -f``, ``pull``, ``image inspect``
(the digest, or ``{{.Id}}``), ``images --quiet``, ``rmi``, ``run -d``, ``inspect --format``
(the container's state) and ``logs --tail`` -- and runs a
container as the image's entrypoint process on the host, under a supervisor that keeps its
exit code as the Docker daemon does: the image maps (``DOCKER_SHIM_IMAGES``, JSON) to an
executable, its entrypoint, or to the programs on its PATH (name -> executable) that a run's
``--entrypoint`` names, as Docker resolves an entrypoint inside the image (``vllm`` in
``vllm/vllm-openai``); ``-v`` mounts map container paths in the arguments back to
host paths, ``-e`` sets the environment, and ``-p`` must publish a port as itself (the
process binds the host's port directly). State (pid, exit code, log) lives in
``DOCKER_SHIM_STATE``. Anything else it is asked is an error, so a
script that changes shape fails the test instead of passing by accident.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

STATE = Path(os.environ["DOCKER_SHIM_STATE"])
IMAGES: dict[str, str | dict[str, str]] = json.loads(os.environ["DOCKER_SHIM_IMAGES"])
VALUE_OPTS = {"--name", "--restart", "--gpus", "--shm-size", "-p", "-v", "-e", "--entrypoint"}


def _image(image: str) -> str | dict[str, str]:
    base = image.split("@", 1)[0]
    if base not in IMAGES:
        sys.exit(f"docker shim: no such image {image!r} (known: {sorted(IMAGES)})")
    return IMAGES[base]


def _image_exe(image: str, entrypoint: str | None) -> str:
    """What runs: the image's entrypoint, or the program of its own that ``--entrypoint``
    names (an image given as one executable has no other)."""
    found = _image(image)
    if entrypoint is None:
        if isinstance(found, dict):
            sys.exit(f"docker shim: image {image!r} is given by its programs: name one with "
                     "--entrypoint")
        return found
    if not isinstance(found, dict) or entrypoint not in found:
        programs = sorted(found) if isinstance(found, dict) else []
        sys.exit(f"docker shim: image {image!r} has no program {entrypoint!r} (its "
                 f"programs: {programs})")
    return found[entrypoint]


def _pulled() -> dict[str, str]:
    """Image id -> name of what this host has pulled (and not removed)."""
    path = STATE / "images.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _image_id(image: str) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


def _keep_pulled(images: dict[str, str]) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / "images.json").write_text(json.dumps(images))


def rm(args: list[str]) -> int:
    names = [a for a in args if not a.startswith("-")]
    for name in names:
        pid_file = STATE / f"{name}.pid"
        if not pid_file.exists():
            print(f"Error: No such container: {name}", file=sys.stderr)
            return 1
        pid = int(pid_file.read_text())
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        pid_file.unlink()
        (STATE / f"{name}.exit").unlink(missing_ok=True)
        print(name)
    return 0


def run(args: list[str]) -> int:
    opts: dict[str, list[str]] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "-d":
            i += 1
            continue
        if args[i] not in VALUE_OPTS:
            sys.exit(f"docker shim: option {args[i]!r} not understood")
        opts.setdefault(args[i], []).append(args[i + 1])
        i += 2
    image, command = args[i], args[i + 1:]
    exe = _image_exe(image, opts["--entrypoint"][0] if "--entrypoint" in opts else None)
    mounts = [v.split(":")[:2] for v in opts.get("-v", [])]
    for spec in opts.get("-p", []):
        host, inside = spec.split(":")
        if host != inside:
            sys.exit(f"docker shim: -p {spec}: only a port published as itself")

    def outside(arg: str) -> str:
        for host, inside in sorted(mounts, key=lambda m: -len(m[1])):
            if arg == inside or arg.startswith(inside + "/"):
                return host + arg[len(inside):]
        return arg

    env = dict(os.environ)
    for item in opts.get("-e", []):
        key, _, value = item.partition("=")
        if value or "=" in item:
            env[key] = value
    name = opts["--name"][0]
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / f"{name}.exit").unlink(missing_ok=True)
    log = (STATE / f"{name}.log").open("ab")
    proc = subprocess.Popen([sys.executable, __file__, "_supervise", name, exe,
                             *(outside(a) for a in command)], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    (STATE / f"{name}.pid").write_text(str(proc.pid))
    print(f"{proc.pid:064x}")
    return 0


def supervise(name: str, argv: list[str]) -> int:
    """The container's process, waited on: its exit code kept for ``inspect``."""
    try:
        code = subprocess.call(argv)
    except OSError as exc:  # docker reports an entrypoint it cannot exec as exit code 127
        print(f"exec {argv[0]}: {exc}", flush=True)
        code = 127
    (STATE / f"{name}.exit").write_text(str(code))
    return code


def inspect(args: list[str]) -> int:
    """``docker inspect --format '{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}'
    NAME`` and ``--format '{{.State.Pid}}'`` (the container's process on the host, 0 once it
    has exited: the supervisor, whose child the entrypoint is), the formats the provisioner
    asks."""
    name, fmt = args[-1], args[args.index("--format") + 1]
    if fmt not in ("{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}",
                   "{{.State.Pid}}"):
        sys.exit(f"docker shim: inspect format {fmt!r} not understood")
    if not (STATE / f"{name}.pid").exists():
        print(f"Error: No such object: {name}", file=sys.stderr)
        return 1
    exit_file = STATE / f"{name}.exit"
    if fmt == "{{.State.Pid}}":
        print(0 if exit_file.exists() else (STATE / f"{name}.pid").read_text().strip())
        return 0
    print(f"exited {exit_file.read_text().strip()} false" if exit_file.exists()
          else "running 0 false")
    return 0


def logs(args: list[str]) -> int:
    """``docker logs [--tail N] NAME``: the last N lines, or, as Docker, all of them."""
    name, tail = args[-1], int(args[args.index("--tail") + 1]) if "--tail" in args else 0
    path = STATE / f"{name}.log"
    if not path.exists():
        print(f"Error: No such container: {name}", file=sys.stderr)
        return 1
    print("\n".join(path.read_text(errors="replace").splitlines()[-tail:]))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["rm"]:
        return rm(argv[1:])
    if argv[:1] == ["run"]:
        return run(argv[1:])
    if argv[:1] == ["pull"]:
        _image(argv[1])
        _keep_pulled({**_pulled(), _image_id(argv[1]): argv[1]})
        print(f"{argv[1]}: pulled (shim)")
        return 0
    if argv[:2] == ["image", "inspect"]:
        image = argv[-1]
        if "{{.Id}}" in argv:  # only what was pulled has an id, as in Docker
            if _image_id(image) not in _pulled():
                print(f"Error: No such image: {image}", file=sys.stderr)
                return 1
            print(_image_id(image))
            return 0
        _image(image)
        print(image if "@" in image else "")
        return 0
    if argv[:1] == ["images"] and "--quiet" in argv:
        print("\n".join(_pulled()))
        return 0
    if argv[:1] == ["rmi"]:
        kept = _pulled()
        for image_id in (a for a in argv[1:] if not a.startswith("-")):
            kept.pop(image_id, None)
        _keep_pulled(kept)
        return 0
    if argv[:1] == ["logs"]:
        return logs(argv[1:])
    if argv[:1] == ["inspect"]:
        return inspect(argv[1:])
    if argv[:1] == ["_supervise"]:
        return supervise(argv[1], argv[2:])
    sys.exit(f"docker shim: command {argv[:2]} not understood")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
