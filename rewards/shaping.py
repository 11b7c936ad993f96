"""Format checks, length shaping and weighted combinations; each returns named components.

- :func:`tag_format` / :func:`think_answer_format`: 1.0 when the response has the required tags
  (e.g. ``<think>...</think><answer>...</answer>``), else 0.0.
- :func:`overlong_penalty`: DAPO's soft overlong punishment: 0 up to ``max_len - cache_len``, then
  linearly down to -1 at ``max_len``, -1 beyond.
- :func:`combine`: a weighted sum of named reward functions; every part becomes a component.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from agentrl.types import RewardResult, Task
from rewards.registry import RewardFn, get_reward


def tag_format(response: str, tags: Sequence[str] = ("think", "answer"), *, strict: bool = True) -> float:
    """1.0 when each ``<tag>...</tag>`` occurs exactly once, in order (``strict``: and nothing else)."""
    body = r"\s*".join(rf"<{t}>(?:(?!<{t}>).)*?</{t}>" for t in tags)
    pattern = rf"^\s*{body}\s*$" if strict else body
    if not re.search(pattern, response, re.DOTALL):
        return 0.0
    return 1.0 if all(response.count(f"<{t}>") == 1 for t in tags) else 0.0


def think_answer_format(response: str, task: Task) -> RewardResult:
    """Reward function: ``<think>...</think> <answer>...</answer>`` and nothing else."""
    ok = tag_format(response)
    return RewardResult(ok, {"format": ok}, {})


def answer_in_tags(response: str, tag: str = "answer") -> str | None:
    """The text inside the last ``<tag>...</tag>``, or ``None``."""
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", response, re.DOTALL)
    return found[-1].strip() if found else None


def overlong_penalty(length: int, max_len: int, cache_len: int) -> float:
    """DAPO soft overlong punishment for a response of ``length`` tokens (or characters)."""
    if not 0 <= cache_len <= max_len:
        raise ValueError("need 0 <= cache_len <= max_len")
    if length <= max_len - cache_len:
        return 0.0
    if length <= max_len:
        return (max_len - cache_len - length) / cache_len
    return -1.0


def overlong(max_len: int, cache_len: int, length_fn: Callable[[str], int] = len) -> RewardFn:
    """A reward function giving :func:`overlong_penalty` of ``length_fn(response)`` (component ``overlong``)."""
    def reward(response: str, task: Task) -> RewardResult:
        pen = overlong_penalty(length_fn(response), max_len, cache_len)
        return RewardResult(pen, {"overlong": pen}, {})
    return reward


def combine(parts: Mapping[str, tuple[RewardFn | str, float]]) -> RewardFn:
    """Weighted sum: ``combine({"correct": ("math", 1.0), "format": (fmt, 0.1)})``.

    Each part's score becomes a component under its name; infos are kept under the same name.
    """
    resolved = {name: (get_reward(fn) if isinstance(fn, str) else fn, float(w))
                for name, (fn, w) in parts.items()}

    def reward(response: str, task: Task) -> RewardResult:
        components, info, total = {}, {}, 0.0
        for name, (fn, weight) in resolved.items():
            out = fn(response, task)
            components[name] = float(out.score)
            info[name] = out.info
            total += weight * float(out.score)
        return RewardResult(total, components, info)
    return reward


def math_with_format(response: str, task: Task) -> RewardResult:
    """Correct math answer inside ``<answer>`` (1.0) plus 0.1 for the think/answer format."""
    from rewards import math as rmath

    inner = answer_in_tags(response)
    correct = rmath.score(inner if inner is not None else response, task)
    fmt = tag_format(response)
    return RewardResult(correct.score + 0.1 * fmt, {"correct": correct.score, "format": fmt},
                        {"correct": correct.info})
