"""The sessions of an env server: one env per WebSocket client or HTTP episode, capped, reaped when idle.

Every session steps its own copy of the served env (``clone_env`` of one env built at start-up: the
read-only task list is shared); a closed session's env is kept for the next session (a reset restarts
an episode, as Gymnasium's contract says), so a session costs no copy once the server is warm.
Env calls run on a thread pool or, once they prove cheap, on the event loop (:meth:`SessionTable.run`);
an env whose ``step`` is ``async def`` steps on the loop. The calls of one session run one at a time.

Payloads are OpenEnv's: an observation is ``{"observation": {"text", "info"}, "reward", "done"}``.
``info`` never carries the task's gold answer (``task_id`` and ``prompt`` are there); after a step it
says ``terminated`` and ``truncated`` (OpenEnv has only ``done``, their ``or``).
"""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agentrl.env import TextEnv
from agentrl.rollout.env_pool import clone_env
from agentrl.rollout.remote_env import jsonable
from agentrl.types import Task

CHEAP_CALLS, CHEAP_S, SLOW_S = 32, 0.002, 0.01
"""Auto mode: this many calls in a row under CHEAP_S move env calls onto the loop; one over SLOW_S moves them back."""


class SessionError(Exception):
    """A request the session cannot serve; ``code`` is OpenEnv's WebSocket error code, ``status`` the HTTP one."""

    def __init__(self, message: str, code: str = "EXECUTION_ERROR", status: int = 400) -> None:
        super().__init__(message)
        self.code, self.status = code, status


@dataclass
class Session:
    """One client's env and where its episode stands."""

    id: str
    env: TextEnv
    last_used: float = field(default_factory=time.monotonic)
    created: float = field(default_factory=time.time)
    step_count: int = 0
    episode_id: str | None = None
    task_id: str | None = None
    started: bool = False
    done: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def parse_task(value: Any) -> Task:
    """A pinned task from a reset message (``{"id", "prompt", "answer", "metadata"}``)."""
    if not isinstance(value, dict) or "id" not in value or "prompt" not in value:
        raise SessionError("reset 'task' must be an object with at least 'id' and 'prompt'", "VALIDATION_ERROR", 422)
    try:
        return Task.from_dict(value)
    except (TypeError, ValueError) as e:
        raise SessionError(f"reset 'task' is not a task: {e}", "VALIDATION_ERROR", 422) from None


def action_text(data: Any) -> str:
    """The ``text`` of an action (OpenEnv's action model: ``{"text": str, "metadata": {}}``)."""
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        raise SessionError("the action must be an object with a string field 'text'", "VALIDATION_ERROR", 422)
    extra = set(data) - {"text", "metadata"}
    if extra:
        raise SessionError(f"unknown action field {sorted(extra)[0]!r} (the action has 'text' and 'metadata')",
                           "VALIDATION_ERROR", 422)
    return data["text"]


def _close_env(env: TextEnv) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing must not fail the server
        pass


class SessionTable:
    """Sessions by id, at most ``max_sessions``; ``idle_timeout_s`` without a call closes one."""

    def __init__(self, template: TextEnv, factory: Callable[[], TextEnv], *, max_sessions: int = 256,
                 idle_timeout_s: float = 600.0, threads: int = 8, owns_template: bool = False) -> None:
        self.template, self.factory, self.owns_template = template, factory, owns_template
        self.max_sessions, self.idle_timeout_s = max(1, max_sessions), idle_timeout_s
        self.sessions: dict[str, Session] = {}
        self.spare: list[TextEnv] = []  # envs of closed sessions, reused (reset starts an episode afresh)
        self.auto = threads < 0
        self.executor = ThreadPoolExecutor(abs(threads) or 1, thread_name_prefix="agentrl-env") if threads else None
        self.inline = threads == 0  # auto: threads until calls prove cheap, see run()
        self.cheap_calls = 0
        self.async_step = inspect.iscoroutinefunction(getattr(template, "step", None))
        self.opened = self.reaped = 0

    def new_env(self) -> TextEnv:
        """An env for a new session: a closed session's (reset restarts it) or a fresh copy."""
        if self.spare:
            return self.spare.pop()
        try:
            return clone_env(self.template)
        except Exception:  # noqa: BLE001 - an env that cannot be copied is built afresh
            return self.factory()

    def open(self, session_id: str | None = None) -> Session:
        """A new session (``SessionError`` with code ``CAPACITY_REACHED`` when full)."""
        if len(self.sessions) >= self.max_sessions:
            raise SessionError(f"the server is at capacity ({self.max_sessions} sessions; --max-sessions raises it)",
                               "CAPACITY_REACHED", 503)
        sid = session_id or uuid.uuid4().hex
        session = self.sessions[sid] = Session(sid, self.new_env())
        self.opened += 1
        return session

    def evict_oldest(self, prefix: str) -> bool:
        """Close the least recently used idle session whose id starts with ``prefix`` (HTTP episodes, which
        clients may abandon after a reset); False when there is none."""
        idle = [s for sid, s in self.sessions.items() if sid.startswith(prefix) and not s.lock.locked()]
        if not idle:
            return False
        self.close(min(idle, key=lambda s: s.last_used).id)
        self.reaped += 1
        return True

    def get(self, session_id: str, name: str | None = None) -> Session:
        """The open session ``session_id`` (``name``: how the client calls it, for the error)."""
        session = self.sessions.get(session_id)
        if session is None:
            raise SessionError(f"unknown episode_id {(name or session_id)!r} (POST /reset starts one; idle ones close after "
                               f"{self.idle_timeout_s:g} s)", "SESSION_ERROR", 404)
        return session

    def close(self, session_id: str) -> None:
        """End a session; its env waits for the next one (closed for good only past ``max_sessions`` spares)."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        if len(self.spare) < self.max_sessions and not session.lock.locked():
            self.spare.append(session.env)
            return
        _close_env(session.env)

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the thread pool, or on the event loop when calls are cheap.

        ``threads`` > 0: always the pool; 0: always inline; < 0 (auto, the CLI's default): the pool until
        ``CHEAP_CALLS`` calls in a row each took under ``CHEAP_S``, then inline, and back to the pool for
        good the first time an inline call takes over ``SLOW_S`` (an env that blocks stalls the loop once).
        """
        if self.inline:
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            if self.auto and time.perf_counter() - start > SLOW_S:
                self.inline = self.auto = False
            return out
        took: list[float] = []

        def timed() -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                took.append(time.perf_counter() - start)

        out = await asyncio.get_running_loop().run_in_executor(self.executor, timed)
        if self.auto:
            self.cheap_calls = self.cheap_calls + 1 if took[0] < CHEAP_S else 0
            self.inline = self.cheap_calls >= CHEAP_CALLS
        return out

    async def reset(self, session: Session, data: dict[str, Any]) -> dict[str, Any]:
        """Start an episode: ``data`` may hold ``seed``, ``episode_id`` and a pinned ``task``."""
        seed = data.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise SessionError("'seed' must be a non-negative integer", "VALIDATION_ERROR", 422)
        options = {"task": parse_task(data["task"])} if data.get("task") is not None else None
        async with session.lock:
            session.last_used = time.monotonic()
            try:
                obs, info = await self.run(session.env.reset, seed=seed, options=options)
            except Exception as e:  # noqa: BLE001 - the env's error is this request's answer
                raise SessionError(f"env reset failed: {type(e).__name__}: {e}") from None
            session.started, session.done, session.step_count = True, False, 0
            session.episode_id = str(data.get("episode_id") or session.id)
            task = info.get("task")
            session.task_id = getattr(task, "id", info.get("task_id"))
            public = {k: v for k, v in info.items() if k != "task"}
            public.update(task_id=session.task_id, episode_id=session.episode_id)
            session.last_used = time.monotonic()
            return {"observation": {"text": str(obs), "info": jsonable(public)}, "reward": None, "done": False}

    async def step(self, session: Session, text: str) -> dict[str, Any]:
        """One action of the session's episode."""
        async with session.lock:
            if not session.started:
                raise SessionError("reset the session before stepping it", "SESSION_ERROR", 409)
            if session.done:
                raise SessionError("the episode is over (done was true); reset to start another", "SESSION_ERROR", 409)
            session.last_used = time.monotonic()
            try:
                if self.async_step:
                    out = await session.env.step(text)
                else:
                    out = await self.run(session.env.step, text)
            except Exception as e:  # noqa: BLE001 - the env's error is this request's answer
                raise SessionError(f"env step failed: {type(e).__name__}: {e}") from None
            obs, reward, terminated, truncated, info = out
            session.step_count += 1
            session.done = bool(terminated or truncated)
            session.last_used = time.monotonic()
            info = {**jsonable(info), "terminated": bool(terminated), "truncated": bool(truncated)}
            return {"observation": {"text": str(obs), "info": info}, "reward": float(reward), "done": session.done}

    @staticmethod
    def state(session: Session | None) -> dict[str, Any]:
        """OpenEnv's ``State``: ``episode_id`` and ``step_count``, with the task id and ``done``."""
        if session is None:
            return {"episode_id": None, "step_count": 0}
        return {"episode_id": session.episode_id, "step_count": session.step_count, "task_id": session.task_id,
                "done": session.done}

    async def reap_forever(self) -> None:
        """Close HTTP episodes idle past the timeout (checked every quarter of it, at most every 5 s)."""
        interval = max(0.05, min(5.0, self.idle_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            self.reap()

    def reap(self) -> int:
        """Close idle HTTP episodes (a WebSocket session is closed by its own connection's idle timeout,
        so its env is never handed to another session while the connection still holds it)."""
        now = time.monotonic()
        stale = [sid for sid, s in self.sessions.items() if sid.startswith("http:")
                 and now - s.last_used > self.idle_timeout_s and not s.lock.locked()]
        for sid in stale:
            self.close(sid)
        self.reaped += len(stale)
        return len(stale)

    def shutdown(self) -> None:
        """Close every session's env and the spares, then the template when the table owns it: the copies
        share its pools (started workspaces, parked runtimes), which only its close ends and waits for. A
        server must not leave that to an atexit hook: uvicorn re-raises SIGTERM after its shutdown."""
        for env in [s.env for s in self.sessions.values()] + self.spare:
            _close_env(env)
        if self.owns_template:
            _close_env(self.template)
        self.sessions.clear()
        self.spare.clear()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
