"""Rewards beyond the env's own: the reward server (``reward.remote_url``) and the reward model for
samples the env could not verify (``info["verified"] = False``)."""

from __future__ import annotations

import logging
from typing import Any

from agentrl.config import RewardConfig, RunConfig
from agentrl.types import Task, Trajectory

log = logging.getLogger(__name__)


def score_unverified(trajs: list[Trajectory], reward_model: Any) -> list[Trajectory]:
    """Score the samples the env could not verify with ``reward_model.score(trajectories)``, in place."""
    todo = [t for t in trajs if not t.info.get("verified", True)]
    if not todo:
        return trajs
    if reward_model is None:
        raise RuntimeError(f"{len(todo)} samples are unverified by the env and no reward.model is configured")
    for t, score in zip(todo, reward_model.score(todo)):
        t.reward = float(score)
        t.info["reward_model_score"] = float(score)
    return trajs


def score_remote(trajs: list[Trajectory], tasks: list[Task], client: Any, cfg: RewardConfig) -> list[Trajectory]:
    """The reward server scores every sample not failed already (in place of the env's reward).

    The client retries with backoff; a batch still unscored after ``reward.retries`` marks its
    samples failed (reward 0, ``info["error"]``) and training goes on, or stops with a clear error
    when ``reward.remote_strict`` is set. An item the server could not score fails that sample only.
    """
    if client is None:
        return trajs
    from rewards.client import RemoteRewardError

    by_id = {t.id: t for t in tasks}
    todo = [t for t in trajs if not t.info.get("failed")]
    responses = [t.info["response"] if "response" in t.info else "".join(t.info.get("responses", []))
                 for t in todo]
    try:
        results = client.score_batch(responses, [by_id[t.task_id] for t in todo])
    except RemoteRewardError as e:
        if cfg.remote_strict:
            raise RuntimeError(f"reward server {cfg.remote_url} failed and reward.remote_strict is set: {e}") from e
        log.error("reward server failed; %d samples marked failed: %s", len(todo), e)
        results = [None] * len(todo)
        for t in todo:
            t.info.update(failed=True, error=f"remote reward: {e}")
    for t, r in zip(todo, results):
        t.reward = 0.0 if r is None else float(r.score)
        if r is not None:
            t.info["reward_components"] = dict(r.components)
            if r.info.get("error"):
                t.info.update(failed=True, error=f"remote reward: {r.info['error']}")
    return trajs


def remote_reward_client(cfg: RewardConfig) -> Any:
    """The reward server client when ``reward.remote_url`` is set (``rewards.client.RemoteReward``)."""
    if not cfg.remote_url:
        return None
    from rewards.client import RemoteReward

    return RemoteReward(cfg.remote_url, reward=cfg.remote_reward, token=cfg.remote_token, timeout_s=cfg.timeout_s,
                        retries=cfg.retries)


def reward_model_scorer(cfg: RunConfig, tokenizer: Any) -> Any:
    """The reward model when ``reward.model`` is set (``.score(trajectories) -> list[float]``)."""
    if not cfg.reward.model:
        return None
    from agentrl.training.reward_model import RewardModel

    return RewardModel.load(cfg.reward.model, tokenizer=tokenizer, device=cfg.model.device)
