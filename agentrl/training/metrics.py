"""Metrics of a batch of episodes and of its experience, logged every step."""

from __future__ import annotations

from collections import Counter

import numpy as np

from agentrl.algorithms import correction_weights, mismatch_metrics, staleness_metrics
from agentrl.config import AlgoConfig
from agentrl.training.experience import Experience
from agentrl.types import Trajectory

END_REASONS = ("terminated", "env_truncated", "max_turns", "turn_budget", "episode_budget", "context_full", "failed")
"""How an episode ends (``info["end_reason"]``, set by the executors): the env ended it, the env truncated
it, it reached ``max_turns``, a (single-turn) response ran out of ``rollout.max_new_tokens``, the
episode ran out of ``rollout.max_total_tokens``, its next turn did not fit in the policy's context
(``rollout.context``), or the env raised."""


def rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Reward, length, turn and end-reason statistics of a batch of episodes.

    ``episode/turns`` is the mean number of policy turns per episode; ``episode/end_reason/<reason>``
    the fraction of episodes that ended for each reason in :data:`END_REASONS` (every reason is
    logged, 0 included, so curves do not come and go)."""
    rewards = np.array([t.reward for t in trajs], dtype=float)
    lengths = np.array([t.num_action_tokens for t in trajs], dtype=float)
    out = {"reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()),
           "response_length/mean": float(lengths.mean()), "response_length/sum": float(lengths.sum()),
           "truncated/frac": float(np.mean([t.truncated for t in trajs])),
           "failed/count": float(sum(bool(t.info.get("failed")) for t in trajs)),
           "episode/turns": float(np.mean([t.info.get("turns", sum(s.is_action for s in t.segments))
                                           for t in trajs]))}
    out.update(context_metrics(trajs))
    out.update(group_metrics(trajs))
    reasons = Counter(end_reason(t) for t in trajs)
    for reason in sorted(set(END_REASONS) | set(reasons)):
        out[f"episode/end_reason/{reason}"] = reasons.get(reason, 0) / max(1, len(trajs))
    return out


def group_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """``groups/count``: groups of two or more samples that did not fail; ``groups/varied``: those whose rewards
    differ (a group estimator learns from these only; none: the step has no reward signal)."""
    groups: dict[int, list[float]] = {}
    for t in trajs:
        if not t.info.get("failed"):
            groups.setdefault(t.group_id, []).append(t.reward)
    sized = [r for r in groups.values() if len(r) >= 2]
    return {"groups/count": float(len(sized)), "groups/varied": float(sum(max(r) > min(r) for r in sized))}


def end_reason(t: Trajectory) -> str:
    """``info["end_reason"]``, or one read off the flags for trajectories made without it."""
    if t.info.get("end_reason"):
        return str(t.info["end_reason"])
    if t.info.get("failed"):
        return "failed"
    return "turn_budget" if t.truncated else "terminated"


def context_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Context policies at work: compactions and truncations per episode, samples per episode, and the
    longest context the policy continued (``context/max_tokens``: mean over episodes, ``_max``: of the batch)."""
    longest = [float(t.info.get("context_max", len(t.prompt_ids) + len(t.response_ids))) for t in trajs]
    return {"episode/compactions": float(np.mean([t.info.get("compactions", 0) for t in trajs])),
            "episode/truncations": float(np.mean([t.info.get("truncations", 0) for t in trajs])),
            "episode/samples": float(np.mean([len(t.samples()) for t in trajs])),
            "context/max_tokens": float(np.mean(longest)), "context/max_tokens_max": float(max(longest))}
def offpolicy_metrics(exp: Experience, version: int, algo: AlgoConfig, max_staleness: int = 0) -> dict[str, float]:
    """``staleness/*`` (policy versions behind the learner's ``version``; ``staleness/frac_k`` for every k up
    to ``max_staleness``) and ``mismatch/*`` (engine vs learner log-probs, the correction's weights) of a batch."""
    out = {} if exp.versions is None else staleness_metrics(exp.versions, exp.action_mask, version, max_staleness)
    if exp.old_logprobs is not None and exp.engine_logprobs is not None:
        w = correction_weights(exp.old_logprobs, exp.engine_logprobs, exp.action_mask, tis_cap=algo.tis_cap,
                               mis_low=algo.mis_low, mis_high=algo.mis_high)
        out.update(mismatch_metrics(exp.old_logprobs, exp.engine_logprobs, exp.action_mask, w))
    return out
