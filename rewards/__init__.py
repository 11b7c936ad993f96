"""Verifiable rewards: math and code verifiers, format and shaping, a registry, server and client.

A reward function is ``fn(response: str, task: Task) -> RewardResult``. Find one by name with
:func:`get_reward` (built-ins, plugins by entry point group ``agentrl.rewards``, or
``"module:function"``). Submodules: :mod:`rewards.math`, :mod:`rewards.code`,
:mod:`rewards.shaping`, :mod:`rewards.trl`, :mod:`rewards.server` (FastAPI; imported only when
used), :mod:`rewards.client` (``RemoteReward``, httpx).
"""

from rewards.registry import ENTRY_POINT_GROUP, RewardFn, as_reward, available, get_reward, register

__all__ = ["ENTRY_POINT_GROUP", "RewardFn", "as_reward", "available", "get_reward", "register"]
