"""Asynchronous training over Ray (``rollout.async: true`` with ``cluster.mode: ray``).

The one-process machinery (:mod:`agentrl.rollout.async_rollout`) is reused as it is: the driver's
:class:`~agentrl.rollout.async_rollout.RolloutWorker` thread calls ``produce()`` at most
``rollout.max_staleness`` policy versions ahead of the learner. What changes is where the work runs:

- **Engines** are :class:`VersionedEngineWorker` actors: an engine plus the policy version of its
  weights. A Ray actor runs one method at a time, so a weight load (``load_versioned``) always falls
  *between* two ``generate`` requests: a multi-turn episode in flight continues under the new weights,
  and each of its turns records the version that generated it (``info["action_versions"]``; a batch
  split over several engines records the oldest of their versions).
- **Env workers** (``cluster.env_workers.num`` > 0) are :class:`EnvWorker` actors, each holding a copy
  of the driver's env and an executor (with its env-step pool) that calls the engine actors directly:
  env steps and turn batching run beside the engines, and the driver only receives trajectories.
  :class:`EnvWorkerFleet` splits a batch of tasks over them (group ids as in one process).
- **Weights** go from policy rank 0 to the engines without the learner waiting:
  :class:`RemoteVersions.publish` queues ``named_weights`` on the policy ranks and, with its object
  ref, ``load_versioned`` on every engine, and returns. ``wait_for(v)`` (the rollout thread's
  staleness gate) returns once every engine has *loaded* version ``v`` or newer, so a batch started
  after it has no token older than ``v``.

Checkpoints are the one-process ones: the task position after the last trained batch; buffered and
in-flight batches are dropped, counted in ``async_dropped_samples`` and regenerated on resume.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from agentrl.config import RunConfig
from agentrl.distributed.proxies import EngineFleet
from agentrl.distributed.workers import EngineWorker, _setup_process
from agentrl.rollout.engines.base import Completion, SamplingParams
from agentrl.types import Task, Trajectory


class VersionedEngineWorker(EngineWorker):
    """An ``EngineWorker`` that knows the policy version of its weights (0: the initial policy)."""

    def __init__(self, cfg: RunConfig, model_path: str, *, rank: int, world_size: int, threads: int) -> None:
        super().__init__(cfg, model_path, rank=rank, world_size=world_size, threads=threads)
        self.version = 0

    def load_versioned(self, named: list[tuple[str, torch.Tensor]], version: int) -> int:
        """Load the weights of policy ``version`` (between two requests: the actor runs one call at a time)."""
        self.engine.load_weights(named)
        self.version = version
        return version

    def generate_versioned(self, prompts: list[list[int]], params: SamplingParams) -> tuple[list[Completion], int]:
        """Completions and the policy version that generated them."""
        return self.engine.generate(prompts, params), self.version


class _Handles:
    """The part of an ``ActorGroup`` a fleet needs, as plain actor handles (travels into other actors)."""

    def __init__(self, name: str, actors: list[Any]) -> None:
        self.name, self.actors = name, list(actors)

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        import ray

        return ray.get([getattr(a, method).remote(*args, **kwargs) for a in self.actors])


def handles(group: Any) -> _Handles:
    """The actor handles of ``group`` (an ``ActorGroup``) as an object other actors can hold."""
    return _Handles(group.name, group.actors)


class VersionedFleet(EngineFleet):
    """``EngineFleet`` over ``VersionedEngineWorker`` actors; ``version`` is that of the last request
    (the oldest engine's, when the request was split over several)."""

    def __init__(self, group: Any) -> None:
        super().__init__(handles(group), colocate=False)
        self.version = 0

    def _generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        results = self._spread("generate_versioned", prompt_token_ids, params)
        if results:
            self.version = min(v for _, v in results)
        return [c for part, _ in results for c in part]


class RemoteVersions:
    """The driver's view of the engines' versions: ``publish`` a new one (no waiting), ``wait_for`` one."""

    def __init__(self, policy: Any, engines: Any, version: int = 0) -> None:
        self.policy, self.engines = policy, engines
        self.latest = version  # newest version published
        self.loaded = version  # newest version every engine has loaded
        self._pending: list[tuple[int, list[Any]]] = []
        self._cv = threading.Condition()

    def publish(self, version: int) -> None:
        """Queue policy rank 0's weights as ``version`` for every engine; returns at once."""
        refs = self.policy.call_async("named_weights")  # every rank (ZeRO-3 gathers); rank 0 holds them
        loads = [e.load_versioned.remote(refs[0], version) for e in self.engines.actors]
        with self._cv:
            self._pending.append((version, loads + refs[1:]))
            self.latest = version
            self._cv.notify_all()

    def wait_for(self, version: int, stop: threading.Event) -> None:
        """Block until every engine has loaded ``version`` or newer (or ``stop`` is set); a failed load raises."""
        import ray

        while not stop.is_set():
            with self._cv:
                if self.loaded >= version:
                    return
                if not self._pending:
                    self._cv.wait(timeout=0.1)
                    continue
                v, refs = self._pending[0]
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0.1)
            if len(done) == len(refs):
                ray.get(refs)
                with self._cv:
                    self._pending.pop(0)
                    self.loaded = max(self.loaded, v)


class EnvWorker:
    """One env-worker actor: the driver's env (a copy) and its executor, on the engine actors
    (``versioned``: ``VersionedEngineWorker`` actors, rollout.async)."""

    def __init__(self, env: Any, cfg: RunConfig, model_path: str, engines: Any, versioned: bool, *, rank: int,
                 world_size: int, threads: int) -> None:
        _setup_process(threads)
        from agentrl.models import load_tokenizer
        from agentrl.rollout.build import make_executor

        self.fleet = VersionedFleet(engines) if versioned else EngineFleet(engines)
        self.executor = make_executor(cfg, env, self.fleet, load_tokenizer(model_path, cfg.model.trust_remote_code))

    def run(self, tasks: list[Task], group_offset: int, n_samples: int | None = None,
            params: SamplingParams | None = None) -> list[Trajectory]:
        return self.executor.run(tasks, group_offset=group_offset, n_samples=n_samples, params=params)

    def max_running(self) -> int:
        """The most env steps this worker has had in flight at once."""
        pool = getattr(self.executor, "pool", None)
        return 0 if pool is None else pool.max_running


class EnvWorkerFleet:
    """The executor interface (``run``) over env-worker actors: tasks split in contiguous chunks."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def run(self, tasks: list[Task], group_offset: int = 0, n_samples: int | None = None,
            params: SamplingParams | None = None) -> list[Trajectory]:
        """Episodes of ``tasks`` on the env workers; group ids ``group_offset + i`` as in one process."""
        import ray

        n = len(self.group.actors)
        size = max(1, -(-len(tasks) // n))
        refs = [self.group.actors[k // size].run.remote(tasks[k:k + size], group_offset + k, n_samples, params)
                for k in range(0, len(tasks), size)]
        return [t for part in ray.get(refs) for t in part]

    def max_running(self) -> int:
        """Env-step concurrency: the sum over workers of the most steps each had in flight."""
        return sum(self.group.call("max_running"))
