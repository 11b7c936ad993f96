"""KL estimators between the policy and the reference, and the KL coefficient controllers."""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL(policy || reference) estimate from sampled-token log-probs, (B,A) -> (B,A).

    k1 = log p - log q; k2 = (log p - log q)^2 / 2; k3 = exp(log q - log p) - (log q - log p) - 1
    (Schulman's unbiased, non-negative estimator).
    """
    diff = logprobs - ref_logprobs
    if kind == "k1":
        return diff
    if kind == "k2":
        return 0.5 * diff**2
    if kind == "k3":
        neg = -diff
        return torch.exp(neg) - neg - 1.0
    raise ValueError(f"unknown KL estimator {kind!r}; valid: {', '.join(KL_ESTIMATORS)}")


class FixedKLController:
    """A constant KL coefficient."""

    def __init__(self, coef: float) -> None:
        self.value = float(coef)

    def update(self, current_kl: float, n_samples: int) -> None:
        """No-op: the coefficient is fixed."""


class AdaptiveKLController:
    """Ziegler et al.'s adaptive coefficient: nudges ``value`` so that the KL tracks ``target``.

    ``value *= 1 + clip(kl / target - 1, -0.2, 0.2) * n_samples / horizon``.
    """

    def __init__(self, init: float, target: float, horizon: int) -> None:
        if target <= 0 or horizon <= 0:
            raise ValueError("adaptive KL needs target > 0 and horizon > 0")
        self.value, self.target, self.horizon = float(init), float(target), int(horizon)

    def update(self, current_kl: float, n_samples: int) -> None:
        """Move the coefficient after a batch of ``n_samples`` with mean KL ``current_kl``."""
        err = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + err * n_samples / self.horizon
