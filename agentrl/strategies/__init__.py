"""Data-parallel training strategies: ``DeepSpeedStrategy`` (ZeRO 0-3) and ``TorchDDPStrategy``.

DeepSpeed is imported only by ``agentrl.strategies.deepspeed``; ``make_strategy("deepspeed")``
falls back to DDP when it is not installed.
"""

from agentrl.strategies.base import Strategy, make_strategy, shard_micro_batches, shard_rows

__all__ = ["Strategy", "make_strategy", "shard_micro_batches", "shard_rows"]
