"""``DeepSpeedStrategy``: ZeRO stages 0-3, optimizer / parameter offload, bf16; gloo on CPU, NCCL on GPU.

The client optimizer is the learner's own ``torch.optim.AdamW`` (ZeRO partitions its flat fp32
state; Adam is elementwise, so the update equals the single-process one), with the learner's
scheduler stepped after each optimizer step. Gradient accumulation is unmanaged
(``managed_gradient_accumulation: false``): the learner decides how many micro-batches make one
step and normalises the loss itself, so ``backward`` does not rescale and ``step`` is the boundary.
Gradient clipping is DeepSpeed's (over the full, reduced gradient).

On CPU DeepSpeed picks its CPU accelerator (``DS_ACCELERATOR=cpu``) and gloo, and JIT-builds its
``deepspeed_shm_comm`` op once (~35 s, cached in ``~/.cache/torch_extensions``; the Makefile
pre-builds it).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Iterator
from typing import Any

import torch

from agentrl.distributed.strategies.base import Strategy


@contextlib.contextmanager
def _without_build_notice() -> Iterator[None]:
    """stdout of the block, less DeepSpeed's "DeepSpeed ... built successfully" line (its comm op, built
    once at install, is loaded on every rank); anything else printed goes on to stdout."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            yield
    finally:
        kept = [line for line in buffer.getvalue().splitlines(keepends=True)
                if not re.fullmatch(r"DeepSpeed \S+ built successfully\s*", line)]
        sys.stdout.write("".join(kept))


class DeepSpeedStrategy(Strategy):
    name = "deepspeed"

    def __init__(self, *, zero_stage: int = 2, offload_optimizer: bool = False, offload_params: bool = False,
                 grad_clip: float = 1.0, dtype: str = "float32") -> None:
        from agentrl.models import quiet_library_output
        from agentrl.preflight import require_deepspeed_api

        require_deepspeed_api()
        quiet_library_output()  # in a Ray actor too: no CPU-accelerator notice per rank
        import deepspeed

        if zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage}")
        if offload_params and zero_stage != 3:
            raise ValueError("offload_params needs ZeRO stage 3")
        self.zero_stage, self.offload_optimizer, self.offload_params = zero_stage, offload_optimizer, offload_params
        with _without_build_notice():
            deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo", verbose=False)
        super().__init__(grad_clip=grad_clip, dtype=dtype)

    def config(self) -> dict[str, Any]:
        """The DeepSpeed config this strategy runs with."""
        zero: dict[str, Any] = {"stage": self.zero_stage}
        if self.offload_optimizer:
            zero["offload_optimizer"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
        if self.offload_params:
            zero["offload_param"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
        return {
            "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "train_batch_size": self.world_size, "managed_gradient_accumulation": False,
            "gradient_clipping": self.grad_clip if self.grad_clip > 0 else 0.0,
            "zero_optimization": zero, "bf16": {"enabled": self.dtype == "bfloat16"},
            "fp16": {"enabled": self.dtype == "float16"},
            "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
            "steps_per_print": 2**31, "wall_clock_breakdown": False,
        }

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
                ) -> tuple[Any, Any, Any]:
        import deepspeed

        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model.to(self.device), optimizer=optimizer, config=self.config())
        self.scheduler = scheduler
        return self.engine, self.optimizer, scheduler

    def backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> float:
        self.engine.step()
        self.scheduler.step()
        self.engine.zero_grad()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def unwrap(self) -> torch.nn.Module:
        return self.engine.module

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full parameters one by one; under ZeRO-3 each is gathered for the duration of its yield."""
        import deepspeed

        for name, p in self.engine.module.named_parameters():
            with deepspeed.zero.GatheredParameters([p], enabled=self.zero_stage == 3):
                yield name, p.data

    def optimizer_state(self) -> dict[str, Any]:
        """This rank's partition of the ZeRO optimizer state (fp32 master weights included)."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_optimizer_state(self, states: list[dict[str, Any]]) -> None:
        """Load from every rank's saved state (ZeRO re-partitions them)."""
        opt = [s["optimizer"] for s in states]
        if self.zero_stage == 0:
            self.optimizer.load_state_dict(opt[self.rank])
        else:
            self.optimizer.load_state_dict(opt, load_optimizer_states=True, load_from_fp32_weights=True)
        self.scheduler.load_state_dict(states[self.rank]["scheduler"])

    def offload(self) -> None:
        """Colocated GPU mode: move ZeRO-3 states to CPU while the engines generate."""
        if torch.cuda.is_available() and self.zero_stage == 3:
            self.engine.offload_states()

    def reload(self) -> None:
        if torch.cuda.is_available() and self.zero_stage == 3:
            self.engine.reload_states()
