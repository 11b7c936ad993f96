"""Reward functions used by the server tests (loaded by the server as ``module:function``)."""

from __future__ import annotations

import os
import time

from agentrl.types import RewardResult, Task


def length_reward(response: str, task: Task) -> RewardResult:
    """Score = number of characters / 100."""
    return RewardResult(len(response) / 100, {"length": float(len(response))}, {})


def hang(response: str, task: Task) -> RewardResult:
    """Sleeps forever when the response is "hang"; else 1.0."""
    while response == "hang":
        time.sleep(0.05)
    return RewardResult(1.0, {}, {})


def busy_c_hang(response: str, task: Task) -> RewardResult:
    """Blocks in C code (no signal gets through) when the response is "hang"."""
    if response == "hang":
        _ = 10 ** (10 ** 8) % 7  # seconds of big-int work inside one C call
    return RewardResult(1.0, {}, {})


def crash(response: str, task: Task) -> RewardResult:
    """Raises for "raise", kills its own process for "exit"; else 1.0."""
    if response == "raise":
        raise RuntimeError("boom")
    if response == "exit":
        os._exit(3)
    return RewardResult(1.0, {}, {})


def bulky(response: str, task: Task) -> RewardResult:
    """1.0, with ~100 kB of info: a chunk's results outgrow the pipe's buffer, so they arrive in pieces."""
    return RewardResult(1.0, {}, {"echo": response * (100_000 // max(1, len(response)))})
