"""Executors turn environments into token-exact trajectories on an inference engine."""

from agentrl.executors.single_turn import SingleTurnExecutor, encode_prompt

__all__ = ["SingleTurnExecutor", "encode_prompt"]
