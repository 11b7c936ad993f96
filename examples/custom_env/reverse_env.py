"""A complete user environment: reverse a short word. Single turn, its own reward, train/test splits.

Everything agentrl needs from an environment is here:

- subclass :class:`agentrl.TextEnv` (a ``gymnasium.Env`` with text observations and actions);
- ``sample_task(rng)``: draw one :class:`agentrl.Task` with the given generator (the trainer and
  ``reset(seed=...)`` pass one, so the same seed gives the same task);
- ``reset`` (inherited): ``reset(options={"task": task})`` pins a task, else one is drawn; the
  observation is the task's prompt;
- ``score(action, task)``: verify the model's text and return a :class:`agentrl.RewardResult`
  (a float score, named parts as ``components``, extras as ``info``); the inherited ``step`` calls it
  and returns ``(observation, reward, terminated, truncated, info)`` for a single-turn episode;
- ``reference_answer(task)`` (optional; default ``str(task.answer)``): a response that scores 1.0 —
  the tiny model's tokenizer and the warm start learn from it.

Use it from a config as ``env.id: reverse_env:ReverseEnv`` (with this directory on ``PYTHONPATH``),
register an id for it (``env.register: {custom/Reverse-v0: reverse_env:ReverseEnv}``), or install
this directory as a package: its ``pyproject.toml`` registers ``custom/Reverse-v0`` through the
``agentrl.envs`` entry point (see :func:`register`).
"""

from __future__ import annotations

import difflib
import hashlib

import numpy as np

import agentrl
from agentrl import RewardResult, Task, TextEnv

LETTERS = "abcdefghij"


class ReverseEnv(TextEnv):
    """"Reverse the word: abc" -> "cba". Reward 1 for the exact reversal, partial credit otherwise."""

    def __init__(self, min_len: int = 3, max_len: int = 5, split: str = "train", partial_credit: float = 0.5,
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}; valid: train, test")
        self.min_len, self.max_len, self.split, self.partial_credit = min_len, max_len, split, partial_credit

    def sample_task(self, rng: np.random.Generator) -> Task:
        while True:  # words fall in train (90%) or test (10%) by a hash: the test words are never trained on
            n = int(rng.integers(self.min_len, self.max_len + 1))
            word = "".join(LETTERS[int(i)] for i in rng.integers(0, len(LETTERS), size=n))
            in_test = int(hashlib.sha1(word.encode()).hexdigest(), 16) % 10 == 0
            if in_test == (self.split == "test"):
                return Task(id=f"reverse-{word}", prompt=f"Reverse the word: {word}\nAnswer:", answer=word[::-1])

    def score(self, action: str, task: Task) -> RewardResult:
        guess = action.strip()
        exact = float(guess == task.answer)
        similarity = difflib.SequenceMatcher(None, guess, task.answer).ratio()
        reward = 1.0 if exact else self.partial_credit * similarity
        # "correct" is what held-out accuracy counts; info["parsed"] is the answer maj@k votes on
        return RewardResult(reward, {"correct": exact, "similarity": similarity}, {"parsed": guess})

    def reference_answer(self, task: Task) -> str:
        return task.answer  # the same as the default (str(task.answer)); shown because the warm start uses it


def register() -> None:
    """The ``agentrl.envs`` entry point of this package: registers ``custom/Reverse-v0``."""
    agentrl.register("custom/Reverse-v0", "reverse_env:ReverseEnv")
