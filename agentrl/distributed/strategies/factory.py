"""Choosing a strategy by name (the concrete strategies import ``base``; this module imports them)."""

from __future__ import annotations

from typing import Any

from agentrl.distributed.strategies.base import Strategy


def make_strategy(name: str, **kwargs: Any) -> Strategy:
    """``deepspeed`` (falls back to ``ddp`` with a warning when DeepSpeed is not installed) or ``ddp``."""
    import importlib.util

    if name == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        import warnings

        warnings.warn("deepspeed is not installed: using the torch DDP strategy", stacklevel=2)
        name = "ddp"
    if name == "deepspeed":
        from agentrl.distributed.strategies.deepspeed import DeepSpeedStrategy

        return DeepSpeedStrategy(**kwargs)
    if name == "ddp":
        from agentrl.distributed.strategies.torch_ddp import TorchDDPStrategy

        for k in ("zero_stage", "offload_optimizer", "offload_params"):
            kwargs.pop(k, None)
        return TorchDDPStrategy(**kwargs)
    raise ValueError(f"unknown strategy {name!r}; valid: deepspeed, ddp")
