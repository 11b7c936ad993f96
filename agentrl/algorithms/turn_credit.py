"""Turn-level credit for multi-turn episodes (DESIGN.md "Credit and long episodes"). Pure tensor functions.

Shapes: E episodes of at most K env turns; ``turn_rewards`` (E,K) holds the reward of each ``env.step``
(0 past an episode's last turn), ``turn_mask`` (E,K) marks its turns, ``group_ids`` (E,) ties the
episodes of one task. The learner's batch has B samples (rows) of A action positions: ``episode_ids``
(B,) names the episode of each row (an episode whose context was reset is several rows), ``turn_ids``
(B,A) the turn of each generated token (-1 elsewhere), ``mask`` (B,A) the generated tokens.

- **Turn-level return-to-go** (``turn_gamma``): turn k of an episode scores ``G_k = r_k + gamma * G_{k+1}``,
  baselined per group as the outcome estimators do, with the group's statistics taken over its episodes'
  returns from their first turn (``G_0``). With ``gamma = 1`` and a reward on the last turn only, every
  turn's ``G_k`` is the episode's reward and the scores equal the trajectory-level ones. group_norm
  divides by the group's spread: the std of the ``G_0`` together with how far the turns' returns stray
  from their episode's ``G_0`` (root mean square of ``G_k - G_0``): a group of identical episodes with
  intermediate rewards has no spread of ``G_0`` but its later turns differ from the mean, and dividing
  those by the std alone made them explode (``-(past rewards) / eps``). Every group_norm turn score is
  bounded by ``sqrt(n K) + sqrt(n)`` (n episodes of at most K turns in the group).
- **Step groups** (GiGPO, ``step_weight``): turns that start from the same state (``step_ids``: one id per
  group and state key) form a step group; each turn's return is baselined by the mean return of the
  step group's turns of *other* episodes (group_norm: and divided by the step group's std). A turn in a
  state no other episode of its group reached is baselined by the other episodes' returns from their
  first turn instead (group_norm: divided as the turn-level score is); in a group of one it scores 0.
  A group_norm step score is bounded by ``sqrt(2 m)`` for a step group of m turns (m <= n K).

**Unbiased when the policy decides when to stop** (issue 43; docs/long_episodes.md). A per-turn score
``A_k = G_k - b_k`` gives an unbiased policy gradient (``E[sum_k grad log pi(a_k|s_k) A_k]`` is the gradient
of the expected return) when each baseline ``b_k`` is independent of the episode's own actions from turn
k on. A baseline built from the episode itself is not: a per-turn-index mean over the episodes that
reached turn k (the episode among them, in a set whose size the policy's stopping decides), or a step
group holding the episode's own later visits to a state, weigh each turn by how many episodes got
there: a hidden length bias. So every baseline here leaves the episode out (rloo), or keeps it in only
as one of the group's first-turn returns, which scales the whole gradient by ``(n-1)/n`` (dr_grpo,
reinforce_baseline: the same scale as their trajectory-level form). ``turn_gamma < 1`` discounts on
purpose (it is not the gradient of the undiscounted return), and group_norm's division by the group's
spread weighs groups (as GRPO's does); reinforce and reinforce_baseline whiten over the batch.
tests/test_credit_unbiased.py checks the gradients against exact ones on an enumerable MDP.
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


def group_spread(returns: torch.Tensor, turn_mask: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """group_norm's divisor per episode (E,): ``sqrt(var_g(G_0) + mean_g((G_k - G_0)^2))`` over the episode's
    group (unbiased variance of the first-turn returns; the mean over every turn of the group)."""
    m = turn_mask.to(torch.float64)
    G = returns.to(torch.float64)
    n, s, sq = _baseline_stats(G[:, 0], group_ids)
    mean = s / n
    var = ((sq - n * mean * mean) / (n - 1).clamp(min=1.0)).clamp(min=0.0)
    _, inverse = torch.unique(group_ids, return_inverse=True)
    k = int(inverse.max()) + 1 if inverse.numel() else 0
    stray = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, (((G - G[:, :1]) ** 2) * m).sum(1))
    turns = torch.zeros(k, dtype=torch.float64).index_add_(0, inverse, m.sum(1)).clamp(min=1.0)
    return (var + (stray / turns)[inverse]).sqrt()


def turn_scores(estimator: str, returns: torch.Tensor, turn_mask: torch.Tensor, group_ids: torch.Tensor,
                eps: float = 1e-6) -> torch.Tensor:
    """Each turn's return baselined per group (see the module docstring): (E,K) -> (E,K).

    The baseline of episode i's group comes from the episodes' returns from their first turn
    (``returns[:, 0]``): group_norm ``(G_ik - mean) / (spread + eps)`` (:func:`group_spread`; 0 for groups
    of one), dr_grpo and reinforce_baseline ``G_ik - mean``, rloo ``G_ik - mean of the others' G_j0`` (0 for
    groups of one), reinforce ``G_ik``.
    """
    _check(estimator)
    m = turn_mask.to(returns.dtype)
    G = returns.to(torch.float64)
    if estimator == "reinforce":
        return (G * m).to(returns.dtype)
    n, s, _ = (x[:, None] for x in _baseline_stats(returns[:, 0], group_ids))
    if estimator in ("dr_grpo", "reinforce_baseline"):
        out = G - s / n
    elif estimator == "rloo":
        out = torch.where(n > 1, G - (s - G[:, :1]) / (n - 1).clamp(min=1.0), torch.zeros_like(G))
    else:  # group_norm
        spread = group_spread(returns, turn_mask, group_ids)[:, None]
        out = torch.where(n > 1, (G - s / n) / (spread + eps), torch.zeros_like(G))
    return (out * m).to(returns.dtype)


def step_group_scores(estimator: str, returns: torch.Tensor, turn_mask: torch.Tensor, step_ids: torch.Tensor,
                      group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GiGPO's step advantage (E,K) -> (E,K): each turn's return less the mean return of its step group's
    turns of other episodes (group_norm: divided by the step group's std); a turn no other episode's turn
    shares a state with falls back to the other episodes' first-turn returns (see the module docstring).

    ``step_ids`` (E,K) long: turns with the same id started from the same state of the same task.
    """
    _check(estimator)
    keep = turn_mask.bool()
    out = torch.zeros_like(returns)
    if not keep.any():
        return out
    G = returns.to(torch.float64)
    episode = torch.arange(len(G))[:, None].expand_as(G)
    x, ids, eps_of = G[keep], step_ids[keep], episode[keep]
    _, group = torch.unique(ids, return_inverse=True)
    _, pair = torch.unique(torch.stack([group, eps_of], 1), dim=0, return_inverse=True)
    count, total, sq = (torch.zeros(int(group.max()) + 1, dtype=torch.float64).index_add_(0, group, v)
                        for v in (torch.ones_like(x), x, x * x))
    own_n, own_s = (torch.zeros(int(pair.max()) + 1, dtype=torch.float64).index_add_(0, pair, v)
                    for v in (torch.ones_like(x), x))
    others = count[group] - own_n[pair]
    score = x - (total[group] - own_s[pair]) / others.clamp(min=1.0)
    if estimator == "group_norm":
        m = count[group]
        var = ((sq[group] - total[group] ** 2 / m) / (m - 1).clamp(min=1.0)).clamp(min=0.0)
        score = score / (var.sqrt() + eps)
    fallback = _leave_one_out(estimator, returns, turn_mask, group_ids, eps)[keep]
    out[keep] = torch.where(others > 0, score, fallback).to(out.dtype)
    return out


def _leave_one_out(estimator: str, returns: torch.Tensor, turn_mask: torch.Tensor, group_ids: torch.Tensor,
                   eps: float) -> torch.Tensor:
    """Each turn's return less the mean of the other episodes' first-turn returns (group_norm: divided by
    :func:`group_spread`); 0 in a group of one. (E,K)."""
    scores = turn_scores("rloo", returns, turn_mask, group_ids, eps).to(torch.float64)
    if estimator == "group_norm":
        scores = scores / (group_spread(returns, turn_mask, group_ids)[:, None] + eps)
    return scores


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
        scores = scores + step_weight * step_group_scores(estimator, G, turn_mask, step_ids, group_ids, eps)
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

