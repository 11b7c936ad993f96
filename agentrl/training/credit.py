"""The advantage stage of a step: which estimator path a batch takes (DESIGN.md step 6).

- Trajectory-level (the default): every generated token of an episode gets the episode's score
  (``agentrl.algorithms.compute_advantages``). When an episode is several samples (its context was
  rebuilt) the group statistics count it once (``episode_ids``).
- Turn-level (``algo.turn_gamma`` and/or ``algo.step_adv_weight``): each turn's tokens get that turn's
  score from the per-turn rewards (``agentrl.algorithms.compute_turn_advantages``).
- Branch-point credit (``algo.branch_window``): either path's advantages kept only on the tokens from where
  a sample leaves its nearest sibling of another reward (``agentrl.algorithms.branch``).
"""

from __future__ import annotations

import torch

from agentrl.algorithms import compute_advantages, compute_turn_advantages, weight_negative
from agentrl.algorithms.branch import branch_window
from agentrl.config import AlgoConfig
from agentrl.training.experience import Experience


def uses_turn_credit(algo: AlgoConfig) -> bool:
    """Whether ``algo`` asks for turn-level credit."""
    return algo.turn_gamma is not None or bool(algo.step_adv_weight)


def batch_advantages(exp: Experience, algo: AlgoConfig, kl: torch.Tensor | None = None, kl_coef: float = 0.0
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns (B,A) of ``exp`` under ``algo``; ``kl`` (B,A) is the per-token KL penalty when
    the KL is in the reward (None otherwise)."""
    advantages, returns = _advantages(exp, algo, kl, kl_coef)
    if algo.branch_window is not None:
        advantages = advantages * branch_window(exp.sequences, exp.action_mask, exp.group_ids, exp.rewards,
                                                algo.branch_window)
    return weight_negative(advantages, algo.neg_adv_weight), returns


def _advantages(exp: Experience, algo: AlgoConfig, kl: torch.Tensor | None, kl_coef: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    if uses_turn_credit(algo):
        e = exp.episodes
        if e is None or exp.episode_ids is None or exp.turn_ids is None:
            raise ValueError("turn-level credit needs an Experience built by Experience.from_trajectories")
        return compute_turn_advantages(algo.estimator, e.turn_rewards, e.turn_mask, e.group_ids, e.rewards,
                                       exp.episode_ids, exp.turn_ids, exp.action_mask, step_ids=e.step_ids,
                                       turn_gamma=algo.turn_gamma, step_weight=algo.step_adv_weight, kl=kl,
                                       kl_coef=kl_coef, eps=algo.adv_eps)
    episode_ids = exp.episode_ids if exp.several_samples_per_episode else None
    return compute_advantages(algo.estimator, exp.rewards, exp.group_ids, exp.action_mask, values=exp.values,
                              kl=kl, kl_coef=kl_coef, gamma=algo.gamma, lam=algo.lam, eps=algo.adv_eps,
                              episode_ids=episode_ids)


def sample_metrics(exp: Experience, algo: AlgoConfig) -> dict[str, float]:
    """How the batch's episodes became samples (``samples/*``: count, tokens, the longest sample), with step
    groups how many turns share a state with another episode's (``credit/step_group_frac``), and with
    ``algo.branch_window`` the share of the generated tokens of varied groups that keep their credit
    (``credit/branch_kept``)."""
    episodes = len(torch.unique(exp.episode_ids)) if exp.episode_ids is not None else len(exp)
    lengths = exp.attention_mask.sum(-1)
    out = {"samples/count": float(len(exp)), "samples/tokens": float(lengths.sum().item()),
           "samples/max_tokens": float(lengths.max().item()), "samples/per_episode": len(exp) / max(episodes, 1)}
    if algo.step_adv_weight and exp.episodes is not None:
        e = exp.episodes
        ids = e.step_ids[e.turn_mask.bool()]
        _, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)
        out["credit/step_group_frac"] = float((counts[inverse] > 1).float().mean()) if ids.numel() else 0.0
    if algo.branch_window is not None:
        keep = branch_window(exp.sequences, exp.action_mask, exp.group_ids, exp.rewards, algo.branch_window)
        varied = torch.tensor([bool(((exp.rewards != r) & (exp.group_ids == g)).any())
                               for r, g in zip(exp.rewards, exp.group_ids)], dtype=torch.bool)
        generated = float(exp.action_mask[varied].sum())
        out["credit/branch_kept"] = float(keep[varied].sum()) / generated if generated else 0.0
    return out
