"""``ShardedPolicyLearner``: the policy update of ``PolicyLearner`` on one data-parallel rank.

Every rank receives the whole batch, trains on its contiguous shard of each mini-batch and
normalises the loss by the *mini-batch's* token / sequence counts times the world size; the
strategy averages gradients over ranks, so the update is the single-process one (same loss, same
weights, within float tolerance) whatever the number of ranks or the micro-batch size.
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.config import AlgoConfig, LearnerConfig
from agentrl.distributed.strategies.base import Strategy, shard_micro_batches, shard_rows
from agentrl.training.experience import Experience
from agentrl.training.learner import PolicyLearner, loss_norm, micro_policy_loss, sequence_logprobs


class ShardedPolicyLearner(PolicyLearner):
    """``PolicyLearner`` whose backward and optimizer step go through a :class:`Strategy`."""

    def __init__(self, model: Any, learner: LearnerConfig, algo: AlgoConfig, strategy: Strategy, *,
                 temperature: float = 1.0, max_new_tokens: int | None = None) -> None:
        super().__init__(model, learner, algo, temperature=temperature, max_new_tokens=max_new_tokens)
        self.strategy = strategy
        self.model, self.optimizer, self.scheduler = strategy.prepare(model, self.optimizer, self.scheduler)

    @torch.no_grad()
    def logprobs(self, exp: Experience) -> torch.Tensor:
        """Log-probs (B_r,A) of this rank's rows ``shard_rows(len(exp), rank, world)``."""
        s = self.strategy
        start, stop = shard_rows(len(exp), s.rank, s.world_size)
        out = torch.zeros_like(exp.action_mask[start:stop])
        self.model.eval()
        row = 0
        for micro, weight in shard_micro_batches(exp, s.rank, s.world_size, self.cfg.micro_batch_size):
            micro = micro.trim().to(s.device)
            lp, _ = sequence_logprobs(self.model, micro.sequences, micro.attention_mask,
                                      temperature=self.temperature)
            if weight:
                out[row:row + len(micro), :lp.shape[1]] = lp.cpu()
                row += len(micro)
        self.model.train()
        return out

    def _optimizer_step(self, mini: Experience, kl_coef: float) -> dict[str, float]:
        """Mirrors ``PolicyLearner._optimizer_step`` on this rank's shard (global normalisation)."""
        algo, s = self.algo, self.strategy
        norm = loss_norm(mini, self.max_len)
        num_tokens = norm["num_tokens"]
        acc = {"policy_loss": 0.0, "clipfrac": 0.0, "ratio": 0.0, "entropy": 0.0, "kl": 0.0}
        for micro, weight in shard_micro_batches(mini, s.rank, s.world_size, self.cfg.micro_batch_size):
            micro = micro.trim().to(s.device)
            lp, ent = sequence_logprobs(self.model, micro.sequences, micro.attention_mask,
                                        temperature=self.temperature, with_entropy=True,
                                        entropy_grad=bool(algo.entropy_coef))
            loss, stats = micro_policy_loss(lp, ent, micro, algo, kl_coef, norm)
            share = weight * micro.action_mask.sum().item() / max(num_tokens, 1)
            acc["policy_loss"] += weight * stats.pop("policy_loss")
            for k, v in stats.items():  # *_max (mismatch/logprob_abs_diff_max): the max over real micro-batches
                if k.endswith("_max"):
                    acc[k] = max(acc.get(k, 0.0), v if weight else 0.0)
                else:
                    acc[k] = acc.get(k, 0.0) + v * share
            s.backward(loss * (weight * s.world_size))
        maxes = s.all_reduce_max({k: acc.pop(k) for k in list(acc) if k.endswith("_max")})
        acc = {**s.all_reduce_sum(acc), **maxes}
        acc["grad_norm"] = s.step()
        acc["lr"] = self.scheduler.get_last_lr()[0]
        return acc
