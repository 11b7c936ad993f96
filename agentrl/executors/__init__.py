"""Executors turn environments into token-exact trajectories on an inference engine."""

from agentrl.executors.multi_turn import MultiTurnExecutor
from agentrl.executors.single_turn import SingleTurnExecutor, encode_prompt

__all__ = ["MultiTurnExecutor", "SingleTurnExecutor", "encode_prompt"]
