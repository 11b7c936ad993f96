"""Turn-level credit for multi-turn episodes (DESIGN.md "Credit and long episodes"). Pure tensor functions.

Shapes: E episodes of at most K env turns; ``turn_rewards`` (E,K) holds the reward of each ``env.step``
(0 past an episode's last turn), ``turn_mask`` (E,K) marks its turns, ``group_ids`` (E,) ties the
episodes of one task. The learner's batch has B samples (rows) of A action positions: ``episode_ids``
(B,) names the episode of each row (an episode whose context was reset is several rows), ``turn_ids``
(B,A) the turn of each generated token (-1 elsewhere), ``mask`` (B,A) the generated tokens.

- **Turn-level return-to-go** (``turn_gamma``): turn k of an episode scores ``G_k = r_k + gamma * G_{k+1}``,
  baselined per group as the outcome estimators do, with the group's statistics taken over its episodes'
  returns from their first turn (``G_0``). With ``gamma = 1`` and a reward on the last turn only, every
  turn's ``G_k`` is the episode's reward and the scores equal the trajectory-level ones.
- **Step groups** (GiGPO, ``step_weight``): turns that start from the same state (``step_ids``: one id per
  group and state key) form a step group; each turn's return is normalised within its step group
  (group_norm: mean and std; rloo: leave-one-out; the other estimators: the mean) and added, times
  ``step_weight``, to the episode-level score. A step group of one scores 0.
"""

from __future__ import annotations

import torch

from agentrl.algorithms.advantages import (
    discounted_returns,
    dr_grpo_scores,
    group_norm_scores,
    rloo_scores,
)
from agentrl.algorithms.losses import masked_whiten

TURN_ESTIMATORS = ("reinforce", "reinforce_baseline", "rloo", "group_norm", "dr_grpo")


def _check(estimator: str) -> None:
    if estimator not in TURN_ESTIMATORS:
        raise ValueError(f"turn-level credit works with the outcome estimators ({', '.join(TURN_ESTIMATORS)}), "
                         f"not {estimator!r}")


def turn_returns(turn_rewards: torch.Tensor, turn_mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Discounted return from each turn on: ``G_k = r_k + gamma * G_{k+1}`` over an episode's turns.

    (E,K), (E,K) -> (E,K); 0 outside ``turn_mask``.
    """
    m = turn_mask.to(turn_rewards.dtype)
    out = torch.zeros_like(turn_rewards)
    running = torch.zeros_like(turn_rewards[:, 0])
    for k in range(turn_rewards.shape[-1] - 1, -1, -1):
        running = m[:, k] * (turn_rewards[:, k] + gamma * running)
        out[:, k] = running
    return out


def _baseline_stats(first: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-episode group size, sum and sum of squares of the episodes' first-turn returns (E,) each."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    k = int(inverse.max()) + 1 if inverse.numel() else 0
    r = first.to(torch.float64)
    count = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, torch.ones_like(r))
    total = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, r)
    sq = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, r * r)
    return count[inverse], total[inverse], sq[inverse]


def turn_scores(estimator: str, returns: torch.Tensor, turn_mask: torch.Tensor, group_ids: torch.Tensor,
                eps: float = 1e-6) -> torch.Tensor:
    """Each turn's return baselined per group (see the module docstring): (E,K) -> (E,K).

    The baseline of episode i's group comes from the episodes' returns from their first turn
    (``returns[:, 0]``): group_norm ``(G_ik - mean) / (std + eps)`` (unbiased std; 0 for groups of
    one), dr_grpo and reinforce_baseline ``G_ik - mean``, rloo ``G_ik - mean of the others' G_j0``
    (0 for groups of one), reinforce ``G_ik``.
    """
    _check(estimator)
    m = turn_mask.to(returns.dtype)
    G = returns.to(torch.float64)
    if estimator == "reinforce":
        return (G * m).to(returns.dtype)
    n, s, sq = (x[:, None] for x in _baseline_stats(returns[:, 0], group_ids))
    if estimator in ("dr_grpo", "reinforce_baseline"):
        out = G - s / n
    elif estimator == "rloo":
        out = torch.where(n > 1, G - (s - G[:, :1]) / (n - 1).clamp(min=1.0), torch.zeros_like(G))
    else:  # group_norm
        mean = s / n
        var = ((sq - n * mean * mean) / (n - 1).clamp(min=1.0)).clamp(min=0.0)
        out = torch.where(n > 1, (G - mean) / (var.sqrt() + eps), torch.zeros_like(G))
    return (out * m).to(returns.dtype)


def step_group_scores(estimator: str, returns: torch.Tensor, turn_mask: torch.Tensor, step_ids: torch.Tensor,
                      eps: float = 1e-6) -> torch.Tensor:
    """GiGPO's step advantage: each turn's return normalised within its step group (E,K) -> (E,K).

    ``step_ids`` (E,K) long: turns with the same id started from the same state of the same task.
    group_norm normalises by the step group's mean and std, rloo by the mean of the others, every other
    estimator by the mean; a step group of one scores 0.
    """
    _check(estimator)
    keep = turn_mask.bool()
    flat, ids = returns[keep], step_ids[keep]
    out = torch.zeros_like(returns)
    if flat.numel() == 0:
        return out
    if estimator == "group_norm":
        scores = group_norm_scores(flat, ids, eps)
    elif estimator == "rloo":
        scores = rloo_scores(flat, ids)
    else:  # the mean alone (0 for a step group of one)
        scores = dr_grpo_scores(flat, ids)
    out[keep] = scores.to(out.dtype)
    return out


def episode_turn_scores(estimator: str, turn_rewards: torch.Tensor, turn_mask: torch.Tensor,
                        group_ids: torch.Tensor, rewards: torch.Tensor, step_ids: torch.Tensor | None = None, *,
                        turn_gamma: float | None = None, step_weight: float = 0.0, eps: float = 1e-6
                        ) -> torch.Tensor:
    """The score of every turn (E,K): turn-level return-to-go with ``turn_gamma`` (or, when it is None, the
    trajectory-level score of the episode's ``rewards`` (E,) on every turn), plus ``step_weight`` times the
    step-group score of the turns' returns (discounted by ``turn_gamma``, or not)."""
    _check(estimator)
    G = turn_returns(turn_rewards, turn_mask, 1.0 if turn_gamma is None else turn_gamma)
    if turn_gamma is None:
        episode = {"reinforce": lambda: rewards, "rloo": lambda: rloo_scores(rewards, group_ids),
                   "group_norm": lambda: group_norm_scores(rewards, group_ids, eps),
                   }.get(estimator, lambda: dr_grpo_scores(rewards, group_ids))()
        scores = episode[:, None].to(G.dtype) * turn_mask.to(G.dtype)
    else:
        scores = turn_scores(estimator, G, turn_mask, group_ids, eps)
    if step_weight:
        if step_ids is None:
            raise ValueError("step groups need step_ids (E,K)")
        scores = scores + step_weight * step_group_scores(estimator, G, turn_mask, step_ids, eps)
    return scores


def scatter_turns(scores: torch.Tensor, episode_ids: torch.Tensor, turn_ids: torch.Tensor,
                  mask: torch.Tensor) -> torch.Tensor:
    """Per-turn scores (E,K) onto the generated tokens of the rows: each token of row b with turn k gets
    ``scores[episode_ids[b], k]`` -> (B,A); 0 where ``mask`` is 0 or ``turn_ids`` is negative."""
    k = turn_ids.clamp(min=0, max=scores.shape[1] - 1)
    out = scores[episode_ids[:, None].expand_as(k), k]
    return out * ((turn_ids >= 0) & mask.bool()).to(out.dtype)


def compute_turn_advantages(estimator: str, turn_rewards: torch.Tensor, turn_mask: torch.Tensor,
                            group_ids: torch.Tensor, rewards: torch.Tensor, episode_ids: torch.Tensor,
                            turn_ids: torch.Tensor, mask: torch.Tensor, *, step_ids: torch.Tensor | None = None,
                            turn_gamma: float | None = None, step_weight: float = 0.0,
                            kl: torch.Tensor | None = None, kl_coef: float = 0.0, eps: float = 1e-6
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns (B,A) of every generated token from per-turn credit.

    Episode tensors (E,K) / (E,) as in :func:`episode_turn_scores`; row tensors as in the module docstring.
    With ``kl`` (B,A) and ``kl_coef`` > 0 the KL penalty's reward-to-go within each row is added (as
    :func:`~agentrl.algorithms.advantages.compute_advantages` adds it); reinforce and reinforce_baseline
    whiten over the batch's generated tokens, as there.
    """
    scores = episode_turn_scores(estimator, turn_rewards, turn_mask, group_ids, rewards, step_ids,
                                 turn_gamma=turn_gamma, step_weight=step_weight, eps=eps)
    returns = scatter_turns(scores, episode_ids, turn_ids, mask)
    if kl is not None and kl_coef:
        returns = returns + discounted_returns(-kl_coef * kl.to(returns.dtype) * mask.to(returns.dtype), mask)
    if estimator in ("reinforce", "reinforce_baseline"):
        return masked_whiten(returns, mask), returns
    return returns, returns

