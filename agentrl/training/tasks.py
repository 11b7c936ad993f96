"""Where a run's training tasks come from, in an order a checkpoint can restore."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from agentrl.types import Task


class TaskSource:
    """Training tasks: a shuffled dataset walked epoch by epoch, or a procedural env's sampler.

    Its position (epoch, index, RNG state) is part of every checkpoint, so a resumed run sees the
    same tasks an uninterrupted run would.
    """

    def __init__(self, env: Any, seed: int) -> None:
        self.env, self.rng = env, np.random.default_rng(seed)
        self.dataset: list[Task] | None = getattr(env, "tasks", None)
        self.epoch, self.index, self.drawn = 0, 0, 0
        self.order = self.rng.permutation(len(self.dataset)) if self.dataset else None

    def next(self, k: int) -> list[Task]:
        out = []
        for _ in range(k):
            if self.dataset is None:
                out.append(self.env.sample_task(self.rng))
            else:
                if self.index >= len(self.order):
                    self.epoch, self.index = self.epoch + 1, 0
                    self.order = self.rng.permutation(len(self.dataset))
                out.append(self.dataset[int(self.order[self.index])])
                self.index += 1
            self.drawn += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "epoch": self.epoch, "index": self.index,
                "drawn": self.drawn, "order": None if self.order is None else self.order.tolist()}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.rng.bit_generator.state = s["rng"]
        self.epoch, self.index, self.drawn = s["epoch"], s["index"], s["drawn"]
        self.order = None if s["order"] is None else np.array(s["order"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

