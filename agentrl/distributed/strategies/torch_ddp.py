"""``TorchDDPStrategy``: plain PyTorch data parallelism (no DeepSpeed needed).

The model is wrapped in ``DistributedDataParallel`` (gloo on CPU, NCCL on GPU): each backward
all-reduces (averages) gradients over ranks. Clipping and the optimizer step are the single-process
ones, so with one rank this is exactly ``PolicyLearner``'s update.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from agentrl.distributed.strategies.base import Strategy


class TorchDDPStrategy(Strategy):
    name = "ddp"

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
                ) -> tuple[Any, Any, Any]:
        self.module = model.to(self.device)
        self.optimizer, self.scheduler = optimizer, scheduler
        self.model = DistributedDataParallel(
            self.module, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        return self.model, optimizer, scheduler

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        params = [p for p in self.module.parameters() if p.grad is not None]
        clip = self.grad_clip if self.grad_clip > 0 else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip)) if params else 0.0
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def unwrap(self) -> torch.nn.Module:
        return self.module

    def optimizer_state(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_optimizer_state(self, states: list[dict[str, Any]]) -> None:
        self.optimizer.load_state_dict(states[self.rank]["optimizer"])
        self.scheduler.load_state_dict(states[self.rank]["scheduler"])
