"""The PPO critic: a causal LM's backbone with a scalar value head, and its own optimizer.

``values(exp)`` gives V(s_t) for every action position: the value at position ``t`` is read from
the hidden state of token ``t`` (the state before token ``t+1`` is generated), so it lines up with
``action_mask`` (B,A). ``train_step(exp)`` fits the values to ``exp.returns`` (from GAE,
``agentrl.algorithms.gae``) with the clipped value loss (``agentrl.algorithms.value_loss``),
normalised by the mini-batch's token count so the update does not depend on the micro-batch size.
Both run one forward per ``split_calls`` (length buckets cut to ``learner.call_tokens``).
Used as an object in the single-process trainer and inside a Ray actor in the distributed one.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from agentrl.algorithms import masked_mean, value_loss
from agentrl.config import AlgoConfig, LearnerConfig, RunConfig
from agentrl.models import DTYPES, resolve_device
from agentrl.training.experience import Experience
from agentrl.training.learner import call_token_cap, make_optimizer, split_calls


class ValueModel(nn.Module):
    """Backbone of a causal LM (without its LM head) plus ``Linear(hidden, 1)``."""

    def __init__(self, backbone: nn.Module, hidden_size: int, seed: int = 0) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1, bias=False)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            w = torch.randn(self.value_head.weight.shape, generator=gen) / (hidden_size + 1)
            self.value_head.weight.copy_(w.to(self.value_head.weight.dtype))

    @classmethod
    def from_pretrained(cls, path: str, *, dtype: str = "float32", trust_remote_code: bool = False,
                        seed: int = 0) -> ValueModel:
        """Initialise from a causal LM checkpoint (the usual PPO choice: critic = policy's backbone)."""
        from transformers import AutoModelForCausalLM

        lm = AutoModelForCausalLM.from_pretrained(str(path), dtype=DTYPES[dtype], trust_remote_code=trust_remote_code)
        model = cls(lm.base_model, lm.config.hidden_size, seed)
        return model.to(DTYPES[dtype])

    def forward(self, sequences: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """sequences, attention_mask (B,T) -> values (B,A): the value of each prefix ending at t."""
        hidden = self.backbone(input_ids=sequences, attention_mask=attention_mask, use_cache=False)
        values = self.value_head(hidden.last_hidden_state).squeeze(-1)
        return values[:, :-1].float()


class Critic:
    """A value model and its optimizer: ``values(exp) -> (B,A)``, ``train_step(exp) -> metrics``."""

    def __init__(self, model: ValueModel, learner: LearnerConfig, algo: AlgoConfig) -> None:
        self.model, self.cfg, self.algo = model, learner, algo
        self.call_tokens = call_token_cap(getattr(model, "backbone", model), learner.call_tokens)
        self.optimizer, self.scheduler = make_optimizer(
            [p for p in model.parameters() if p.requires_grad], learner.critic_lr, learner.weight_decay,
            learner.warmup_steps)

    @classmethod
    def from_config(cls, cfg: RunConfig, model_path: str) -> Critic:
        """The critic of a run, initialised from ``model_path`` (the policy's checkpoint)."""
        model = ValueModel.from_pretrained(model_path, dtype=cfg.model.dtype,
                                           trust_remote_code=cfg.model.trust_remote_code, seed=cfg.rl_seed)
        return cls(model.to(resolve_device(cfg.model.device)), cfg.learner, cfg.algo)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def values(self, exp: Experience) -> torch.Tensor:
        """Current values of ``exp`` (B,A), zero outside the action mask; computed in micro-batches."""
        was_training = self.model.training
        self.model.eval()
        out = torch.zeros_like(exp.action_mask)
        for index, part in split_calls(exp, self.cfg.micro_batch_size, self.call_tokens, shared_prefix=False):
            part = part.trim().to(self.device)
            v = self.model(part.sequences, part.attention_mask).cpu()
            out[index, :v.shape[1]] = v * part.action_mask.cpu()
        self.model.train(was_training)
        return out

    def train_step(self, exp: Experience) -> dict[str, float]:
        """Fit values to ``exp.returns`` (``exp.values`` are the old values for clipping)."""
        if exp.returns is None or exp.values is None:
            raise ValueError("the critic needs exp.values and exp.returns (run the gae estimator first)")
        self.model.train()
        sums: dict[str, float] = {}
        steps = 0
        for _ in range(self.cfg.ppo_epochs):
            for mini in exp.split(self.cfg.mini_batch_size):
                for k, v in self._optimizer_step(mini).items():
                    sums[k] = sums.get(k, 0.0) + v
                steps += 1
        return {k: v / max(steps, 1) for k, v in sums.items()}

    def _optimizer_step(self, mini: Experience) -> dict[str, float]:
        num_tokens = max(mini.action_mask.sum().item(), 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        acc = {"value_loss": 0.0, "values": 0.0, "returns": 0.0}
        for _, micro in split_calls(mini, self.cfg.micro_batch_size, self.call_tokens, shared_prefix=False):
            micro = micro.trim().to(self.device)
            mask = micro.action_mask
            v = self.model(micro.sequences, micro.attention_mask)
            loss = value_loss(v, micro.values, micro.returns, mask, clip=self.algo.value_clip,
                              agg="token-mean", num_tokens=num_tokens)
            loss.backward()
            share = mask.sum().item() / num_tokens
            acc["value_loss"] += loss.item()
            acc["values"] += masked_mean(v.detach(), mask).item() * share
            acc["returns"] += masked_mean(micro.returns, mask).item() * share
        params = [p for p in self.model.parameters() if p.grad is not None]
        clip = self.cfg.grad_clip if self.cfg.grad_clip > 0 else math.inf
        acc["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, clip)) if params else 0.0
        self.optimizer.step()
        self.scheduler.step()
        return acc

    def state_dict(self) -> dict[str, Any]:
        """Model, optimizer and scheduler state (for checkpoints)."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
