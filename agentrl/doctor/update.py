"""The doctor's ``update`` check: the first policy update with a reward signal raises the samples that beat
their group relative to the ones that fell behind it (``agentrl train`` runs it once; torch only).

A sign error in an estimator or a loss, or a row of the batch paired with another episode's reward, trains
quietly: the loss goes down, the reward does not go up, and the run is read as "RL does not help". The
check reads each sample's summed log-prob of its generated tokens before and after the update beside its
reward minus its group's mean (the rewards, not the advantages: an estimator that flips the sign makes
advantages the update follows faithfully). To first order the change of sample i is the learning rate times
the inner product of its gradient with the advantage-weighted sum of all of them, so a sound update
correlates positively with the centred reward. It fails on a clear reversal (correlation below
``FAIL_CORRELATION`` and beyond chance, ``FAIL_T``, over at least ``MIN_SAMPLES`` compared samples), warns
on a change too small to read or an unclear direction (a loss dominated by KL or entropy terms, a critic's
baseline, numeric noise), and skips a batch in which no group's rewards differ.
"""

from __future__ import annotations

import math

import torch

from agentrl.doctor.report import Check

FAIL_CORRELATION = -0.2
"""Below this correlation of log-prob change and centred reward the first update went the wrong way..."""

FAIL_T = 3.5
"""... when the reversal is also beyond chance: its t statistic ``r sqrt((n-2)/(1-r^2))`` below -FAIL_T (a
correlation of numeric noise, e.g. bf16 forwards at a tiny learning rate, only warns). At 8 samples that is
r < -0.82, at 80 r < -0.37."""

MIN_SAMPLES = 8
"""Fewer compared samples than this: a reversal only warns."""

MIN_CHANGE = 1e-6
"""Mean absolute change of a sample's log-prob (nats) under which the update did not move the policy."""


def sample_sums(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-row sum of ``values`` (B,A) over ``mask`` (B,A). Returns (B,)."""
    return (values * mask.to(values.dtype)).sum(-1)


def centred_rewards(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Each reward (B,) minus the mean of its group (``group_ids`` (B,)); 0 in a group of one. Returns (B,)."""
    r = rewards.double()
    _, inverse = torch.unique(group_ids, return_inverse=True)
    sums = torch.zeros(int(inverse.max()) + 1 if r.numel() else 0, dtype=r.dtype).index_add_(0, inverse, r)
    counts = torch.bincount(inverse).to(r.dtype)
    return r - (sums / counts)[inverse]


def has_signal(rewards: torch.Tensor, group_ids: torch.Tensor) -> bool:
    """Whether some group's rewards (B,) differ: an update the check can read."""
    return bool(rewards.numel()) and bool((centred_rewards(rewards, group_ids).abs() > 1e-12).any())


def check_update(rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor, before: torch.Tensor,
                 after: torch.Tensor) -> Check:
    """The ``update`` check from the batch's ``rewards`` (B,), ``group_ids`` (B,), action ``mask`` (B,A) and
    the policy's log-probs of the batch (B,A) ``before`` and ``after`` the update."""
    rel = centred_rewards(rewards, group_ids)
    change = sample_sums((after - before).double(), mask)
    keep = (mask.sum(-1) > 0) & (rel.abs() > 1e-12)  # generated something, and differs from its group
    rel, change = rel[keep], change[keep]
    up, down = rel > 0, rel < 0
    details = {"compared": int(keep.sum()), "better": int(up.sum()), "worse": int(down.sum()),
               "mean_change_better": _mean(change[up]), "mean_change_worse": _mean(change[down]),
               "mean_abs_change": _mean(change.abs())}
    if not up.any() or not down.any():
        return Check("update", "skip", "no group of the updated batch has rewards that differ: nothing to compare",
                     details=details)
    scale = details["mean_abs_change"]
    corr = 0.0 if float(change.std()) == 0.0 else float(torch.corrcoef(torch.stack([rel, change]))[0, 1])
    details["correlation"] = corr
    moved = (f"the first update moved the log-probs of the {details['better']} samples that beat their group's "
             f"mean reward by {details['mean_change_better']:+.4g} nats on average and of the {details['worse']} "
             f"below it by {details['mean_change_worse']:+.4g} (correlation with the reward {corr:+.2f})")
    if scale < MIN_CHANGE:
        return Check("update", "warn", f"the first update left the samples' log-probs unchanged (mean change "
                     f"{scale:.2g} nats)", "a zero learning rate, frozen parameters or an optimizer that did not "
                     "step: nothing trains", details)
    if corr > 0:
        return Check("update", "pass", moved, details=details)
    n = rel.numel()
    t = corr * math.sqrt(max(n - 2, 0) / max(1.0 - corr * corr, 1e-12))
    details["t"] = t
    if corr < FAIL_CORRELATION and n >= MIN_SAMPLES and t < -FAIL_T:
        return Check("update", "fail", moved, "the update goes against the rewards: a sign error in the "
                     "estimator or the loss, or samples paired with other episodes' rewards", details)
    return Check("update", "warn", moved, "the log-prob changes do not follow the rewards: a loss dominated "
                 "by other terms (KL, entropy), a critic's baseline, numeric noise, or a batch too small to tell", details)


def _mean(x: torch.Tensor) -> float:
    return float(x.mean()) if x.numel() else 0.0
