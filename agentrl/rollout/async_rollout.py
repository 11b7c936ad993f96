"""Rollouts that run ahead of the learner (``rollout.async``), with a staleness bound.

- :class:`VersionedEngine` wraps an engine with the policy ``version`` of its weights. The learner
  *stages* new weights after each update (a snapshot, so it may keep training); the engine takes
  them at its next ``generate`` call. Weights therefore change between engine requests only: a
  multi-turn episode in flight continues under the new weights, and each of its turns records the
  version that generated it (``info["action_versions"]``).
- :class:`RolloutWorker` calls ``produce()`` (the rollout half of a training step: tasks, episodes,
  rewards, selection) on a thread beside the learner. Batch ``s`` (the one the learner trains on at
  version ``s``) starts only once the engine has weights of version ``s - max_staleness`` or newer,
  so no trained token is more than ``max_staleness`` versions old; ``max_staleness = 0`` is the
  synchronous schedule. :class:`InlineRollouts` is the synchronous path behind the same interface.

Batches carry what a checkpoint needs: the task-source position after them. A checkpoint stores
the position after the last *consumed* batch, so batches buffered or in flight are dropped and
regenerated from the same tasks on resume (counted in ``async/dropped_samples``): none is lost and
none is trained on twice.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class RolloutBatch:
    """What ``produce()`` returns: the batch to train on, every trajectory generated (metrics), the
    rollout's metrics and the task-source state after its tasks were drawn."""

    batch: list[Any]
    generated: list[Any]
    metrics: dict[str, float] = field(default_factory=dict)
    tasks_state: dict[str, Any] | None = None


class VersionedEngine:
    """An engine plus the policy version of its weights; staged weights load between requests."""

    def __init__(self, engine: Any, version: int = 0) -> None:
        self.engine, self.version = engine, version
        self._staged: tuple[list[tuple[str, torch.Tensor]], int] | None = None
        self._lock = threading.Lock()
        self.published = threading.Condition(self._lock)
        self.latest = version  # newest version staged or loaded
        self.shared: Any = None  # ``SharedWeights`` once a rollout worker process uses this engine

    def stage_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Snapshot the policy's weights as ``version``; the engine loads them before its next request
        (in the rollout worker process, through shared memory, when there is one)."""
        if self.shared is not None:
            self.shared.write(named_tensors, version)
            self.latest = version
            return
        snapshot = [(n, t.detach().clone()) for n, t in named_tensors]
        with self.published:
            self._staged, self.latest = (snapshot, version), version
            self.published.notify_all()

    def share(self, shared: Any) -> None:
        """From now on weights travel through ``shared`` (a ``SharedWeights`` holding the newest ones)."""
        with self.published:
            self._staged, self.shared = None, shared

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int | None = None) -> None:
        """Load weights now (start and resume)."""
        with self.published:
            self.engine.load_weights(named_tensors)
            self._staged = None
            if version is not None:
                self.version = self.latest = version
            self.published.notify_all()

    def wait_for(self, version: int, stop: threading.Event) -> None:
        """Block until weights of ``version`` or newer are staged or loaded (or ``stop`` is set)."""
        if self.shared is not None:
            self.shared.wait_for(version, stop)
            return
        with self.published:
            while self.latest < version and not stop.is_set():
                self.published.wait(timeout=0.1)

    def generate(self, prompt_token_ids: list[list[int]], params: Any) -> list[Any]:
        if self.shared is not None:  # the newest weights the learner wrote to shared memory
            loaded = self.shared.load_newer(self.engine, self.version)
            if loaded is not None:
                self.version = loaded
        with self.published:
            staged, self._staged = self._staged, None
            if staged is not None:
                self.engine.load_weights(staged[0])
                self.version = staged[1]
        return self.engine.generate(prompt_token_ids, params)

    def __getattr__(self, name: str) -> Any:  # sleep, wake_up, tokenizer, ... of the wrapped engine
        return getattr(self.engine, name)


class InlineRollouts:
    """The synchronous schedule: ``next()`` runs ``produce()`` now."""

    def __init__(self, produce: Callable[[], RolloutBatch]) -> None:
        self.produce = produce

    def next(self, version: int) -> RolloutBatch:
        return self.produce()

    def buffered_samples(self) -> int:
        return 0

    def close(self) -> None:
        pass


class ReadyBatches:
    """Batches made and not yet trained on, handed from a producer to the learner's thread (the base of
    both rollout workers): ``_put`` an item (a batch, or the exception that ended the producer),
    ``_take`` the oldest one, ``buffered_samples`` for checkpoints."""

    def __init__(self) -> None:
        self._ready: deque[RolloutBatch | BaseException] = deque()
        self._cv = threading.Condition()

    def _put(self, item: RolloutBatch | BaseException) -> None:
        with self._cv:
            self._ready.append(item)
            self._cv.notify_all()

    def _take(self, stopped: Callable[[], str | None], poll: float) -> RolloutBatch:
        """The oldest item (raised if it is an exception); while none is ready, ``stopped()`` returns why
        no more will come (raised as a ``RuntimeError``) or None to keep waiting."""
        with self._cv:
            while not self._ready:
                why = stopped()
                if why:
                    raise RuntimeError(why)
                self._cv.wait(timeout=poll)
            item = self._ready.popleft()
            self._cv.notify_all()
        if isinstance(item, BaseException):
            raise item
        return item

    def buffered_samples(self) -> int:
        """Samples made and not yet trained on (a checkpoint drops them; resume regenerates them)."""
        with self._cv:
            return sum(len(b.generated) for b in self._ready if isinstance(b, RolloutBatch))


class RolloutWorker(ReadyBatches):
    """``produce()`` on a thread, at most ``max_staleness`` policy versions ahead of the learner.

    ``next(version)`` returns the batch for the learner at ``version`` (blocking until it is made);
    an exception in ``produce`` is raised there. ``start_version`` is the learner's version at start.
    """

    def __init__(self, produce: Callable[[], RolloutBatch], engine: VersionedEngine, max_staleness: int,
                 start_version: int = 0) -> None:
        if max_staleness < 0:
            raise ValueError(f"rollout.max_staleness must be >= 0, got {max_staleness}")
        super().__init__()
        self.produce, self.engine, self.max_staleness = produce, engine, max_staleness
        self.next_step = start_version  # the learner version the next produced batch is for
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="agentrl-rollout-worker", daemon=True)
        self._started = False  # the thread starts at the first ``next`` (after the run's first evaluation)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._cv:  # never more than max_staleness + 1 batches made and not yet trained on
                while len(self._ready) > self.max_staleness and not self._stop.is_set():
                    self._cv.wait(timeout=0.1)
            try:
                self.engine.wait_for(self.next_step - self.max_staleness, self._stop)
                if self._stop.is_set():
                    return
                item: RolloutBatch | BaseException = self.produce()
            except BaseException as e:  # handed to the learner's thread (a failed weight load too)
                item = e
            self.next_step += 1
            self._put(item)
            if isinstance(item, BaseException):
                return

    def next(self, version: int) -> RolloutBatch:
        """The oldest batch not yet trained on (made with weights of ``version - max_staleness`` or newer)."""
        if not self._started:
            self._started = True
            self._thread.start()
        return self._take(lambda: None if self._thread.is_alive() else "the rollout worker stopped", 0.1)

    def close(self) -> None:
        """Stop after the batch in flight (its samples are dropped)."""
        self._stop.set()
        with self._cv:
            self._cv.notify_all()
        if self._started:
            self._thread.join(timeout=600)
