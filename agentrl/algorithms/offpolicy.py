"""Off-policy correction between the engine that sampled and the learner that trains (torch only).

The engine's log-probs (``engine_logprobs``) and the learner's log-probs of the same tokens under
the policy that sampled them (``old_logprobs``) differ: a stale policy version in asynchronous runs,
different kernels or precision in the engine. Two corrections, both detached weights applied to
the token loss:

- **TIS** (token-level truncated importance sampling): ``w_t = min(exp(old_t - engine_t), cap)``;
- **MIS** (sequence-level masking): a sample whose geometric-mean ratio
  ``exp(mean_t(old_t - engine_t))`` lies outside ``[low, high]`` is left out of the loss (weight 0).

Beside them the policy losses that tolerate off-policy samples by their shape: CISPO (REINFORCE
with a clipped, detached IS weight) and SAPO (a soft, temperature-controlled gate in place of the
hard clip). Shapes: B samples, A action positions; ``mask`` (B,A) is 1 on generated tokens.
"""

from __future__ import annotations

import torch


def _masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    m = mask.to(x.dtype)
    if dim is None:
        return (x * m).sum() / m.sum().clamp(min=1.0)
    return (x * m).sum(dim) / m.sum(dim).clamp(min=1.0)


def tis_weights(old_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor,
                cap: float) -> torch.Tensor:
    """Token-level truncated IS weights (B,A): ``min(exp(old - engine), cap)`` on masked tokens, 1
    elsewhere; detached. ``cap`` must be > 0."""
    if cap <= 0:
        raise ValueError(f"the TIS cap must be > 0, got {cap}")
    w = torch.exp((old_logprobs - engine_logprobs).detach()).clamp(max=cap)
    return torch.where(mask.bool(), w, torch.ones_like(w))


def mis_keep(old_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor,
             low: float, high: float) -> torch.Tensor:
    """Sequence-level masking (B,): 1.0 where the geometric-mean ratio ``exp(mean_t(old - engine))``
    lies in ``[low, high]``, else 0.0. A sample without generated tokens is kept."""
    if not 0 <= low < high:
        raise ValueError(f"MIS bounds must satisfy 0 <= low < high, got low={low}, high={high}")
    ratio = torch.exp(_masked_mean((old_logprobs - engine_logprobs).detach(), mask, dim=-1))
    return ((ratio >= low) & (ratio <= high)).to(old_logprobs.dtype)


def correction_weights(old_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor, *,
                       tis_cap: float = 0.0, mis_low: float = 0.0, mis_high: float = 0.0) -> torch.Tensor:
    """The product of the enabled corrections as token weights (B,A): TIS when ``tis_cap > 0``, MIS
    when ``mis_high > 0``; all ones when neither is."""
    w = torch.ones_like(old_logprobs)
    if tis_cap > 0:
        w = w * tis_weights(old_logprobs, engine_logprobs, mask, tis_cap)
    if mis_high > 0:
        w = w * mis_keep(old_logprobs, engine_logprobs, mask, mis_low, mis_high).unsqueeze(-1)
    return w


@torch.no_grad()
def mismatch_metrics(old_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor,
                     weights: torch.Tensor | None = None) -> dict[str, float]:
    """``mismatch/*`` figures: mean and max |engine - learner| log-prob over generated tokens, the
    mean IS ratio, and (given the correction ``weights`` (B,A)) their mean and the fraction of
    samples masked out (weight 0 on every token)."""
    m = mask.bool()
    diff = (old_logprobs - engine_logprobs).abs()
    out = {"mismatch/logprob_abs_diff_mean": _masked_mean(diff, mask).item(),
           "mismatch/logprob_abs_diff_max": diff[m].max().item() if m.any() else 0.0,
           "mismatch/is_ratio_mean": _masked_mean(torch.exp(old_logprobs - engine_logprobs), mask).item()}
    if weights is not None:
        has_tokens = m.any(-1)
        masked = ((weights * mask).sum(-1) == 0) & has_tokens
        out["mismatch/is_weight_mean"] = _masked_mean(weights, mask).item()
        out["mismatch/masked_frac"] = masked.float().sum().item() / max(int(has_tokens.sum().item()), 1)
    return out


def staleness_metrics(versions: torch.Tensor, mask: torch.Tensor, current: int,
                      max_staleness: int = 0) -> dict[str, float]:
    """``staleness/*``: how many policy versions behind ``current`` the generated tokens are
    (``versions`` (B,A)): mean, max and the histogram ``staleness/frac_k`` of samples by their
    oldest token, for every k from 0 to ``max_staleness`` (0 included, so the keys stay the same from
    step to step) and any larger k that occurs."""
    m = mask.bool()
    lag = (current - versions).clamp(min=0)
    lag_tok = lag[m]
    out = {f"staleness/frac_{k}": 0.0 for k in range(max_staleness + 1)}
    if lag_tok.numel() == 0:
        return {"staleness/mean": 0.0, "staleness/max": 0.0, **out}
    per_sample = torch.where(m, lag, torch.zeros_like(lag)).amax(-1)[m.any(-1)]
    out.update({"staleness/mean": lag_tok.float().mean().item(), "staleness/max": float(lag_tok.max().item())})
    for k in torch.unique(per_sample).tolist():
        out[f"staleness/frac_{int(k)}"] = (per_sample == k).float().mean().item()
    return out
