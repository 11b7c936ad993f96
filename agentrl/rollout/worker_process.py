"""The rollout worker in its own process (``rollout.async`` in one process, the default worker).

A rollout *thread* in the learner's process competes with the learner for the cores and the GIL
(on 2 cores the synchronous demo was faster than the threaded asynchronous one).
:class:`ProcessRolloutWorker` keeps the interface and schedule of
:class:`~agentrl.rollout.async_rollout.RolloutWorker` but runs ``produce()`` in a child process
forked from the trainer at the first ``next``: the child owns the rollout half (the task source's
copy, the engine and its own copy of the weights, the executor, its env pool and sandbox), the
parent keeps the learner. Torch threads are split: one for the child, the rest for the learner.

- **Weights** travel through :class:`SharedWeights`, one shared-memory copy of the policy's
  tensors and the version they hold: the learner writes it after each update (``stage_weights``),
  the engine copies it into its model before its next request when it is newer, so weights change
  between engine requests only and a partial rollout's turns keep their versions.
- **Batches** come back pickled through a pipe, in order. Batch ``s`` starts once the shared
  weights are of version ``s - max_staleness`` or newer (the thread worker's staleness bound); the
  learner therefore never has more than ``max_staleness + 1`` batches made and not yet trained on.
- **Checkpoints**: the trainer stores the task position after the last batch it trained on;
  ``buffered_samples`` counts those received and not yet trained on (dropped, regenerated on
  resume). The child dies with the parent (``PR_SET_PDEATHSIG``), so a SIGKILLed run leaves none.

Forked, not spawned: the child starts in milliseconds with the trainer's state as it is (a spawned
one re-imports torch and rebuilds the run). What a fork cannot carry is made afresh in the child:
env-pool threads (``EnvPool`` checks its pid) and the default code sandbox's fork servers. CUDA
cannot be forked, so a CUDA-initialised process uses the thread worker (``rollout.async_worker``).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing as mp
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

from agentrl.rollout.async_rollout import ReadyBatches, RolloutBatch, VersionedEngine

log = logging.getLogger(__name__)


class SharedWeights:
    """The newest policy weights in shared memory plus their version (written by the learner, read
    by the rollout process's engine); one lock guards both."""

    def __init__(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int, ctx: Any) -> None:
        named = [(n, t.detach().clone().contiguous()) for n, t in named_tensors]
        self.names = [n for n, _ in named]
        self.tensors = [t.share_memory_() for _, t in named]
        self._version = ctx.Value("q", version, lock=False)
        self._cv = ctx.Condition(ctx.Lock())

    @property
    def version(self) -> int:
        return int(self._version.value)

    def write(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Copy the policy's weights in as ``version`` (same names and shapes as at creation)."""
        with self._cv, torch.no_grad():
            count = 0
            for (name, t), want, buf in zip(named_tensors, self.names, self.tensors):
                if name != want or t.shape != buf.shape:
                    raise ValueError(f"shared weights: got {name} {tuple(t.shape)}, expected {want} {tuple(buf.shape)}")
                buf.copy_(t.detach())
                count += 1
            if count != len(self.names):
                raise ValueError(f"shared weights: got {count} tensors, expected {len(self.names)}")
            self._version.value = version
            self._cv.notify_all()

    def load_newer(self, engine: Any, have: int) -> int | None:
        """Load the shared weights into ``engine`` when newer than version ``have``; their version, or None."""
        with self._cv:
            v = self.version
            if v <= have:
                return None
            engine.load_weights(zip(self.names, self.tensors))
            return v

    def wait_for(self, version: int, stop: Any) -> None:
        """Block until the shared weights are of ``version`` or newer (or ``stop`` is set)."""
        with self._cv:
            while self.version < version and not stop.is_set():
                self._cv.wait(timeout=0.1)


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except OSError:
            pass


def _fresh_sandbox() -> None:
    """The default code sandbox's fork servers belong to the parent: this process starts its own (the
    inherited object is kept alive with its finalizer detached, so nothing closes the parent's)."""
    testing = sys.modules.get("sandbox.testing")
    if testing is None or getattr(testing, "_default", None) is None:
        return
    old = testing._default
    finalizer = getattr(old, "_finalizer", None)
    if finalizer is not None:
        finalizer.detach()
    _INHERITED.append(old)
    testing._default = None


_INHERITED: list[Any] = []


class RolloutProcessError(RuntimeError):
    """An error of the rollout worker process whose own exception could not travel to the learner
    (it does not pickle, or unpickle, or is a ``SystemExit``/``KeyboardInterrupt``): its traceback text."""


def _for_learner(e: BaseException) -> BaseException:
    """What the learner raises for ``e`` raised in this process: ``e`` itself, with the child's traceback
    added as a note, when it is an ``Exception`` that survives a pickle round trip; otherwise a
    :class:`RolloutProcessError` holding the traceback text (never an object the learner cannot load)."""
    text = "".join(traceback.format_exception(e)).strip()
    if isinstance(e, Exception):
        try:
            e.add_note(f"in the rollout worker process:\n{text}")
            pickle.loads(pickle.dumps(e))
            return e
        except Exception:  # noqa: BLE001 - any failure to travel: send the text instead
            pass
    return RolloutProcessError(f"the rollout worker process raised:\n{text}")


class ProcessRolloutWorker(ReadyBatches):
    """``produce()`` in a forked child process, at most ``max_staleness`` versions ahead of the learner.

    ``weights()`` yields the policy's named tensors (the shared buffer's layout); ``env_pool`` (the
    executor's, optional) adds ``env/max_running`` (env-step concurrency) to each batch's metrics.
    """

    def __init__(self, produce: Callable[[], RolloutBatch], engine: VersionedEngine, max_staleness: int,
                 start_version: int = 0, *, weights: Callable[[], Iterable[tuple[str, torch.Tensor]]],
                 env_pool: Any = None) -> None:
        if max_staleness < 0:
            raise ValueError(f"rollout.max_staleness must be >= 0, got {max_staleness}")
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            raise ValueError("the rollout worker process is forked and CUDA cannot be: "
                             "set rollout.async_worker=thread")
        super().__init__()
        self.produce, self.engine, self.max_staleness = produce, engine, max_staleness
        self.weights, self.env_pool, self.start_version = weights, env_pool, start_version
        self._ended = False  # the child closed its end of the pipe
        self._proc: Any = None
        self._recv: Any = None
        self._stop: Any = None
        self._receiver: Any = None
        self._threads = 1

    # ------------------------------------------------------------------ the child
    def _child(self, send: Any) -> None:
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes us
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        torch.set_num_threads(1)
        _fresh_sandbox()
        step = self.start_version
        while not self._stop.is_set():
            self.engine.wait_for(step - self.max_staleness, self._stop)
            if self._stop.is_set():
                return
            try:
                item: RolloutBatch | BaseException = self.produce()
                if self.env_pool is not None:
                    item.metrics["env/max_running"] = float(self.env_pool.max_running)
                data = ForkingPickler.dumps(item)  # what ``send`` would do, but a failure is caught here
            except BaseException as e:  # handed to the learner (a batch that does not pickle too)
                item = _for_learner(e)
                data = ForkingPickler.dumps(item)
            send.send_bytes(data)
            step += 1
            if isinstance(item, BaseException):
                return

    # ------------------------------------------------------------------ the learner's side
    def _start(self) -> None:
        ctx = mp.get_context("fork")
        if self.engine.shared is None:
            self.engine.share(SharedWeights(self.weights(), self.engine.latest, ctx))
        self._stop = ctx.Event()
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=self._child, args=(send,), name="agentrl-rollout", daemon=True)
        self._proc.start()
        send.close()
        self._receiver = threading.Thread(target=self._receive, name="agentrl-rollout-receiver", daemon=True)
        self._receiver.start()
        self._threads = torch.get_num_threads()
        if self._threads > 1:  # one core is the rollout process's
            torch.set_num_threads(self._threads - 1)

    def _receive(self) -> None:
        """Take batches off the pipe as they come (the child never blocks on a full pipe). Whatever
        cannot be read ends the stream with the reason as the learner's error, never a silent stop."""
        while True:
            try:
                data = self._recv.recv_bytes()
            except (EOFError, OSError):
                break
            try:
                item = pickle.loads(data)
            except BaseException as e:  # noqa: BLE001 - e.g. a class whose __init__ rejects its own args
                self._put(RolloutProcessError(f"the rollout worker process sent {len(data)} bytes the learner "
                                              f"could not unpickle: {type(e).__name__}: {e}"))
                self._stop.set()
                break
            self._put(item)
            if isinstance(item, BaseException):
                break
        with self._cv:
            self._ended = True
            self._cv.notify_all()

    def next(self, version: int) -> RolloutBatch:
        """The oldest batch not yet trained on (made with weights of ``version - max_staleness`` or newer)."""
        if self._proc is None:
            self._start()
        return self._take(self._stopped, 0.5)

    def _stopped(self) -> str | None:
        """Why no batch will come (the child closed its pipe), or None."""
        if not self._ended:
            return None
        self._proc.join(timeout=5)
        code = self._proc.exitcode
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
            return f"the rollout worker process was killed by {name}"
        return f"the rollout worker process stopped (exit code {code})"

    def close(self) -> None:
        """Stop the child (the batch in flight is dropped) and give the learner its core back."""
        if self._proc is None:
            return
        self._stop.set()
        self._proc.join(timeout=2)
        if self._proc.is_alive():  # in the middle of a batch (or blocked sending one): not needed
            self._proc.terminate()
            self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._receiver.join(timeout=5)
        self._recv.close()
        if self._threads > 1:
            torch.set_num_threads(self._threads)


def make_rollouts(rollout: Any, produce: Callable[[], RolloutBatch], engine: Any, version: int,
                  weights: Callable[[], Iterable[tuple[str, torch.Tensor]]], env_pool: Any = None) -> Any:
    """The schedule of ``rollout`` (a ``RolloutConfig``): ``produce()`` inline (synchronous), or on a
    rollout worker process (``rollout.async_worker=process``, the default) or thread, at most
    ``rollout.max_staleness`` versions ahead of the learner."""
    from agentrl.rollout.async_rollout import InlineRollouts, RolloutWorker

    if not rollout.async_:
        return InlineRollouts(produce)
    if rollout.async_worker == "thread":
        return RolloutWorker(produce, engine, rollout.max_staleness, start_version=version)
    if rollout.async_worker != "process":
        raise ValueError(f"rollout.async_worker must be process or thread, got {rollout.async_worker!r}")
    return ProcessRolloutWorker(produce, engine, rollout.max_staleness, version, weights=weights, env_pool=env_pool)
