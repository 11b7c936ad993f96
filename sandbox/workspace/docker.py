"""The Docker workspace backend: a container per workspace, built from the task's own Dockerfile.

- **Image**: a spec with a Dockerfile is built from it (``docker build``, no network, cached by a
  hash of the Dockerfile and its context). When its ``FROM`` image is not in the local daemon (no
  registry is reachable here) the same Dockerfile is built on the base image made from this host's
  Debian packages (:mod:`.docker_base`), and one line says so. A spec without a Dockerfile starts
  from that base image and its steps run in the container, as on the local backend.
- **Container**: ``network_mode=none`` unless the internet is allowed, memory (no swap), cpu and pids
  limits, capabilities dropped to those the runtime (root) needs to hand the tree to the agent and
  drop to its uid, ``no-new-privileges``. The agent is a user of its own (uid 10001) who owns the
  tree — the image's workdir and other non-system directories — as on the local backend, so it can
  neither change the system nor end its runtime. ``storage_mb`` caps each file (RLIMIT_FSIZE), ``/tmp``
  (a tmpfs) and the tree a seal returns (Docker caps a container's disk only on xfs with quotas).
- **Runtime**: the container's main process (pid 1) is the workspace's runtime, started by one
  ``docker run -i`` whose stdin and stdout are its protocol pipes — the same runtime as the local
  backend's, so commands, timeouts, trees and grading behave the same. The runtime's files are
  bind-mounted read-only; the task image needs a ``python3``. Docker's own errors (a missing image,
  a refused limit) end the start with docker's last line.
- **Lifetime**: closing the workspace closes the runtime's input; it ends every process, exits, and the
  container ends with it and is removed (``--rm``; the CLI returns once it is gone). If the owner dies
  (or the CLI does), the runtime sees the end of its input the same way; at worst it ends at its TTL.
  Containers are labelled with their owner (host, boot, pid), and the first Docker workspace of a
  process removes those whose owner is gone (a SIGKILLed run's).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from typing import Any

from .base import BuildError, Tree, WorkspaceError, WorkspaceSpec
from .runtime import RUNTIME_DIR, RuntimeWorkspace

log = logging.getLogger(__name__)
LABEL = "agentrl.workspace"
OWNER = "agentrl.workspace.owner"
MOUNT = "/opt/agentrl-runtime"
CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"]  # the runtime's, as root
AGENT_UID = 10001
GRADER_UID = 10002  # a grading container's grader (the verifier's shell; its programs run as AGENT_UID)
RUN_RUNTIME = f"import sys; sys.path.insert(0, {MOUNT!r}); import _workspace; _workspace.main()"
"""The runtime as an imported module: its byte-code is read, not compiled again (a script always is)."""
_reaped = False
_compiled = False
_build_lock = threading.Lock()
_warned: set[str] = set()


def owner_id(pid: int | None = None) -> str:
    """``host:boot:pid`` of a process of this machine (the label a container's owner is known by)."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return f"{socket.gethostname()}:{boot}:{pid if pid is not None else os.getpid()}"


def labelled_containers(client: Any) -> list[tuple[Any, dict]]:
    """Every workspace container (any state) with its labels, from one listing: a sparse list, since a
    full one inspects each container afterwards and fails on one that ends in between (they do)."""
    found = client.containers.list(all=True, sparse=True, filters={"label": LABEL})
    return [(c, c.attrs.get("Labels") or {}) for c in found]


def reap_orphans(client: Any) -> int:
    """Remove workspace containers whose owner process (on this machine, this boot) is gone."""
    host_boot = owner_id().rsplit(":", 1)[0]
    removed = 0
    for c, labels in labelled_containers(client):
        prefix, _, pid = labels.get(OWNER, "").rpartition(":")
        if prefix == host_boot and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                c.remove(force=True)
                removed += 1
            except Exception:  # noqa: BLE001 - already being removed
                pass
    return removed


def _compile_runtime() -> None:
    """Write the runtime's byte-code once per process (containers mount it read-only and would compile every
    module at every start); a read-only install is left as it is."""
    global _compiled
    if not _compiled:
        _compiled = True
        import compileall

        compileall.compile_dir(RUNTIME_DIR, quiet=2, workers=1)


_clients: dict[int, Any] = {}
_client_lock = threading.Lock()


def _client() -> Any:
    """This process's Docker client (made and pinged once; a forked child makes its own)."""
    with _client_lock:
        client = _clients.get(os.getpid())
        if client is not None:
            return client
        try:
            import docker

            client = docker.from_env(max_pool_size=32)
            client.ping()
        except Exception as e:  # noqa: BLE001 - the daemon is missing, stopped or unreachable
            raise WorkspaceError(f"the docker workspace backend needs a running Docker daemon ({e})") from e
        _clients.clear()
        _clients[os.getpid()] = client
        return client


class DockerWorkspace(RuntimeWorkspace):
    """A workspace in a container (see the module docstring)."""

    backend = "docker"

    def __init__(self, spec: WorkspaceSpec, tree: Tree | None = None, bare: bool = False) -> None:
        global _reaped
        self.client = _client()
        self.container_id: str | None = None
        self._cid_dir: str | None = None
        self._cli: subprocess.Popen | None = None
        if not _reaped:
            _reaped = True
            reap_orphans(self.client)
        self.image = image_for(self.client, spec)
        super().__init__(spec, tree, bare)

    def _build(self) -> None:
        if self.spec.dockerfile is None:  # steps on the base image, as the local backend runs them
            super()._build()

    def _uid(self) -> int:
        return AGENT_UID

    def _grader_uid(self, uid: int) -> int:
        return GRADER_UID

    @property
    def container(self) -> Any:
        """The workspace's container (docker-py's object; None once removed)."""
        return None if self.container_id is None else self.client.containers.get(self.container_id)

    def _launch(self) -> subprocess.Popen:
        """``docker run -i`` with the runtime as the container's main process, its stdin and stdout the
        protocol's pipes (one CLI call: no detached start, then a ``docker exec``)."""
        docker_cli = shutil.which("docker")
        if docker_cli is None:
            raise WorkspaceError("the docker workspace backend needs the docker command line client")
        lim = self.spec.limits
        self._cid_dir = tempfile.mkdtemp(prefix="agentrl-ws-cid-")
        cidfile = os.path.join(self._cid_dir, "cid")
        args = [docker_cli, "run", "-i", "--rm", "--sig-proxy=false", "--pull", "never", "--log-driver", "none",
                "--cidfile", cidfile, "--label", f"{LABEL}=1", "--label", f"{OWNER}={owner_id()}",
                "--network", "bridge" if lim.allow_internet else "none",
                "--memory", f"{lim.memory_mb}m", "--memory-swap", f"{lim.memory_mb}m", "--cpus", str(lim.cpus),
                "--pids-limit", str(lim.max_processes), "--cap-drop", "ALL",
                *[a for cap in CAPS for a in ("--cap-add", cap)], "--security-opt", "no-new-privileges",
                "--user", "0", "--workdir", "/", "--ulimit", f"fsize={int(lim.storage_mb) << 20}",
                "--volume", f"{RUNTIME_DIR}:{MOUNT}:ro", "--tmpfs", f"/tmp:size={lim.storage_mb}m,mode=1777",
                self.image, "python3", "-E", "-s", "-S", "-c", RUN_RUNTIME, "container"]
        _compile_runtime()
        with open(os.path.join(self._cid_dir, "stderr"), "wb") as err:  # docker's own errors, for _why
            self._cli = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         close_fds=True)
        return self._cli

    def _started(self) -> None:
        """Read the container's id once the runtime answered (the CLI wrote it before starting it)."""
        try:
            with open(os.path.join(self._cid_dir, "cid")) as f:
                self.container_id = f.read().strip() or None
        except OSError:
            pass  # the container was never made

    def _why(self) -> str:
        try:
            with open(os.path.join(self._cid_dir or "/nonexistent", "stderr"), errors="replace") as f:
                said = [line.strip() for line in f.read()[-2000:].splitlines()
                        if line.strip() and not line.startswith(("Run 'docker", "See 'docker"))]
        except OSError:
            said = []
        return f"docker run: {said[-1].removeprefix('docker: ')}" if said else super()._why()

    def _teardown(self) -> None:
        """Remove the container and wait until it is gone (its auto-removal may be under way)."""
        import docker

        if self._cid_dir is not None:
            if self.container_id is None:
                self._started()  # a start that failed once its container was made
            shutil.rmtree(self._cid_dir, ignore_errors=True)
            self._cid_dir = None
        cli, self._cli = self._cli, None
        if self.container_id is None:
            return
        cid, self.container_id = self.container_id, None
        if cli is not None and cli.returncode == 0:
            return  # the runtime ended and the CLI saw its container removed (--rm)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            try:
                self.client.api.remove_container(cid, force=True)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError:  # "removal already in progress": wait for it
                pass
            time.sleep(0.05)
        log.warning("workspace container %s was not removed within 30 s", cid[:12])


_images: dict[tuple[str | None, str | None], str] = {}


def image_for(client: Any, spec: WorkspaceSpec) -> str:
    """The image a workspace of ``spec`` starts from (see the module docstring), built when missing; found
    once per process and spec (an image removed under a running process fails its next start in one line)."""
    key = (spec.dockerfile, spec.context)
    if key not in _images:
        _images[key] = _find_image(client, spec)
    return _images[key]


def _find_image(client: Any, spec: WorkspaceSpec) -> str:
    from .docker_base import build_base_image

    if spec.dockerfile is None:
        return build_base_image(client)
    parsed_from = _from_line(spec.dockerfile)  # Docker builds every instruction itself
    text = spec.dockerfile
    if not _have(client, parsed_from):
        base = build_base_image(client)
        if parsed_from not in _warned:
            _warned.add(parsed_from)
            print(f"agentrl: image {parsed_from} is not available locally (no registry here); building "
                  f"{spec.name}'s Dockerfile on {base}, a Debian image made from this host's packages",
                  file=sys.stderr, flush=True)  # stdout is the caller's (agentrl tasks check --json)
        text = _replace_from(text, base)
    tag = "agentrl-task:" + _context_hash(spec.context, text)
    with _build_lock:
        if not _have(client, tag):
            try:
                client.images.build(fileobj=_context_tar(spec.context, text), custom_context=True, tag=tag,
                                    rm=True, forcerm=True, network_mode="none")
            except Exception as e:  # noqa: BLE001 - docker.errors.BuildError and APIError
                raise BuildError(build_failed(spec.name, e)) from None
    return tag


def build_failed(name: str, error: BaseException) -> str:
    """One line for a failed ``docker build``: a RUN step's failure as the local backend says it (with what the
    network has to do with it), else docker's own message."""
    from .dockerfile import run_failed

    text = str(error).strip()
    m = re.search(r"The command '(?:/bin/sh -c )?(.*?)' returned a non-zero code: (\d+)", text, re.S)
    if m is None:
        return f"{name}: docker build failed: {text[-400:]}"
    log = "".join(str(x.get("stream", "")) for x in getattr(error, "build_log", []) or [] if isinstance(x, dict))
    log = re.sub(r"\x1b\[[0-9;]*m", "", log).rsplit("---> Running in", 1)[-1].split("\n", 1)[-1]  # the step's output
    log = "\n".join(line for line in log.splitlines() if not line.strip().startswith("Removing intermediate"))
    return run_failed(f"{name}: docker build: RUN {m[1][:80]!r}", m[1], log or text, int(m[2]))


def _from_line(text: str) -> str:
    for line in text.splitlines():
        words = line.split()
        if words and words[0].upper() == "FROM" and len(words) > 1:
            return words[1]
    raise BuildError("the Dockerfile has no FROM line")


def _replace_from(text: str, base: str) -> str:
    out, done = [], False
    for line in text.splitlines():
        words = line.split()
        if not done and words and words[0].upper() == "FROM":
            line, done = f"FROM {base}", True
        out.append(line)
    return "\n".join(out) + "\n"


def _have(client: Any, image: str) -> bool:
    import docker

    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def _context_hash(context: str | None, dockerfile: str) -> str:
    h = hashlib.sha256(dockerfile.encode())
    for root, dirs, files in os.walk(context or "/nonexistent"):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, context).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def _context_tar(context: str | None, dockerfile: str) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if context:
            for name in sorted(os.listdir(context)):
                if name != "Dockerfile":
                    tar.add(os.path.join(context, name), arcname=name)
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf
