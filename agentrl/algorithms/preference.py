"""Losses of the stages before RL: SFT, reward model (pairwise) and DPO. Pure tensor functions."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor, num_tokens: float | None = None) -> torch.Tensor:
    """Negative log-likelihood of the response tokens: logprobs, mask (B,A) -> scalar (token mean)."""
    m = mask.to(logprobs.dtype)
    denom = m.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=logprobs.dtype)
    return -(logprobs * m).sum() / denom.clamp(min=1.0)


def reward_model_loss(chosen: torch.Tensor, rejected: torch.Tensor, *, kind: str = "pairwise",
                      margin: torch.Tensor | float | None = None) -> torch.Tensor:
    """Preference loss on scalar rewards (B,) of chosen and rejected responses.

    ``pairwise``: ``-log sigmoid(r_c - r_r - margin)``; ``logexp``: ``log(1 + exp(r_r - r_c + margin))``
    (the same function written as softplus; kept for OpenRLHF parity). Mean over the batch.
    """
    diff = chosen - rejected
    if margin is not None:
        diff = diff - margin
    if kind == "pairwise":
        return -F.logsigmoid(diff).mean()
    if kind == "logexp":
        return F.softplus(-diff).mean()
    raise ValueError(f"unknown reward-model loss {kind!r}; valid: pairwise, logexp")


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, *, beta: float = 0.1, label_smoothing: float = 0.0,
             ipo: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DPO (or IPO) loss from summed sequence log-probs, each (B,).

    ``logits = (pi_c - ref_c) - (pi_r - ref_r)``; DPO: ``-(1-eps) log s(beta x) - eps log s(-beta x)``;
    IPO: ``(x - 1/(2 beta))^2`` (IPO's paper uses per-token mean log-probs; ``agentrl dpo`` passes
    those when ``dpo.ipo`` is set). Returns the mean loss and metrics: implicit rewards
    ``beta * log-ratio`` of chosen and rejected, their margin, and the share of pairs with ``x > 0``.
    """
    chosen_ratio = policy_chosen - ref_chosen
    rejected_ratio = policy_rejected - ref_rejected
    logits = chosen_ratio - rejected_ratio
    if ipo:
        losses = (logits - 1.0 / (2.0 * beta)) ** 2
    else:
        losses = (-(1.0 - label_smoothing) * F.logsigmoid(beta * logits)
                  - label_smoothing * F.logsigmoid(-beta * logits))
    with torch.no_grad():
        metrics = {"chosen_reward": (beta * chosen_ratio).mean(), "rejected_reward": (beta * rejected_ratio).mean(),
                   "margin": (beta * logits).mean(), "accuracy": (logits > 0).float().mean()}
    return losses.mean(), metrics
