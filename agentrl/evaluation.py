"""Held-out evaluation: greedy (or sampled) accuracy of the policy on a fixed set of tasks."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentrl.engines.base import SamplingParams
from agentrl.env import TextEnv
from agentrl.types import Task


def fixed_tasks(env: TextEnv, n: int, seed: int) -> list[Task]:
    """``n`` distinct tasks, the same for the same seed: the env's dataset if it has one, else drawn."""
    dataset = getattr(env, "tasks", None)
    if dataset is not None:
        rng = np.random.default_rng(seed)
        idx = rng.permutation(len(dataset))[:n] if n < len(dataset) else np.arange(len(dataset))
        return [dataset[int(i)] for i in sorted(idx)]
    rng = np.random.default_rng(seed)
    seen: dict[str, Task] = {}
    for _ in range(n * 50):
        t = env.sample_task(rng)
        seen.setdefault(t.id, t)
        if len(seen) >= n:
            break
    return list(seen.values())


def evaluate(executor: Any, tasks: list[Task], params: SamplingParams) -> dict[str, float]:
    """Run one sample per task; accuracy = share of reward >= 1 (exactly solved), mean reward."""
    trajs = executor.run(tasks, n_samples=1, params=params)
    rewards = [t.reward for t in trajs]
    return {"accuracy": float(np.mean([r >= 1.0 for r in rewards])) if rewards else 0.0,
            "mean_reward": float(np.mean(rewards)) if rewards else 0.0,
            "response_length": float(np.mean([t.num_action_tokens for t in trajs])) if trajs else 0.0}
