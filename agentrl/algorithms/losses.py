"""Policy, value and entropy losses, and how token losses are aggregated into one scalar.

All functions are pure: tensors in, tensors out. ``mask`` (B,A) marks the generated tokens.
Aggregation takes optional *global* normalisers (``num_tokens``, ``num_seqs``) so that a batch
split into micro-batches gives exactly the full batch's loss and gradient when the micro-batch
losses are summed.
"""

from __future__ import annotations

import torch

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1 (all of them, or along ``dim``)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` with mean and (unbiased) std over masked positions; 0 elsewhere."""
    m = mask.to(x.dtype)
    n = m.sum()
    mean = (x * m).sum() / n.clamp(min=1.0)
    var = (((x - mean) ** 2) * m).sum() / (n - 1).clamp(min=1.0)
    return (x - mean) / (var.sqrt() + eps) * m


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean", *,
             num_tokens: float | None = None, num_seqs: float | None = None,
             max_len: int | None = None, seq_tokens: torch.Tensor | None = None) -> torch.Tensor:
    """Aggregate token losses (B,A) to a scalar.

    - ``token-mean``: sum over all tokens / number of tokens (DAPO, default);
    - ``seq-mean-token-mean``: mean per sequence, then mean over sequences (original GRPO);
    - ``seq-mean-token-sum``: sum per sequence, mean over sequences;
    - ``seq-mean-token-sum-norm``: sum over tokens / (sequences x ``max_len``) (Dr. GRPO).
    ``num_tokens``/``num_seqs`` override the counts of this batch with the global ones. When an
    episode is several rows, ``num_seqs`` counts episodes and ``seq_tokens`` (B,) gives each row its
    episode's token count, so a row's tokens are averaged over the whole episode's.
    """
    m = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        denom = m.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=loss_mat.dtype)
        return (loss_mat * m).sum() / denom.clamp(min=1.0)
    seqs = torch.as_tensor(loss_mat.shape[0] if num_seqs is None else num_seqs, dtype=loss_mat.dtype)
    if mode == "seq-mean-token-mean":
        per_token = m.sum(-1) if seq_tokens is None else seq_tokens.to(loss_mat.dtype)
        per_seq = (loss_mat * m).sum(-1) / per_token.clamp(min=1.0)
        return per_seq.sum() / seqs.clamp(min=1.0)
    if mode == "seq-mean-token-sum":
        return (loss_mat * m).sum() / seqs.clamp(min=1.0)
    if mode == "seq-mean-token-sum-norm":
        length = loss_mat.shape[-1] if max_len is None else max_len
        return (loss_mat * m).sum() / (seqs.clamp(min=1.0) * length)
    raise ValueError(f"unknown loss aggregation {mode!r}; valid: {', '.join(AGGREGATIONS)}")


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, *, clip_low: float = 0.2, clip_high: float = 0.2,
                dual_clip: float | None = None, ratio_type: str = "token", agg: str = "token-mean",
                num_tokens: float | None = None, num_seqs: float | None = None,
                max_len: int | None = None, weights: torch.Tensor | None = None,
                seq_tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate loss with asymmetric and dual clipping.

    Args: ``logprobs``, ``old_logprobs``, ``advantages``, ``mask`` all (B,A).
    ``ratio_type="sequence"`` uses GSPO's sequence ratio ``exp(mean_t(logp - old))`` per sample
    (its gradient flows through every token). ``dual_clip`` (c > 1) bounds the loss of negative
    advantages by ``-c * A``. ``weights`` (B,A), detached, scale each token's loss (off-policy
    correction, ``agentrl.algorithms.offpolicy``); ``seq_tokens`` as in :func:`agg_loss`. Returns the
    scalar loss and metrics (``clipfrac``, ``ratio``).
    """
    log_ratio = logprobs - old_logprobs
    if ratio_type == "sequence":
        seq_log_ratio = masked_mean(log_ratio, mask, dim=-1).unsqueeze(-1)
        log_ratio = seq_log_ratio.detach() + logprobs - logprobs.detach()
    elif ratio_type != "token":
        raise ValueError(f"unknown ratio_type {ratio_type!r}; valid: token, sequence")
    ratio = torch.exp(log_ratio)
    surr1 = ratio * advantages
    surr2 = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.min(surr1, surr2)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        loss = torch.where(advantages < 0, torch.min(loss, -dual_clip * advantages), loss)
    if weights is not None:
        loss = loss * weights
    total = agg_loss(loss, mask, agg, num_tokens=num_tokens, num_seqs=num_seqs, max_len=max_len,
                     seq_tokens=seq_tokens)
    with torch.no_grad():
        clipped = (surr2 < surr1).to(loss.dtype)
        metrics = {"clipfrac": masked_mean(clipped, mask), "ratio": masked_mean(ratio, mask)}
    return total, metrics


def cispo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
               mask: torch.Tensor, *, clip_low: float = 0.2, clip_high: float = 0.2, agg: str = "token-mean",
               num_tokens: float | None = None, num_seqs: float | None = None, max_len: int | None = None,
               weights: torch.Tensor | None = None, seq_tokens: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax-M1): REINFORCE whose IS weight is clipped and detached, so every token keeps a
    gradient: ``-sg(clip(r, 1 - clip_low, 1 + clip_high)) * A * logp``, ``r = exp(logp - old)``.
    Inputs (B,A); ``weights`` as in :func:`policy_loss`. Returns the loss and metrics."""
    ratio = torch.exp(logprobs - old_logprobs)
    clipped = ratio.detach().clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = -clipped * advantages * logprobs
    if weights is not None:
        loss = loss * weights
    total = agg_loss(loss, mask, agg, num_tokens=num_tokens, num_seqs=num_seqs, max_len=max_len,
                     seq_tokens=seq_tokens)
    with torch.no_grad():
        metrics = {"clipfrac": masked_mean((clipped != ratio).to(loss.dtype), mask),
                   "ratio": masked_mean(ratio, mask)}
    return total, metrics


def sapo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, tau_pos: float = 1.0, tau_neg: float = 1.05, agg: str = "token-mean",
              num_tokens: float | None = None, num_seqs: float | None = None, max_len: int | None = None,
              weights: torch.Tensor | None = None, seq_tokens: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAPO: a soft gate in place of PPO's hard clip, ``-(4/tau) * sigmoid(tau * (r - 1)) * A`` with
    ``tau = tau_pos`` for positive advantages and ``tau_neg`` otherwise. At ``r = 1`` its gradient is
    the policy gradient; far from 1 it fades smoothly. Inputs (B,A); returns the loss and metrics
    (``clipfrac`` here: tokens whose gate weight fell below one half)."""
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"SAPO temperatures must be > 0, got tau_pos={tau_pos}, tau_neg={tau_neg}")
    ratio = torch.exp(logprobs - old_logprobs)
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0))
    loss = -(4.0 / tau) * gate * advantages
    if weights is not None:
        loss = loss * weights
    total = agg_loss(loss, mask, agg, num_tokens=num_tokens, num_seqs=num_seqs, max_len=max_len,
                     seq_tokens=seq_tokens)
    with torch.no_grad():
        grad_weight = 4.0 * gate * (1.0 - gate)  # d loss / d logp = grad_weight * r * (-A)
        metrics = {"clipfrac": masked_mean((grad_weight < 0.5).to(loss.dtype), mask),
                   "ratio": masked_mean(ratio, mask)}
    return total, metrics


POLICY_LOSSES = ("ppo", "cispo", "sapo")


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               mask: torch.Tensor, *, clip: float | None = 0.2, agg: str = "token-mean",
               num_tokens: float | None = None, num_seqs: float | None = None) -> torch.Tensor:
    """Clipped value loss ``0.5 * max((v - R)^2, (v_clip - R)^2)``; all inputs (B,A)."""
    err = (values - returns) ** 2
    if clip is not None:
        v_clip = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.max(err, (v_clip - returns) ** 2)
    return 0.5 * agg_loss(err, mask, agg, num_tokens=num_tokens, num_seqs=num_seqs)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution at each position: logits (B,A,V) -> (B,A)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)
