"""Advantage estimators (DESIGN.md step 6). Pure functions of tensors.

Shapes: ``rewards`` (B,) one scalar per sample; ``group_ids`` (B,) ties the samples of one prompt;
``mask`` (B,A) marks generated tokens; token tensors are (B,A).

Outcome estimators first turn the scalar rewards into shaped scores (GRPO's group norm, RLOO's
leave-one-out baseline, ...); the score is placed on the last generated token, an optional KL
penalty is added per token, and returns are the (discounted) reward-to-go over generated tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from agentrl.algorithms.losses import masked_whiten

ESTIMATORS = ("gae", "reinforce", "reinforce_baseline", "rloo", "group_norm", "dr_grpo")


def _group_stats(rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-sample group size, group sum and group sum of squares, each (B,)."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    k = int(inverse.max()) + 1 if inverse.numel() else 0
    r = rewards.to(torch.float64)
    count = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, torch.ones_like(r))
    total = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, r)
    sq = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, r * r)
    return count[inverse], total[inverse], sq[inverse]


def group_norm_scores(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: ``(r - mean_g) / (std_g + eps)`` with the unbiased std of the group; 0 for groups of 1."""
    n, s, sq = _group_stats(rewards, group_ids)
    mean = s / n
    var = ((sq - n * mean * mean) / (n - 1).clamp(min=1.0)).clamp(min=0.0)
    out = (rewards.to(torch.float64) - mean) / (var.sqrt() + eps)
    return torch.where(n > 1, out, torch.zeros_like(out)).to(rewards.dtype)


def dr_grpo_scores(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO: ``r - mean_g`` (no division by the group std)."""
    n, s, _ = _group_stats(rewards, group_ids)
    return (rewards.to(torch.float64) - s / n).to(rewards.dtype)


reinforce_baseline_scores = dr_grpo_scores
"""REINFORCE++-baseline subtracts the group mean too; it then whitens over the whole batch."""


def rloo_scores(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """RLOO: ``r_i - mean_{j != i} r_j`` within the group; 0 for groups of 1."""
    n, s, _ = _group_stats(rewards, group_ids)
    r = rewards.to(torch.float64)
    out = r - (s - r) / (n - 1).clamp(min=1.0)
    return torch.where(n > 1, out, torch.zeros_like(out)).to(rewards.dtype)


def token_level_rewards(scores: torch.Tensor, mask: torch.Tensor, kl: torch.Tensor | None = None,
                        kl_coef: float = 0.0) -> torch.Tensor:
    """Scores (B,) placed on each sample's last generated token, minus ``kl_coef * kl`` per token."""
    m = mask.to(torch.float32)
    positions = torch.arange(m.shape[-1], device=m.device).expand_as(m)
    last = torch.where(m > 0, positions, torch.full_like(positions, -1)).max(-1).values
    out = torch.zeros_like(m)
    has = last >= 0
    out[has, last[has]] = scores[has].to(out.dtype)
    if kl is not None and kl_coef:
        out = out - kl_coef * kl.to(out.dtype) * m
    return out


def discounted_returns(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Reward-to-go over generated tokens: ``G_t = r_t + gamma * G_next`` (B,A) -> (B,A).

    Positions outside ``mask`` (prompt, padding, environment feedback) pass the return through
    without discounting, so a multi-turn episode discounts per generated token.
    """
    m = mask.to(token_rewards.dtype)
    out = torch.zeros_like(token_rewards)
    running = torch.zeros_like(token_rewards[:, 0])
    for t in range(token_rewards.shape[-1] - 1, -1, -1):
        running = m[:, t] * (token_rewards[:, t] + gamma * running) + (1 - m[:, t]) * running
        out[:, t] = running
    return out * m


def gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over generated tokens: (B,A) x3 -> (advantages, returns).

    ``delta_t = r_t + gamma * V_next - V_t``, ``A_t = delta_t + gamma * lam * A_next``, where "next"
    is the next generated token (0 after the last); ``returns = A + V``.
    """
    m = mask.to(token_rewards.dtype)
    adv = torch.zeros_like(token_rewards)
    next_value = torch.zeros_like(token_rewards[:, 0])
    next_adv = torch.zeros_like(token_rewards[:, 0])
    for t in range(token_rewards.shape[-1] - 1, -1, -1):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        a = delta + gamma * lam * next_adv
        next_adv = m[:, t] * a + (1 - m[:, t]) * next_adv
        next_value = m[:, t] * values[:, t] + (1 - m[:, t]) * next_value
        adv[:, t] = a
    adv = adv * m
    return adv, (adv + values) * m


def episode_scores(score_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], rewards: torch.Tensor,
                   group_ids: torch.Tensor, episode_ids: torch.Tensor) -> torch.Tensor:
    """``score_fn(rewards, group_ids)`` with every episode counted once, mapped back to its rows (B,).

    ``rewards``, ``group_ids``, ``episode_ids`` (B,): the rows of one episode (its samples, when its
    context was reset) carry its reward and group; the group statistics (mean, std, leave-one-out)
    see each episode once, however many rows it has."""
    uniq, inverse = torch.unique(episode_ids, return_inverse=True)
    per_reward = torch.zeros(len(uniq), dtype=rewards.dtype).scatter_(0, inverse, rewards)
    per_group = torch.zeros(len(uniq), dtype=group_ids.dtype).scatter_(0, inverse, group_ids)
    return score_fn(per_reward, per_group)[inverse]


def weight_negative(advantages: torch.Tensor, weight: float) -> torch.Tensor:
    """``advantages`` (any shape) with every negative entry times ``weight`` (1: unchanged, the same tensor;
    0: only positive advantages left). Positive-sample reinforcement when 0; between 0 and 1 the push-down of
    worse-than-baseline samples is damped while the push-up of better ones is kept."""
    if weight == 1.0:
        return advantages
    return torch.where(advantages < 0, advantages * weight, advantages)


def compute_advantages(estimator: str, rewards: torch.Tensor, group_ids: torch.Tensor,
                       mask: torch.Tensor, *, values: torch.Tensor | None = None,
                       kl: torch.Tensor | None = None, kl_coef: float = 0.0, gamma: float = 1.0,
                       lam: float = 0.95, eps: float = 1e-6, episode_ids: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns, both (B,A), for a named estimator (see ``ESTIMATORS``).

    ``kl`` (B,A) with ``kl_coef`` > 0 adds the KL as a per-token reward penalty. ``episode_ids`` (B,)
    names each row's episode when an episode may be several rows (:func:`episode_scores`).
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; valid: {', '.join(ESTIMATORS)}")
    if estimator == "gae":
        if values is None:
            raise ValueError("the gae estimator needs critic values")
        return gae(token_level_rewards(rewards, mask, kl, kl_coef), values, mask, gamma, lam)
    score_fn = {
        "reinforce": lambda r, g: r,
        "reinforce_baseline": reinforce_baseline_scores,
        "rloo": rloo_scores,
        "group_norm": lambda r, g: group_norm_scores(r, g, eps),
        "dr_grpo": dr_grpo_scores,
    }[estimator]
    shaped = (score_fn(rewards, group_ids) if episode_ids is None
              else episode_scores(score_fn, rewards, group_ids, episode_ids))
    returns = discounted_returns(token_level_rewards(shaped, mask, kl, kl_coef), mask, gamma)
    if estimator in ("reinforce", "reinforce_baseline"):
        return masked_whiten(returns, mask), returns
    return returns, returns
