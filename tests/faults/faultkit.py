"""Fault injectors for ``tests/faults``: a crashing env, misbehaving HTTP servers, reward plugins,
and a real ``agentrl serve-reward`` subprocess on loopback.

Everything binds 127.0.0.1, every wait is bounded, and each helper ends only the processes it
started. The reward server subprocess finds this module as ``faultkit:<name>`` (its directory is
put on ``PYTHONPATH``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from agentrl.types import RewardResult, Task
from environments.arithmetic import ArithmeticEnv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEMO = ROOT / "examples" / "configs" / "cpu_demo.yaml"
SMALL = ["model.warm_start.enabled=false", "data.prompts_per_step=4", "rollout.n_samples=4",
         "data.eval_tasks=8", "log.progress=false", "log.tensorboard=false", "learner.max_seconds=0",
         "algo.drop_zero_std_groups=false"]


# ---------------------------------------------------------------------------------------- envs
class FlakyArithmetic(ArithmeticEnv):
    """``Arithmetic-v0`` whose ``step`` raises on every third call (an env bug or a lost connection)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = 0

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.calls += 1
        if self.calls % 3 == 0:
            raise RuntimeError("injected env fault")
        return super().step(action)


# ---------------------------------------------------------------------------------------- reward plugins
def hang(response: str, task: Task) -> RewardResult:
    """A reward plugin that never returns (a verifier stuck in a loop)."""
    deadline = time.monotonic() + 600  # bounded even if the server forgot its limit
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return RewardResult(0.0, {}, {})


def hang_on(response: str, task: Task) -> RewardResult:
    """Hangs when the response is ``hang``; otherwise 1.0 (scoring is instant)."""
    if response == "hang":
        return hang(response, task)
    return RewardResult(1.0, {"ok": 1.0}, {})


def zero(response: str, task: Task) -> RewardResult:
    """Scores every response 0 (a grader stricter than the env: the env's own reference answers fail it)."""
    return RewardResult(0.0, {"strict": 0.0}, {})


# ---------------------------------------------------------------------------------------- servers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BadServer:
    """A loopback HTTP server that answers ``POST /score`` wrongly, by ``mode``.

    ``garbage`` (200 with HTML), ``short`` (one result fewer than items), ``nan`` (a NaN score),
    ``slow`` (sleeps ``delay_s`` before a correct answer), ``503`` (always unavailable). ``hits``
    counts requests, so tests can check the client's retries.
    """

    def __init__(self, mode: str, delay_s: float = 0.0) -> None:
        self.mode, self.delay_s, self.hits = mode, delay_s, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                outer.hits += 1
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                n = len(body.get("items", []))
                if outer.mode == "slow":
                    time.sleep(outer.delay_s)
                if outer.mode == "503":
                    return self._send(503, b"unavailable", "text/plain")
                if outer.mode == "garbage":
                    return self._send(200, b"<html>502 Bad Gateway (upstream)</html>", "text/html")
                result = {"score": 1.0, "components": {}, "info": {}, "error": None}
                results = [result] * n
                if outer.mode == "short":
                    results = results[:-1]
                if outer.mode == "nan":
                    results = [{**result, "score": float("nan")}] * n
                self._send(200, json.dumps({"results": results}).encode(), "application/json")

            def _send(self, code: int, data: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out first
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> BadServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def server_env() -> dict[str, str]:
    """Environment of subprocesses: this directory importable (``faultkit:hang``), two threads."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


@contextmanager
def reward_server(*args: str, port: int | None = None, ready_s: float = 120.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """``agentrl serve-reward`` in a subprocess on 127.0.0.1; yields (url, process); stopped on exit."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "agentrl.cli", "serve-reward", "--port", str(port), *args]
    proc = subprocess.Popen(cmd, env=server_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"reward server exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            raise TimeoutError(f"reward server not ready in {ready_s} s")
        yield url, proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the process group we started, then SIGKILL it if it lingers."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 15)
            proc.wait(grace_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            proc.wait(grace_s)


def tree_rss(pid: int) -> int:
    """Resident memory in bytes of ``pid`` and its descendants (the server and its scoring workers)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total
