"""Environments on other machines: ``env.remote: [URL, ...]`` spreads a run's episodes over env servers.

Each URL is an ``agentrl serve-env ENV_ID`` server (OpenEnv's protocol, :mod:`agentrl.serving`). The
run still builds ``env.id`` locally for its tasks, prompts and reference answers (the task source, the
tiny model's tokenizer and the warm start need them); every episode's ``reset`` and ``step`` run on a
server, over a WebSocket session of its own, with the task pinned in the reset message (so a group's
samples see the same task wherever they run).

**Which server.** :class:`EnvServerPool` is shared by every episode of a run: a reset goes to the
healthy server with the fewest episodes in flight. A server that refuses a connection, drops it or
answers a reset with an error is marked down and the reset is retried on another one (``retries``
times); a down server is probed again (``GET /health``) after ``down_s`` seconds and comes back when
it answers. A finished episode's connection is kept for the next episode on its server; one that the
server closed while it was idle (its ``--idle-timeout``) is not a failure: the reset goes again on a
new connection. A connection whose reset or step failed or timed out is closed, never kept, so the
server ends that session (and its workspace) at once. A ``step`` is never retried: the episode's state lived on the server, so an episode whose
server dies fails (``RemoteEnvError``; the executor marks it ``info["failed"]`` and it leaves the
loss). ``info["env_server"]`` names the server every episode ran on.

Messages (the server's side is :mod:`agentrl.serving.sessions`): reset ``{"type": "reset", "data":
{"task": Task, "seed": int}}``, step ``{"type": "step", "data": {"text": action}}``; the answer is
``{"type": "observation", "data": {"observation": {"text", "info"}, "reward", "done"}}`` or
``{"type": "error", "data": {"message", "code"}}``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np

from agentrl.env import EnvError, TextEnv
from agentrl.types import Task


class RemoteEnvError(RuntimeError):
    """An env server failed an episode (it died, dropped the connection or answered with an error)."""


def jsonable(value: Any) -> Any:
    """``value`` with everything JSON cannot hold made plain: Tasks and dataclasses as dicts, numpy
    numbers as Python numbers, other objects as their ``str``."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict())
    return str(value)


@dataclass
class Server:
    """One env server of a pool: its URL, episodes in flight, health and idle connections."""

    url: str
    active: int = 0
    down_until: float = 0.0
    failures: int = 0
    episodes: int = 0
    idle: list[Any] = field(default_factory=list)

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http"):] + "/ws"


class EnvServerPool:
    """The servers of ``env.remote``: least-loaded choice, health, retries (see the module docstring)."""

    def __init__(self, urls: list[str], *, token: str | None = None, env_id: str | None = None,
                 timeout_s: float = 300.0, connect_timeout_s: float = 10.0, retries: int = 3,
                 down_s: float = 5.0) -> None:
        bad = [u for u in urls if not u.startswith(("http://", "https://"))]
        if not urls or bad:
            raise EnvError(f"env.remote: give a list of http:// URLs of `agentrl serve-env` servers, got {urls!r}")
        self.servers = [Server(u.rstrip("/")) for u in urls]
        self.token, self.env_id = token, env_id
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self.retries, self.down_s = max(0, retries), down_s
        self._lock = threading.Lock()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def check(self, max_turns: int | None = None, kwargs: dict[str, Any] | None = None) -> None:
        """Every server answers, serves ``env_id`` and ends an episode after ``max_turns`` turns as this run does
        (an :class:`EnvError` otherwise: an episode the run ends first would never be graded; ``kwargs``, the
        run's env kwargs, go into the message)."""
        import httpx

        for s in self.servers:
            try:
                meta = httpx.get(s.url + "/metadata", headers=self.headers, timeout=self.connect_timeout_s)
            except httpx.HTTPError as e:
                raise EnvError(f"env.remote: cannot reach {s.url} ({type(e).__name__}: {e}); start it with "
                               f"`agentrl serve-env {self.env_id or 'ENV_ID'} --port PORT`") from None
            if meta.status_code == 401:
                raise EnvError(f"env.remote: {s.url} wants a bearer token (set env.remote_token)")
            served = meta.json().get("name") if meta.status_code == 200 else None
            if self.env_id and served != self.env_id:
                raise EnvError(f"env.remote: {s.url} serves {served!r}, but this run's env.id is {self.env_id!r}")
            turns = meta.json().get("max_turns") if meta.status_code == 200 else None
            if max_turns is not None and isinstance(turns, int) and turns != max_turns:
                raise EnvError(f"env.remote: {s.url} ends an episode after {turns} turns, this run after {max_turns}: "
                               f"an episode one side ends first is never graded; start the server with the run's "
                               f"env.kwargs: agentrl serve-env {self.env_id or 'ENV_ID'} --kwargs "
                               f"'{json.dumps(kwargs or {})}'")

    # ------------------------------------------------------------------ choosing a server
    def _probe(self, s: Server) -> bool:
        import httpx

        try:
            ok = httpx.get(s.url + "/health", timeout=min(2.0, self.connect_timeout_s)).status_code == 200
        except httpx.HTTPError:
            ok = False
        if not ok:
            with self._lock:
                s.down_until = time.monotonic() + self.down_s
        return ok

    def acquire(self, exclude: set[str]) -> Server | None:
        """The healthy server with the fewest episodes in flight (its count taken), or None."""
        with self._lock:
            now = time.monotonic()
            up = [s for s in self.servers if s.url not in exclude and s.down_until <= now]
            recovering = [s for s in self.servers if s.url not in exclude and s.down_until > now]
        if not up:  # every server is marked down: see whether one came back
            up = [s for s in recovering if self._probe(s)]
        if not up:
            return None
        with self._lock:
            s = min(up, key=lambda s: (s.active, s.episodes))
            s.active += 1
            s.episodes += 1
            return s

    def release(self, s: Server, conn: Any = None) -> None:
        """The episode on ``s`` ended; a still-open ``conn`` is kept for the next episode there."""
        with self._lock:
            s.active -= 1
            if conn is not None:
                s.idle.append(conn)

    def mark_down(self, s: Server) -> None:
        with self._lock:
            s.failures += 1
            s.down_until = time.monotonic() + self.down_s
            stale, s.idle = s.idle, []
        for c in stale:
            _close_quietly(c)

    def connection(self, s: Server, fresh: bool = False) -> tuple[Any, bool]:
        """An open WebSocket to ``s`` and whether it was pooled: an idle one of an earlier episode (unless
        ``fresh``), or a new one."""
        with self._lock:
            if s.idle and not fresh:
                return s.idle.pop(), True
        import inspect

        from websockets.sync.client import connect

        direct = {"legacy": True} if "legacy" in inspect.signature(connect).parameters else {}  # websockets >= 16
        return connect(s.ws_url, additional_headers=self.headers, open_timeout=self.connect_timeout_s,
                       max_size=None, compression=None, **direct), False

    def close(self) -> None:
        """Close every idle connection."""
        for s in self.servers:
            with self._lock:
                stale, s.idle = s.idle, []
            for c in stale:
                _close_quietly(c)


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a dead connection
        pass


def exchange(conn: Any, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Send one message and return the answer's ``data`` (a :class:`RemoteEnvError` for an error answer)."""
    conn.send(json.dumps(message))
    reply = json.loads(conn.recv(timeout=timeout_s))
    if reply.get("type") == "error":
        data = reply.get("data") or {}
        raise RemoteEnvError(f"env server error ({data.get('code', 'UNKNOWN')}): {data.get('message', '')}")
    return reply.get("data") or {}


class RemoteEnv(TextEnv):
    """``env.id`` built locally for its tasks; its episodes reset and step on a pool of env servers.

    Copies (one per episode, made by the executors) share the local env and the pool and hold their own
    connection. ``remote_episodes`` tells ``make_executor`` to run every episode on its own copy.
    """

    remote_episodes = True

    def __init__(self, local: TextEnv, pool: EnvServerPool) -> None:
        super().__init__()
        self.local, self.pool = local, pool
        self.tasks = getattr(local, "tasks", None)
        self.max_turns = int(getattr(local, "max_turns", 1))
        self.feedback_role = getattr(local, "feedback_role", "user")
        self._server: Server | None = None
        self._conn: Any = None
        self._task: Task | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> RemoteEnv:
        return RemoteEnv(self.local, self.pool)

    # the task side is the local env's
    def sample_task(self, rng: np.random.Generator) -> Task:
        return self.local.sample_task(rng)

    def reference_answer(self, task: Task) -> str:
        return self.local.reference_answer(task)

    def render_prompt(self, task: Task) -> str:
        return self.local.render_prompt(task)

    def score(self, action: str, task: Task) -> Any:
        return self.local.score(action, task)

    # the episode side runs on a server
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        self._end(keep=False)
        gymnasium.Env.reset(self, seed=seed)  # seeds np_random (TextEnv.reset would draw a task here too)
        task = (options or {}).get("task") or self.local.sample_task(self.np_random)
        data: dict[str, Any] = {"task": task.to_dict()}
        if seed is not None:
            data["seed"] = int(seed)
        tried: set[str] = set()
        last: BaseException | None = None
        for _ in range(self.pool.retries + 1):
            server = self.pool.acquire(tried)
            if server is None:
                break
            tried.add(server.url)
            try:
                conn, reply = self._reset_on(server, data)
            except Exception as e:  # noqa: BLE001 - this server failed the reset: try another
                last = e
                self.pool.release(server)
                self.pool.mark_down(server)
                continue
            self._server, self._conn, self._task = server, conn, task
            obs = reply.get("observation") or {}
            info = dict(obs.get("info") or {})
            info.update(task=task, task_id=task.id, env_server=server.url)
            info.setdefault("prompt", task.prompt)
            return str(obs.get("text", "")), info
        raise RemoteEnvError(f"no env server could reset the episode (tried {sorted(tried) or 'none: all down'}): "
                             f"{type(last).__name__ + ': ' + str(last) if last else 'every server is down'}")

    def _reset_on(self, server: Server, data: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """(connection, reply) of a reset on ``server``. A pooled connection that the server closed while
        idle (its idle timeout) is not the server failing: the reset goes again on a new connection. A
        connection whose reset failed is closed, never pooled: the server ends that session (a reset
        that timed out would otherwise go on holding one, and its workspace, until the server's idle
        timeout)."""
        conn, pooled = self.pool.connection(server)
        try:
            return conn, exchange(conn, {"type": "reset", "data": data}, self.pool.timeout_s)
        except Exception as e:
            _close_quietly(conn)
            if not pooled or isinstance(e, (RemoteEnvError, TimeoutError)):  # the server's answer, or its silence
                raise
        conn, _ = self.pool.connection(server, fresh=True)
        try:
            return conn, exchange(conn, {"type": "reset", "data": data}, self.pool.timeout_s)
        except Exception:
            _close_quietly(conn)
            raise

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._conn is None or self._server is None:
            raise RuntimeError("call reset() before step()")
        server = self._server
        try:
            reply = exchange(self._conn, {"type": "step", "data": {"text": str(action)}}, self.pool.timeout_s)
        except RemoteEnvError:
            raise
        except Exception as e:  # noqa: BLE001 - the server died, timed out or dropped the connection mid-episode
            self._end(keep=False)  # closes the connection: the server ends the session (and its workspace)
            self.pool.mark_down(server)
            raise RemoteEnvError(f"env server {server.url} failed during the episode: {type(e).__name__}: {e}") from e
        obs = reply.get("observation") or {}
        info = dict(obs.get("info") or {})
        info["env_server"] = server.url
        done = bool(reply.get("done"))
        truncated = bool(info.pop("truncated", False))
        terminated = bool(info.pop("terminated", done and not truncated))
        if done:
            self._end(keep=True)
        return str(obs.get("text", "")), float(reply.get("reward") or 0.0), terminated, truncated, info

    def _end(self, keep: bool) -> None:
        """Give the episode's server back (its connection kept for the next episode when ``keep``)."""
        if self._server is not None:
            conn = self._conn if keep else None
            if not keep and self._conn is not None:
                _close_quietly(self._conn)
            self.pool.release(self._server, conn)
        self._server, self._conn = None, None

    def close(self) -> None:
        self._end(keep=self._conn is not None)
