"""``agentrl/GuessNumber-v0``: find hidden whole numbers by guessing, told higher or lower after each guess.

A long-episode benchmark whose intermediate turns carry signal (turn-level credit, context policies):

- ``rounds`` hidden numbers from ``low..high``, found one after the other, ``guesses`` guesses each
  (``max_turns = rounds * guesses``). Finding a number earns ``1 / rounds`` on that turn (a per-turn
  reward); the ``correct`` component of the last step is 1 when every number was found.
- ``feedback="interval"`` tells the range the number is still in after each guess (the last
  observation holds the whole state); ``"direction"`` only says higher or lower, so where the number
  can be lies in the history of guesses: a policy that loses its history (truncation) loses it, a
  summary (compaction) can keep it. A status line (round, guesses left) leads every feedback.
- Each step's ``info["state_key"]`` (and reset's) names the logical state: round, the range still
  possible, guesses left, so that turns of different episodes from the same state form a step group.
- ``reference_action()`` is a reference policy: bisection (``reference_policy="bisect"``, finds any
  number of ``1..100`` within 7 guesses) or a uniform guess inside the possible range (``"uniform"``,
  a weaker policy for warm starts that leave RL something to learn). ``reference_summary()`` is what
  a compaction summary should say; ``reference_answer(task)`` is the first hidden number.

Tasks split 80/10/10 into train/dev/test by a hash of their numbers. Answers are read as the last
whole number in the reply; a reply without one wastes the guess.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np

from agentrl.env import TextEnv
from agentrl.types import Task

SPLITS = {"train": (0, 80), "dev": (80, 90), "test": (90, 100)}
FEEDBACKS = ("interval", "direction")
REFERENCE_POLICIES = ("bisect", "uniform")
_NUMBER = re.compile(r"-?\d+")


class GuessNumberEnv(TextEnv):
    """Guess hidden numbers from higher/lower feedback; several rounds make long episodes."""

    feedback_role = "user"
    compaction_instruction = ("Your context is full. Summarize the game so far in one line: the round, the "
                              "range the number is in, the guesses left.")

    def __init__(self, low: int = 1, high: int = 100, rounds: int = 1, guesses: int = 7,
                 feedback: str = "interval", reference_policy: str = "bisect", split: str = "train",
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if not low < high or rounds < 1 or guesses < 1:
            raise ValueError("GuessNumber-v0 needs low < high, rounds >= 1 and guesses >= 1")
        if high - low + 1 < 10:
            raise ValueError("GuessNumber-v0 needs at least 10 numbers in low..high (splits hold 10% each)")
        for name, value, valid in (("feedback", feedback, FEEDBACKS), ("reference_policy", reference_policy,
                                                                       REFERENCE_POLICIES), ("split", split, SPLITS)):
            if value not in valid:
                raise ValueError(f"GuessNumber-v0: unknown {name} {value!r}; valid: {', '.join(valid)}")
        self.low, self.high, self.rounds, self.guesses = low, high, rounds, guesses
        self.feedback, self.reference_policy, self.split = feedback, reference_policy, split
        self.max_turns = rounds * guesses
        self._new_game()

    # ------------------------------------------------------------------ tasks
    def sample_task(self, rng: np.random.Generator) -> Task:
        for _ in range(10_000):
            numbers = [int(x) for x in rng.integers(self.low, self.high + 1, size=self.rounds)]
            if split_of(numbers) == self.split:
                break
        else:  # pragma: no cover - only with degenerate settings
            raise RuntimeError("no GuessNumber task found for this split")
        return Task(id=f"guess-{self.low}-{self.high}-{'-'.join(map(str, numbers))}", prompt=self._prompt(),
                    answer=str(numbers[0]), metadata={"numbers": numbers, "split": self.split})

    def _prompt(self) -> str:
        rounds = f"{self.rounds} hidden numbers, one after the other" if self.rounds > 1 else "a hidden number"
        return (f"Find {rounds}: each is a whole number from {self.low} to {self.high}. Reply with one guess, a "
                f"number only; after each guess I say whether the number is higher or lower. You have "
                f"{self.guesses} guesses per number.")

    def reference_answer(self, task: Task) -> str:
        return str(task.metadata["numbers"][0])

    # ------------------------------------------------------------------ the game
    def _new_game(self) -> None:
        self.round, self.left, self.lo, self.hi, self.found = 0, self.guesses, self.low, self.high, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        self._new_game()
        return obs, {**info, "state_key": self.state_key()}

    def state_key(self) -> str:
        """The logical state: round, the range the number can still be in, guesses left."""
        return f"r{self.round}:{self.lo}-{self.hi}:{self.left}"

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        numbers = _NUMBER.findall(action if isinstance(action, str) else str(action))
        guess = int(numbers[-1]) if numbers else None
        target = self.task.metadata["numbers"][self.round]
        self.left -= 1
        reward, words = 0.0, ""
        if guess == target:
            reward, self.found = 1.0 / self.rounds, self.found + 1
            words = f"{guess} is right!"
        elif guess is None:
            words = f"Reply with one whole number from {self.low} to {self.high}."
        elif guess < target:
            self.lo = max(self.lo, guess + 1)
            words = f"{guess} is too low."
        else:
            self.hi = min(self.hi, guess - 1)
            words = f"{guess} is too high."
        if guess == target or self.left == 0:
            if guess != target:
                words += f" Out of guesses: it was {target}."
            self.round, self.left, self.lo, self.hi = self.round + 1, self.guesses, self.low, self.high
        done = self.round == self.rounds
        correct = float(done and self.found == self.rounds)
        info = {"reward_components": {"correct": correct, "found": self.found / self.rounds}, "verified": True,
                "state_key": self.state_key(), "parsed": None if guess is None else str(guess)}
        self._last_obs = "" if done else self._observation(words)
        return self._last_obs, reward, done, False, info

    def _observation(self, words: str) -> str:
        status = (f"Round {self.round + 1} of {self.rounds}, " if self.rounds > 1 else "") + f"{self.left} left."
        if self.feedback == "interval" and self.left < self.guesses:
            words += f" It is from {self.lo} to {self.hi}."
        elif self.left == self.guesses and self.round > 0:
            words += f" New number from {self.low} to {self.high}."
        return f"{words} {status}"

    # ------------------------------------------------------------------ reference policy
    def reference_action(self) -> str:
        """The next guess of the reference policy (``reference_policy``) in the current state."""
        if self.task is None:
            raise RuntimeError("call reset() before reference_action()")
        if self.reference_policy == "uniform":
            return str(int(self.np_random.integers(self.lo, self.hi + 1)))
        return str((self.lo + self.hi) // 2)

    def reference_summary(self) -> str:
        """What a compaction summary of the current state should say."""
        where = f"Round {self.round + 1} of {self.rounds}: " if self.rounds > 1 else ""
        return f"{where}the number is from {self.lo} to {self.hi}, {self.left} left."


def split_of(numbers: list[int]) -> str:
    """Which split a task belongs to (a stable hash of its numbers)."""
    bucket = int(hashlib.sha1(",".join(map(str, numbers)).encode()).hexdigest()[:8], 16) % 100
    return next(name for name, (lo, hi) in SPLITS.items() if lo <= bucket < hi)
