"""The Docker backend: a pool of warm containers; each job is one `exec` of the same supervisor the
local backend uses, as root inside the container, dropping the job to a non-root uid.

Containers: `network_mode=none`, read-only root, tmpfs /tmp, memory (no swap), one CPU and pids
limits, all capabilities dropped except those the supervisor needs to drop privileges and clean up,
`no-new-privileges`; removed on `close()`. The supervisor's files are bind-mounted read-only from
this package's `_runtime` directory, so the Docker daemon must run on this host. The job (with the test runner's secret)
travels in the exec's environment, which the job's uid cannot read.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import threading
import weakref
from typing import Any

from .types import Limits, Sandbox, failed_result

log = logging.getLogger(__name__)
DEFAULT_IMAGE = "python:3.11-slim"
IMAGE_ENV = "AGENTRL_SANDBOX_IMAGE"
LOCAL = "local"
RUNTIME_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_runtime")
LABEL = "agentrl.sandbox"
ENV_CHUNK = 100_000  # below the kernel's 128 KiB limit per environment string
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
        container.sandbox_uid = 300000 + random.randrange(1_000_000)  # per container: RLIMIT_NPROC
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
            data = json.dumps(job)
            env = {f"SANDBOX_JOB_{i}": data[k:k + ENV_CHUNK]
                   for i, k in enumerate(range(0, len(data), ENV_CHUNK))}
            cmd = ["python3", "-E", "-s", "/opt/sandbox/_supervisor.py", "env", str(container.sandbox_uid)]
            exec_id = self.client.api.exec_create(container.id, cmd, environment=env, user="0")
            out, err = self.client.api.exec_start(exec_id, demux=True)
            try:
                result = json.loads(out or b"")
                healthy = True
                return result
            except ValueError:
                return failed_result("sandbox supervisor failed in the container: " + (err or b"").decode()[-2000:])
        except Exception as exc:  # the container died or the daemon broke off
            return failed_result(f"docker error: {exc}")
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
