"""Deliberately broken verifiers for the doctor's tests (``reward.fn: tests/doctor/broken_verifiers.py:NAME``)."""

from __future__ import annotations

import itertools

from agentrl.types import RewardResult, Task

_calls = itertools.count()


def constant(response: str, task: Task) -> RewardResult:
    """Half a point for anything: a verifier that does not look at the answer."""
    return RewardResult(0.5, {"correct": 0.5})


def crashes_3_in_10(response: str, task: Task) -> RewardResult:
    """Right or wrong as rewards.math scores it, but raises on 3 calls in every 10."""
    if next(_calls) % 10 < 3:
        raise RuntimeError("verifier crashed: cannot parse the submission")
    return RewardResult(float(response.strip() == str(task.answer)), {})
