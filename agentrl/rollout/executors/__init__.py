"""Executors turn environments into token-exact trajectories on an inference engine."""

from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.rollout.executors.single_turn import SingleTurnExecutor, encode_prompt

__all__ = ["MultiTurnExecutor", "SingleTurnExecutor", "encode_prompt"]
