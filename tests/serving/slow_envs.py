"""Envs for the serving tests, served by ``agentrl serve-env slow_envs:NAME`` (this folder on PYTHONPATH).

- ``SlowArithmetic``: ``Arithmetic-v0`` whose ``step`` takes ``delay`` seconds (more when the action starts
  ``"sleep S;"``: S more, then the rest is the answer) and ``reset`` ``reset_delay`` seconds, and, with ``log``
  set, appends ``"<pid> reset|start|end <task_id>"`` lines to that file (so a test can see which server ran
  what, and kill one while it holds episodes);
- ``Guess``: a multi-turn env (guess a number from 0-9 with "higher"/"lower" feedback, 4 turns).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from agentrl.env import TextEnv
from agentrl.types import RewardResult, Task
from environments.arithmetic import ArithmeticEnv


class SlowArithmetic(ArithmeticEnv):
    """Arithmetic whose step takes ``delay`` seconds (logged to ``log`` when given)."""

    def __init__(self, delay: float = 0.0, log: str = "", reset_delay: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay, self.log, self.reset_delay = delay, log, reset_delay

    def _note(self, what: str) -> None:
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"{os.getpid()} {what} {self.task.id if self.task else '-'}\n")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        time.sleep(self.reset_delay)
        out = super().reset(seed=seed, options=options)
        self._note("reset")
        return out

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._note("start")
        extra = 0.0
        if action.startswith("sleep ") and ";" in action:
            head, action = action.split(";", 1)
            extra = float(head.split()[1])
        time.sleep(self.delay + extra)
        out = super().step(action)
        self._note("end")
        return out


class Guess(TextEnv):
    """Guess a number from 0 to 9; each wrong guess gets "higher" or "lower"; reward 1 for the number."""

    max_turns = 4

    def sample_task(self, rng: np.random.Generator) -> Task:
        n = int(rng.integers(0, 10))
        return Task(id=f"guess-{n}", prompt="Guess my number (0-9).", answer=n)

    def score(self, action: str, task: Task) -> RewardResult:
        return RewardResult(float(action.strip() == str(task.answer)), {}, {})

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.turn = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        try:
            guess = int(action.strip())
        except ValueError:
            guess = -1
        if guess == self.task.answer:
            return "", 1.0, True, False, {"turn": self.turn}
        hint = "higher" if guess < self.task.answer else "lower"
        return hint, 0.0, False, self.turn >= self.max_turns, {"turn": self.turn}
