"""Metrics of a batch of episodes, logged every step."""

from __future__ import annotations

import numpy as np

from agentrl.types import Trajectory


def rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Reward and length statistics of a batch of episodes."""
    rewards = np.array([t.reward for t in trajs], dtype=float)
    lengths = np.array([t.num_action_tokens for t in trajs], dtype=float)
    return {"reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()),
            "response_length/mean": float(lengths.mean()), "response_length/sum": float(lengths.sum()),
            "truncated/frac": float(np.mean([t.truncated for t in trajs])),
            "failed/count": float(sum(bool(t.info.get("failed")) for t in trajs))}
