"""Envs the newcomer tests train (tests/test_newcomer.py): a multi-turn guessing game."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentrl import Task, TextEnv


class GuessEnv(TextEnv):
    """Guess a digit in up to four turns; "higher" / "lower" as feedback; reward 1 for the digit."""

    max_turns = 4
    feedback_role = "user"

    def __init__(self, split: str = "train") -> None:
        super().__init__()
        self.split = split

    def sample_task(self, rng: np.random.Generator) -> Task:
        d = str(int(rng.integers(0, 10)))
        return Task(id=f"guess-{d}", prompt="Guess my digit:", answer=d)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        guess = action.strip()
        if guess == self.task.answer:
            return "", 1.0, True, False, {"reward_components": {"correct": 1.0}}
        hint = "higher" if guess < self.task.answer else "lower"
        return hint, 0.0, False, False, {"reward_components": {"correct": 0.0}}


class BadGuessEnv(GuessEnv):
    """GuessEnv with a bug: its second step raises (issue 29, finding 3)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.turn = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        if self.turn == 2:
            raise RuntimeError("bug in my env at turn 2")
        return "higher", 0.0, False, False, {"reward_components": {"correct": 0.0}}


class ForgotMaxTurnsEnv(GuessEnv):
    """GuessEnv without ``max_turns``: it keeps the default of 1 (issue 29, finding 4)."""

    max_turns = 1
