"""The Docker backend: a pool of warm containers, each running the local backend's fork-server
(one long-lived `exec`, talked to over its attached stdin/stdout) as root inside the container;
it forks one child per job and drops it to a non-root uid.

Containers: `network_mode=none`, read-only root, tmpfs /tmp, memory (no swap), one CPU and pids
limits, all capabilities dropped except those the supervisor needs to drop privileges and clean up,
`no-new-privileges`; removed on `close()`. The supervisor's files are bind-mounted read-only from
this package's `_runtime` directory, so the Docker daemon must run on this host. Jobs (with the test
runner's secret) travel over the server's stdin, which the job's uid cannot read.

There is no pid namespace per job, so the server is a child subreaper and, after each job, kills
every process of the container's job uid and reaps it, and answers only once it has counted them
all gone (`_runtime/_leftovers.py`): the next job in the container never meets one, running or as
a zombie holding a slot of the uid's process limit.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import select
import struct
import threading
import time
import weakref
from typing import Any

from .types import Limits, Sandbox, failed_result

log = logging.getLogger(__name__)
DEFAULT_IMAGE = "python:3.11-slim"
IMAGE_ENV = "AGENTRL_SANDBOX_IMAGE"
LOCAL = "local"
RUNTIME_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_runtime")
LABEL = "agentrl.sandbox"
PRELOAD = ("math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
           "typing", "json", "random", "statistics", "fractions", "decimal", "hashlib", "datetime")
# pid 1 of each container; job processes never reach it (the fork-server is their subreaper)
REAPER = "import os, time\nwhile True:\n    try: os.wait()\n    except ChildProcessError: time.sleep(1)"


def resolve_image(client: Any, image: str | None) -> str:
    """The image to use: `image`, else $AGENTRL_SANDBOX_IMAGE, else python:3.11-slim (pulled if
    missing). "local", or a default that cannot be pulled, means the locally built image."""
    import docker

    from .docker_image import build_local_image

    name = image or os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE
    if name == LOCAL:
        return build_local_image(client)
    try:
        client.images.get(name)
        return name
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(name)
        return name
    except docker.errors.APIError as exc:
        if image is not None:
            raise
        log.warning("sandbox: cannot pull %s (%s); building the local image instead", name, exc)
        return build_local_image(client)


class ContainerServer:
    """The fork-server inside one container, reached through an attached exec."""

    def __init__(self, client: Any, container: Any, uid: int) -> None:
        cmd = ["python3", "-E", "-s", "/opt/sandbox/_server.py", ",".join(PRELOAD), str(uid)]
        exec_id = client.api.exec_create(container.id, cmd, stdin=True, user="0")
        sock = client.api.exec_start(exec_id, socket=True)
        self._sock = getattr(sock, "_sock", sock)
        self._keep = sock
        self._buf = b""
        self.info = self._read(time.monotonic() + 120.0)["ready"]

    def request(self, obj: dict, timeout_s: float) -> dict:
        """Send one request frame; wait at most `timeout_s` for the answer."""
        data = json.dumps(obj).encode()
        self._sock.sendall(struct.pack(">I", len(data)) + data)
        return self._read(time.monotonic() + timeout_s)

    def _read(self, deadline: float) -> dict:
        size = struct.unpack(">I", self._stdout(4, deadline))[0]
        return json.loads(self._stdout(size, deadline))

    def _stdout(self, n: int, deadline: float) -> bytes:
        """`n` bytes of the server's stdout, from Docker's multiplexed stream (8-byte headers)."""
        while len(self._buf) < n:
            kind, size = struct.unpack(">BxxxI", self._raw(8, deadline))
            payload = self._raw(size, deadline)
            if kind == 1:
                self._buf += payload
            elif payload:
                log.debug("sandbox container server stderr: %s", payload.decode(errors="replace"))
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def _raw(self, n: int, deadline: float) -> bytes:
        data = b""
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._sock], [], [], left)[0]:
                raise TimeoutError("container fork-server did not answer in time")
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("container fork-server exited")
            data += chunk
        return data


class DockerSandbox(Sandbox):
    """Runs jobs in a pool of warm containers (one per core by default)."""

    backend = "docker"

    def __init__(self, limits: Limits | None = None, *, image: str | None = None,
                 workers: int | None = None, client: Any = None) -> None:
        import docker

        super().__init__(limits)
        self.client = client or docker.from_env(timeout=max(120, int(self.limits.timeout_s) + 60))
        self.image = resolve_image(self.client, image)
        self.size = workers or os.cpu_count() or 1
        self._free: queue.LifoQueue[Any] = queue.LifoQueue()
        self._all: list[Any] = []
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _remove_all, self._all)

    def _start_container(self) -> Any:
        lim = self.limits
        mem = f"{lim.memory_mb + 256}m"
        container = self.client.containers.run(
            self.image, ["python3", "-c", REAPER], detach=True, network_mode="none",
            read_only=True, tmpfs={"/tmp": f"rw,size={lim.memory_mb}m,mode=1777",
                                   "/var/tmp": "rw,size=16m,mode=1777"},
            mem_limit=mem, memswap_limit=mem, nano_cpus=1_000_000_000,
            pids_limit=lim.max_processes + 16, cap_drop=["ALL"],
            cap_add=["SETUID", "SETGID", "KILL", "CHOWN", "FOWNER", "DAC_OVERRIDE"],
            security_opt=["no-new-privileges"], user="0", environment={"PATH": "/usr/local/bin:/usr/bin:/bin"},
            volumes={RUNTIME_DIR: {"bind": "/opt/sandbox", "mode": "ro"}}, labels={LABEL: "1"},
            auto_remove=False,
        )
        uid = 300000 + random.randrange(1_000_000)  # one per container: RLIMIT_NPROC counts per uid
        try:
            container.server = ContainerServer(self.client, container, uid)
        except BaseException:
            _remove_all([container])
            raise
        return container

    def _acquire(self) -> Any:
        while True:
            if self._closed:
                raise RuntimeError("sandbox is closed")
            try:
                return self._free.get(timeout=0.05 if self._all else 0)
            except queue.Empty:
                pass
            with self._lock:
                start = len(self._all) < self.size
                if start:
                    self._all.append(None)
            if start:
                try:
                    container = self._start_container()
                finally:
                    with self._lock:
                        self._all.remove(None)
                with self._lock:
                    self._all.append(container)
                return container

    def _release(self, container: Any, healthy: bool) -> None:
        if healthy and not self._closed:
            self._free.put(container)
            return
        with self._lock:
            if container in self._all:
                self._all.remove(container)
        _remove_all([container])

    def _execute(self, job: dict[str, Any]) -> dict[str, Any]:
        container = self._acquire()
        healthy = False
        try:
            result = container.server.request({"op": "run", "job": job}, job["limits"]["timeout_s"] + 60.0)
            healthy = not result.get("leftovers")  # else processes outlived the job: drop the container
            if not healthy:
                log.warning("sandbox: %d processes outlived a job; removing its container", result["leftovers"])
            return result
        except Exception as exc:  # the server, the container or the daemon broke off
            return failed_result(f"docker sandbox error: {exc}")
        finally:
            self._release(container, healthy)

    def close(self) -> None:
        """Remove every container; later runs raise RuntimeError."""
        self._closed = True
        with self._lock:
            containers = [c for c in self._all if c is not None]
            self._all.clear()
        _remove_all(containers)


def _remove_all(containers: list[Any]) -> None:
    for container in list(containers):
        if container is None:
            continue
        try:
            container.remove(force=True)
        except Exception:  # already gone
            pass
