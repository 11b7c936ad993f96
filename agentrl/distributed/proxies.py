"""Driver-side handles with the interfaces the single-process stages use, backed by actor groups.

``Trainer.step`` calls ``learner.logprobs(exp)``, ``learner.train_step(exp, kl_coef)``,
``reference.logprobs(exp)``, ``critic.values(exp)``, ``engine.generate(prompts, params)``,
``reward_model.score(trajs)``: these classes answer the same calls by dispatching to Ray actors.
A batch goes into the object store once (``ray.put``) and every rank reads it from there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import torch

from agentrl.config import LearnerConfig
from agentrl.distributed.launch import ActorGroup
from agentrl.rollout.engines.base import Completion, SamplingParams
from agentrl.training.experience import Experience


class RemoteObject:
    """``handle.method(*args)`` runs ``method`` on the group's single actor and returns its result."""

    def __init__(self, group: ActorGroup) -> None:
        if len(group.actors) != 1:
            raise ValueError(f"cluster.{group.name}.num must be 1 (one {group.name} actor), got {len(group.actors)}")
        self.group = group

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_") or method == "group":
            raise AttributeError(method)
        import ray

        actor = self.group.actors[0]
        return lambda *args, **kwargs: ray.get(actor.call.remote(method, *args, **kwargs))


class _StateHandle:
    """``learner.optimizer`` / ``learner.scheduler`` of the policy group, for checkpoints.

    The optimizer's state is the list of every rank's (ZeRO: partitioned) state; the scheduler's is
    inside it, so the scheduler handle saves and loads nothing.
    """

    def __init__(self, group: ActorGroup, holds_state: bool) -> None:
        self.group, self.holds_state = group, holds_state

    def state_dict(self) -> Any:
        return self.group.call("optimizer_state") if self.holds_state else {}

    def load_state_dict(self, states: Any) -> None:
        if self.holds_state:
            self.group.call("load_optimizer_state", states)


class PolicyGroup:
    """The learner interface over ``cluster.policy.num`` data-parallel ``PolicyWorker`` ranks."""

    def __init__(self, group: ActorGroup, cfg: LearnerConfig) -> None:
        import ray

        self.group, self.cfg = group, cfg
        host, port = ray.get(group.actors[0].address.remote())
        group.call("setup", host, port)
        self.optimizer, self.scheduler = _StateHandle(group, True), _StateHandle(group, False)

    def needs_old_logprobs(self, batch_size: int) -> bool:
        """As ``PolicyLearner.needs_old_logprobs``: only when a batch gets several optimizer steps."""
        mini = self.cfg.mini_batch_size
        return self.cfg.ppo_epochs > 1 or 0 < mini < batch_size

    def logprobs(self, exp: Experience) -> torch.Tensor:
        """(B,A): each rank scores its shard of rows."""
        import ray

        return torch.cat(self.group.call("logprobs", ray.put(exp)), dim=0)

    def ref_logprobs(self, exp: Experience) -> torch.Tensor:
        """LoRA: the reference's log-probs (B,A), scored by the ranks with their adapters off."""
        import ray

        return torch.cat(self.group.call("ref_logprobs", ray.put(exp)), dim=0)

    def train_step(self, exp: Experience, kl_coef: float = 0.0) -> dict[str, float]:
        """One update on every rank; metrics are already reduced over ranks (rank 0's are returned)."""
        import ray

        return self.group.call("train_step", ray.put(exp), kl_coef)[0]


class EngineFleet:
    """``InferenceEngine`` over ``n`` engine actors: a batch is split in ``n`` chunks, each sent to
    the engine with the fewest prompts in flight; completions come back in the caller's order."""

    def __init__(self, group: ActorGroup, colocate: bool = False) -> None:
        self.group, self.colocate = group, colocate
        self.in_flight = [0] * len(group.actors)
        self.policy: ActorGroup | None = None
        """Colocated mode: the policy group, whose states are offloaded while the engines generate."""
        if colocate:
            self.sleep()

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        if not self.colocate:
            return self._generate(prompt_token_ids, params)
        if self.policy is not None:
            self.policy.call("offload")
        self.wake_up()
        try:
            return self._generate(prompt_token_ids, params)
        finally:
            self.sleep()
            if self.policy is not None:
                self.policy.call("reload")

    def _generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        return [c for part in self._spread("generate", prompt_token_ids, params) for c in part]

    def _spread(self, method: str, prompt_token_ids: list[list[int]], params: SamplingParams) -> list[Any]:
        """Call ``method(chunk, params)`` on the engines, one chunk of ``n`` each: a chunk goes to the
        engine with the fewest prompts in flight, counted as soon as it is picked (so the chunks of
        one request spread over the engines); the engines' results in the chunks' order."""
        import ray

        n = len(self.group.actors)
        size = -(-len(prompt_token_ids) // n) if prompt_token_ids else 1
        starts = range(0, len(prompt_token_ids), size)
        chunks = [prompt_token_ids[s:s + size] for s in starts]
        picks, refs = [], []
        for start, chunk in zip(starts, chunks):
            i = min(range(n), key=lambda k: self.in_flight[k])
            self.in_flight[i] += len(chunk)
            picks.append(i)
            part = params if params.row_seeds is None else replace(  # each chunk with its prompts' seeds
                params, row_seeds=params.row_seeds[start:start + size])
            refs.append(getattr(self.group.actors[i], method).remote(chunk, part))
        try:
            return ray.get(refs)
        finally:
            for i, chunk in zip(picks, chunks):
                self.in_flight[i] -= len(chunk)

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Push weights held by the caller (one object-store copy read by every engine)."""
        import ray

        ref = ray.put([(n, t.detach().cpu()) for n, t in named_tensors])
        self.group.call("load_weights", ref)

    def sleep(self) -> None:
        self.group.call("sleep")

    def wake_up(self) -> None:
        self.group.call("wake_up")
