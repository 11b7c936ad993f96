"""Where a run's training tasks come from, in an order a checkpoint can restore."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from agentrl.config import ConfigError
from agentrl.training.curriculum import Curriculum
from agentrl.types import Task, Trajectory


class TaskSource:
    """Training tasks: a shuffled dataset walked epoch by epoch, or a procedural env's sampler.

    With a :class:`~agentrl.training.curriculum.Curriculum` each call picks its tasks from ``candidates``
    x as many drawn (the others are passed over). Its position (epoch, index, RNG state, the curriculum's
    counts) is part of every checkpoint, so a resumed run sees the same tasks an uninterrupted run would.
    """

    def __init__(self, env: Any, seed: int, curriculum: Curriculum | None = None, candidates: int = 1) -> None:
        self.env, self.rng = env, np.random.default_rng(seed)
        self.dataset: list[Task] | None = getattr(env, "tasks", None)
        self.epoch, self.index, self.drawn = 0, 0, 0
        self.order = self.rng.permutation(len(self.dataset)) if self.dataset else None
        self.curriculum, self.candidates = curriculum, max(1, candidates)

    def _draw(self, k: int) -> list[Task]:
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
        return out

    def next(self, k: int) -> list[Task]:
        """The next ``k`` training tasks."""
        if self.curriculum is None:
            out = self._draw(k)
        else:
            out = self.curriculum.choose(self._draw(k * self.candidates), k, self.rng)
        self.drawn += len(out)
        return out

    def observe(self, trajs: list[Trajectory]) -> None:
        """The final rewards of tasks handed out (the curriculum's evidence; nothing without one)."""
        if self.curriculum is not None:
            self.curriculum.observe(trajs)

    def metrics(self) -> dict[str, float]:
        return self.curriculum.metrics() if self.curriculum is not None else {}

    def state_dict(self) -> dict[str, Any]:
        s = {"rng": self.rng.bit_generator.state, "epoch": self.epoch, "index": self.index,
             "drawn": self.drawn, "order": None if self.order is None else self.order.tolist()}
        if self.curriculum is not None:
            s["curriculum"] = self.curriculum.state_dict()
        return s

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.rng.bit_generator.state = s["rng"]
        self.epoch, self.index, self.drawn = s["epoch"], s["index"], s["drawn"]
        self.order = None if s["order"] is None else np.array(s["order"])
        if self.curriculum is not None and "curriculum" in s:
            self.curriculum.load_state_dict(s["curriculum"])


def task_source(env: Any, cfg: Any) -> TaskSource:
    """The run's :class:`TaskSource` (``cfg``: a ``RunConfig``), with a curriculum when
    ``data.curriculum.key`` is set; a key the env's tasks lack is a :class:`ConfigError` here, in one line."""
    c = cfg.data.curriculum
    if not c.key:
        return TaskSource(env, cfg.rl_seed)
    curriculum = Curriculum(c.key, cfg.rollout.n_samples, temperature=c.temperature, decay=c.decay,
                            prior_strength=c.prior_strength, guided=bool(cfg.algo.guide))
    dataset = getattr(env, "tasks", None)
    probe = dataset[0] if dataset else env.sample_task(np.random.default_rng(cfg.rl_seed))  # the order's RNG untouched
    try:
        curriculum.bucket(probe)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return TaskSource(env, cfg.rl_seed, curriculum, c.candidates)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
