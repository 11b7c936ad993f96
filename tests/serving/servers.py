"""Real servers on loopback for the serving tests: ``agentrl serve-env`` and OpenEnv apps (uvicorn) as
subprocesses on free ports. Every wait is bounded; each helper ends only the process it started. A server's
output goes to a file, never to a pipe no one reads: openenv-core's server logs a traceback for every
WebSocket a client closes, and once a pipe's 64 KiB were full its event loop blocked on the write (its
sessions stuck half-closed, new handshakes timed out, SIGTERM waited out the minute)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SERVE_ENV = "import sys; from agentrl.serving.env_server import cli_main; sys.exit(cli_main(sys.argv[1:]))"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environ() -> dict[str, str]:
    """This checkout and this folder first on the path (test envs import as ``slow_envs:...``)."""
    path = os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def wait_healthy(url: str, proc: subprocess.Popen, log: IO[str], timeout_s: float = 90.0) -> None:
    """Until ``url``/health answers 200; the server's output (``log``) in the error when it exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read()[-4000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not become healthy in {timeout_s} s")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, and SIGKILL only past a minute: a server ends its envs' workspaces on the way out (killed
    mid-way, the runtimes it had not ended end by themselves when their pipes close, a moment after it)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)


@contextmanager
def serve_env(env_id: str, *args: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """``agentrl serve-env ENV_ID ARGS`` on a free port: (its URL, its process)."""
    port = free_port()
    with _served([sys.executable, "-c", SERVE_ENV, env_id, "--port", str(port), *args], port, ROOT) as served:
        yield served


@contextmanager
def uvicorn_app(app: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """An ASGI app (``module:app``, found in this folder) under uvicorn on a free port."""
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    with _served(argv, port, HERE) as served:
        yield served


@contextmanager
def _served(argv: list[str], port: int, cwd: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """``argv`` started, its output to a file (see the module docstring), until healthy; stopped after."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(argv, cwd=cwd, env=environ(), stdout=log, stderr=subprocess.STDOUT, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc, log)
            yield url, proc
        finally:
            stop(proc)
