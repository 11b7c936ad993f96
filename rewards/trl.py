"""Use any of our rewards as a TRL ``reward_funcs`` entry, without importing TRL.

TRL calls ``fn(prompts, completions, **kwargs) -> list[float]``, where completions are strings or,
for conversational datasets, lists of chat messages, and ``kwargs`` holds the dataset's other
columns, one value per completion (e.g. ``answer``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrl.types import Task
from rewards.registry import RewardFn, as_reward, get_reward


def completion_text(completion: Any) -> str:
    """Text of a completion: a string, or the last assistant message of a message list."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, list):
        msgs = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in msgs if m.get("role", "assistant") == "assistant"]
        return str((assistant or msgs or [{}])[-1].get("content", ""))
    return str(completion)


def trl_reward(reward: str | RewardFn, *, answer_key: str = "answer") -> Callable[..., list[float]]:
    """A TRL ``reward_funcs`` callable scoring each completion with ``reward``.

    The gold answer is read from the ``answer_key`` column; every other column goes to
    ``task.metadata`` (so code tasks can carry ``tests``).
    """
    fn = get_reward(reward) if isinstance(reward, str) else as_reward(reward)

    def reward_func(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        scores = []
        for i, completion in enumerate(completions):
            columns = {k: v[i] for k, v in kwargs.items() if isinstance(v, list) and len(v) == len(completions)}
            answer = columns.pop(answer_key, None)
            prompt = prompts[i] if prompts is not None and i < len(prompts) else ""
            task = Task(id=str(i), prompt=prompt, answer=answer, metadata=columns)
            scores.append(float(fn(completion_text(completion), task).score))
        return scores

    reward_func.__name__ = reward if isinstance(reward, str) else getattr(fn, "__name__", "reward")
    return reward_func
