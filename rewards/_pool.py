"""A pool of scoring processes that survives reward functions that hang or crash.

Each worker is a process (forked from a preloaded fork server) that scores a chunk of items one after another and sends the
chunk's results back in one message; it records the item it is working on in shared memory. Two
time limits protect the caller:

- inside the worker, every item runs under ``signal.setitimer`` (the worker's main thread), so a
  pure-Python hang becomes a per-item ``timeout`` error;
- outside, the pool (on the server's event loop) watches that record: a worker that spends more than
  ``item_timeout_s + grace_s`` on one item (stuck in C code) is killed, and so is noticed one that
  died (``os._exit``, segfault); the item it was on gets an error and the rest of its chunk is
  re-sent to a fresh worker (reward functions are pure, so re-scoring is harmless).

An item's result is a dict ``{"score", "components", "info", "error"}`` (``error`` is ``None`` on
success), JSON-encoded in the worker (:meth:`WorkerPool.score_json`) so that the server process only
stitches bytes together.
"""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from agentrl.types import Task
from rewards.registry import get_reward

STARTUP_TIMEOUT_S = 120.0
Item = tuple[str, str, dict[str, Any]]
"""``(reward_name, response, task_dict)``."""


class _ItemTimeout(BaseException):
    """Raised by SIGALRM inside a worker; a BaseException so that `except Exception` in a reward cannot swallow it."""


def error_result(message: str) -> dict[str, Any]:
    """The result of an item that could not be scored."""
    return {"score": 0.0, "components": {}, "info": {}, "error": message}


def _encoded_error(message: str) -> bytes:
    return json.dumps(error_result(message)).encode()


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def score_item(name: str, response: str, task_dict: dict[str, Any]) -> dict[str, Any]:
    """Score one item in this process (no time limit); errors become the item's ``error``."""
    try:
        out = get_reward(name, allow_import=False)(response, Task.from_dict(task_dict))
        return {"score": float(out.score), "components": {k: float(v) for k, v in out.components.items()},
                "info": _jsonable(out.info), "error": None}
    except Exception as e:  # noqa: BLE001 - a bad item must never fail the batch
        return error_result(f"{type(e).__name__}: {e}"[:500])


def _on_alarm(signum: int, frame: Any) -> None:
    raise _ItemTimeout


def _worker_main(conn: Any, progress: Any, plugins: list[str], item_timeout_s: float) -> None:
    """Worker loop: receive ``[(index, name, response, task_dict), ...]``, send ``[(index, result)]``.

    ``progress`` (shared memory) holds ``[index of the item being scored or -1, its start time]`` so
    that the parent can tell which item hangs without a message per item.
    """
    from rewards._sympy_worker import prestart
    from rewards.registry import load_object, register

    prestart()  # the math slow path's helper; its start-up must not count against an item
    for spec in plugins:
        register(spec, load_object(spec))
    signal.signal(signal.SIGALRM, _on_alarm)
    conn.send("ready")
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return
        prestart(wait=True)  # no-op once ready; the helper's start-up never counts as an item's time
        out = []
        for index, name, response, task_dict in batch:
            progress[0], progress[1] = index, time.monotonic()
            try:
                signal.setitimer(signal.ITIMER_REAL, item_timeout_s)
                result = score_item(name, response, task_dict)
                signal.setitimer(signal.ITIMER_REAL, 0)
            except _ItemTimeout:
                result = error_result(f"timeout: scoring took longer than {item_timeout_s}s")
            out.append((index, json.dumps(result).encode()))
        progress[0] = -1
        conn.send(out)


def _context() -> Any:
    """``forkserver`` where available (a restart forks from a clean, preloaded server: milliseconds,
    and no fork of this multi-threaded process), else ``spawn``."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["agentrl.types", "rewards.registry", "rewards.math", "rewards._pool"])
    return ctx


def _set_done(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


@dataclass
class _Job:
    items: list[Item]
    future: asyncio.Future


class _Worker:
    """One worker process, its pipe and its shared progress record."""

    def __init__(self, ctx: Any, plugins: list[str], item_timeout_s: float) -> None:
        self.conn, child = ctx.Pipe()
        self.progress = ctx.Array("d", [-1.0, 0.0], lock=False)
        self.proc = ctx.Process(target=_worker_main, args=(child, self.progress, plugins, item_timeout_s),
                                daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(STARTUP_TIMEOUT_S) or self.conn.recv() != "ready":
            self.kill()
            raise RuntimeError("a scoring worker did not start")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()


class WorkerPool:
    """``await pool.start()``, then ``await pool.score(items)`` -> one result dict per item, in order.

    Runs on the caller's event loop: one serving task per worker waits for that worker's pipe with
    ``loop.add_reader`` (no threads, no GIL hand-offs); only starting a worker runs in a thread.
    """

    def __init__(self, workers: int = 2, plugins: list[str] | None = None, item_timeout_s: float = 10.0,
                 grace_s: float = 2.0, chunk_size: int = 128) -> None:
        self.size = max(1, workers)
        self.plugins = list(plugins or [])
        self.item_timeout_s, self.grace_s, self.chunk_size = item_timeout_s, grace_s, chunk_size
        self.restarts = 0
        self._ctx = _context()
        self._jobs: asyncio.Queue[_Job] | None = None
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        """Start the worker processes (in parallel) and their serving tasks."""
        loop = asyncio.get_running_loop()
        self._jobs = asyncio.Queue()
        workers = await asyncio.gather(*(loop.run_in_executor(None, self._new_worker) for _ in range(self.size)))
        self._tasks = [asyncio.create_task(self._serve(w)) for w in workers]

    async def close(self) -> None:
        """Stop the serving tasks and kill the workers."""
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def score(self, items: list[Item]) -> list[dict[str, Any]]:
        """Score ``items`` across the workers; never raises for a bad item."""
        return [json.loads(r) for r in await self.score_json(items)]

    async def score_json(self, items: list[Item]) -> list[bytes]:
        """Like :meth:`score`, each result already JSON-encoded (by the worker)."""
        if not items:
            return []
        assert self._jobs is not None, "call `await pool.start()` first"
        loop = asyncio.get_running_loop()
        n = min(self.size, math.ceil(len(items) / 8))
        size = min(self.chunk_size, math.ceil(len(items) / n))
        jobs = [_Job(items[i:i + size], loop.create_future()) for i in range(0, len(items), size)]
        for job in jobs:
            self._jobs.put_nowait(job)
        parts = await asyncio.gather(*(job.future for job in jobs))
        return [r for part in parts for r in part]

    def _new_worker(self) -> _Worker:
        return _Worker(self._ctx, self.plugins, self.item_timeout_s)

    def _take(self, first: _Job) -> list[_Job]:
        """``first`` and this worker's share of the jobs queued behind it (queued / workers, at most
        ``chunk_size`` items): one message to the worker for many small requests (under load the pipe
        round trip, not the scoring, was most of a request), and the other workers still get theirs."""
        assert self._jobs is not None
        jobs, n = [first], len(first.items)
        share = math.ceil((1 + self._jobs.qsize()) / self.size)
        while not self._jobs.empty() and n < self.chunk_size and len(jobs) < share:
            job = self._jobs.get_nowait()
            jobs.append(job)
            n += len(job.items)
        return jobs

    async def _serve(self, worker: _Worker) -> None:
        assert self._jobs is not None
        try:
            while True:
                jobs = self._take(await self._jobs.get())
                items = [item for job in jobs for item in job.items]
                try:
                    worker, results = await self._run(worker, items)
                except Exception as e:  # noqa: BLE001 - keep serving
                    results = [_encoded_error(f"internal error: {e!r}")] * len(items)
                start = 0
                for job in jobs:
                    if not job.future.done():
                        job.future.set_result(results[start:start + len(job.items)])
                    start += len(job.items)
        finally:
            worker.kill()

    async def _restart(self, worker: _Worker) -> _Worker:
        worker.kill()
        self.restarts += 1
        return await asyncio.get_running_loop().run_in_executor(None, self._new_worker)

    async def _run(self, worker: _Worker, items: list[Item]) -> tuple[_Worker, list[bytes]]:
        results: list[bytes | None] = [None] * len(items)
        pending = list(range(len(items)))
        while pending:
            try:
                worker.conn.send([(i, *items[i]) for i in pending])
            except OSError:  # died while idle
                worker = await self._restart(worker)
                continue
            failure = await self._collect(worker, results)
            if failure is not None:
                stuck, why = failure
                results[stuck if stuck >= 0 else pending[0]] = _encoded_error(why)
                worker = await self._restart(worker)
            pending = [i for i in pending if results[i] is None]
        return worker, results  # type: ignore[return-value]

    async def _collect(self, worker: _Worker, results: list[bytes | None]) -> tuple[int, str] | None:
        """Wait for the chunk's results; on a hang or crash return ``(item index, why)``."""
        loop = asyncio.get_running_loop()
        limit = self.item_timeout_s + self.grace_s
        fd = worker.conn.fileno()
        while True:  # (multiprocessing's own poll() builds a selector per call: too slow here)
            ready = loop.create_future()
            loop.add_reader(fd, _set_done, ready)
            try:
                await asyncio.wait([ready], timeout=0.2)
            finally:
                loop.remove_reader(fd)
            if ready.done():
                break
            current, started = worker.progress[0], worker.progress[1]
            if not worker.proc.is_alive():
                return int(current), f"worker crashed (exit code {worker.proc.exitcode})"
            if current >= 0 and time.monotonic() - started > limit:
                return int(current), f"timeout: worker killed after {limit:.1f}s"
        try:
            # the event loop (uvloop) left the pipe non-blocking: a reader woken after the message's header
            # but before its body would get EAGAIN (an OSError) and take a live worker for a dead one
            os.set_blocking(fd, True)
            for index, result in worker.conn.recv():
                results[index] = result
        except (EOFError, OSError):
            return int(worker.progress[0]), f"worker crashed (exit code {worker.proc.exitcode})"
        return None
