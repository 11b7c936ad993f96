"""An example agentrl reward plugin: exact string match of the stripped response and the answer."""

from __future__ import annotations

from agentrl.types import RewardResult, Task


def exact_match(response: str, task: Task) -> RewardResult:
    """1.0 when the response, stripped and case-folded, equals ``str(task.answer)``; else 0.0."""
    got = response.strip().casefold()
    ok = float(got == str(task.answer).strip().casefold())
    return RewardResult(ok, {"exact_match": ok}, {"parsed": got})
