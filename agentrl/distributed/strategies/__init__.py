"""Data-parallel training strategies: ``DeepSpeedStrategy`` (ZeRO 0-3) and ``TorchDDPStrategy``.

DeepSpeed is imported only by ``agentrl.distributed.strategies.deepspeed``; ``make_strategy("deepspeed")``
falls back to DDP when it is not installed.
"""

from agentrl.distributed.strategies.base import Strategy, shard_micro_batches, shard_rows
from agentrl.distributed.strategies.factory import make_strategy

__all__ = ["Strategy", "make_strategy", "shard_micro_batches", "shard_rows"]
