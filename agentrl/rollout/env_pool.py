"""``EnvPool``: environment steps run concurrently, each under a deadline.

Executors hand the pool calls (``env.step(action)`` and the like) and collect their outcomes: a
pool of worker threads runs plain functions (env code that waits on a sandbox, a tool or the
network releases the GIL, so steps overlap), and one event loop thread runs coroutine functions
(``async def step``). A call that outlives ``timeout_s`` fails with :class:`StepTimeout`; its worker
thread is written off (a Python thread cannot be killed: it ends when the call returns) and a
fresh one takes its place, so the pool never shrinks. With ``workers <= 1`` and no deadline calls
run in the caller, one after another, as before.

Outcomes are :class:`Pending` handles: ``pool.wait_any(handles)`` blocks until at least one is
done; ``handle.result()`` returns the value or raises the call's exception.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import os
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from agentrl.env import TextEnv


def clone_env(env: TextEnv) -> TextEnv:
    """A fresh copy of ``env`` for one episode or one worker. Read-only bulk (the ``tasks`` dataset and
    the text spaces, of the env and of envs it wraps) is shared, not copied."""
    memo: dict[int, Any] = {}
    stack, seen = [env], set()
    while stack:
        e = stack.pop()
        seen.add(id(e))
        for name in ("tasks", "observation_space", "action_space"):  # read-only and large
            value = getattr(e, name, None)
            if value is not None:
                memo[id(value)] = value
        stack += [v for v in vars(e).values() if isinstance(v, TextEnv) and id(v) not in seen]
    return copy.deepcopy(env, memo=memo)


def failure_info(exc: BaseException) -> dict[str, str]:
    """What an episode's ``info`` records about the exception that failed it: ``error`` (one line),
    ``error_at`` (``file:line`` of the innermost frame, "" when there is none, e.g. a deadline) and
    ``traceback`` (from the env's own frames on: the executor's and the pool's are left out), so the
    trainer can show each distinct error once."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = os.path.dirname(os.path.abspath(__file__))  # agentrl/rollout: the pool and the executors
    while len(frames) > 1 and os.path.abspath(frames[0].filename).startswith(ours):
        frames = traceback.StackSummary.from_list(frames[1:])
    where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    lines = ["Traceback (most recent call last):\n", *frames.format()] if frames else []
    return {"error": f"{type(exc).__name__}: {exc}", "error_at": where,
            "traceback": "".join(lines + traceback.format_exception_only(type(exc), exc))}


class StepTimeout(TimeoutError):
    """An env call ran past the pool's deadline."""


class Pending:
    """The outcome of one submitted call (first finish wins: a late result after a timeout is dropped)."""

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self.fn, self.args = fn, args
        self.started: float | None = None
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.worker: threading.Thread | None = None
        self.task: Any = None  # the event loop's future, for coroutine calls

    def result(self) -> Any:
        if not self.done:
            raise RuntimeError("the call has not finished")
        if self.error is not None:
            raise self.error
        return self.value


class EnvPool:
    """``workers`` threads plus an event loop for coroutine functions; ``timeout_s`` per call (0 = none)."""

    def __init__(self, workers: int = 8, timeout_s: float = 0.0) -> None:
        self.workers, self.timeout_s = max(1, int(workers)), float(timeout_s)
        self.inline = self.workers <= 1 and self.timeout_s <= 0
        self._cv = threading.Condition()
        self._queue: deque[Pending] = deque()
        self._retired: set[threading.Thread] = set()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.replaced = 0  # workers written off after a timeout
        self.max_running = 0  # the most calls in flight at once (env-step concurrency)
        self._running = 0
        self._pid = os.getpid()

    def _after_fork(self) -> None:
        """In a forked child (the rollout worker process) the parent's threads and loop do not exist:
        start afresh with new ones (and a lock no parent thread can be holding)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._cv, self._queue, self._retired, self._threads = threading.Condition(), deque(), set(), []
            self._loop, self._running = None, 0

    # ------------------------------------------------------------------ submitting and waiting
    def submit(self, fn: Callable[..., Any], *args: Any) -> Pending:
        """Start ``fn(*args)`` (a coroutine function goes to the event loop)."""
        self._after_fork()
        p = Pending(fn, args)
        if inspect.iscoroutinefunction(fn):
            self._submit_async(p)
        elif self.inline:
            self._run(p)
        else:
            with self._cv:
                if not self._threads:
                    for _ in range(self.workers):
                        self._spawn()
                self._queue.append(p)
                self._cv.notify_all()
        return p

    def wait_any(self, pending: list[Pending]) -> list[Pending]:
        """Block until at least one of ``pending`` is done (enforcing deadlines); return the done ones."""
        if not pending:
            return []
        with self._cv:
            while True:
                self._expire(pending)
                done = [p for p in pending if p.done]
                if done:
                    return done
                self._cv.wait(timeout=self._next_deadline(pending))

    def wait_all(self, pending: list[Pending]) -> None:
        """Block until every call in ``pending`` is done (or timed out)."""
        left = [p for p in pending if not p.done]
        while left:
            self.wait_any(left)
            left = [p for p in left if not p.done]

    def map(self, fn: Callable[..., Any], args: list[tuple]) -> list[Pending]:
        """``fn(*a)`` for every ``a`` of ``args``, concurrently; all finished on return."""
        pending = [self.submit(fn, *a) for a in args]
        self.wait_all(pending)
        return pending

    def close(self) -> None:
        """Stop the workers and the event loop (calls still running are abandoned)."""
        with self._cv:
            self._retired.update(self._threads)
            self._threads = []
            self._cv.notify_all()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop = None

    # ------------------------------------------------------------------ internals
    def _finish(self, p: Pending, value: Any = None, error: BaseException | None = None) -> None:
        with self._cv:
            if p.done:
                return
            p.value, p.error, p.done = value, error, True
            self._running -= 1
            self._cv.notify_all()

    def _start(self, p: Pending) -> None:
        p.started = time.monotonic()
        self._running += 1
        self.max_running = max(self.max_running, self._running)

    def _run(self, p: Pending) -> None:
        with self._cv:
            self._start(p)
        try:
            value = p.fn(*p.args)
        except Exception as e:  # the env's error is this call's outcome
            self._finish(p, error=e)
        else:
            self._finish(p, value)

    def _spawn(self) -> None:
        t = threading.Thread(target=self._work, name="agentrl-env-worker", daemon=True)
        self._threads.append(t)
        t.start()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cv:
                while not self._queue and me not in self._retired:
                    self._cv.wait()
                if me in self._retired:
                    self._retired.discard(me)
                    return
                p = self._queue.popleft()
                p.worker = me
            self._run(p)
            if me in self._retired:  # written off while this call hung: a replacement runs already
                with self._cv:
                    self._retired.discard(me)
                return

    def _submit_async(self, p: Pending) -> None:
        with self._cv:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="agentrl-env-loop", daemon=True).start()
            self._start(p)

        async def call() -> None:
            try:
                value = await p.fn(*p.args)
            except Exception as e:
                self._finish(p, error=e)
            else:
                self._finish(p, value)

        p.task = asyncio.run_coroutine_threadsafe(call(), self._loop)

    def _expire(self, pending: list[Pending]) -> None:
        """Fail the calls of ``pending`` past their deadline; replace their workers (lock held)."""
        if self.timeout_s <= 0:
            return
        now = time.monotonic()
        for p in pending:
            if p.done or p.started is None or now - p.started < self.timeout_s:
                continue
            p.value, p.done = None, True
            p.error = StepTimeout(f"env call {getattr(p.fn, '__qualname__', p.fn)} ran past its "
                                  f"{self.timeout_s:g} s deadline")
            self._running -= 1
            if p.task is not None:
                p.task.cancel()
            elif p.worker is not None and p.worker in self._threads:
                self._threads.remove(p.worker)
                self._retired.add(p.worker)
                self.replaced += 1
                self._spawn()

    def _next_deadline(self, pending: list[Pending]) -> float | None:
        if self.timeout_s <= 0:
            return None
        started = [p.started for p in pending if not p.done and p.started is not None]
        if not started:
            return self.timeout_s
        return max(0.0, min(started) + self.timeout_s - time.monotonic()) + 1e-3
