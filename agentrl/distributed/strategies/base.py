"""The strategy API: how a data-parallel rank wraps the model, steps the optimizer and gathers weights.

A strategy owns one rank of a process group (``torch.distributed``: gloo on CPU, NCCL on GPU,
rendezvous from the ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` environment, as
``torchrun`` and the Ray actor group both set it). The learner calls, per optimizer step:
``backward(loss)`` once per micro-batch, then ``step() -> grad_norm``. ``named_parameters()``
yields the full (ZeRO-3: gathered) weights with HF names — a collective, so every rank iterates it.

Every rank receives the whole batch and trains on its contiguous shard (:func:`shard_micro_batches`);
all ranks run the same number of forward/backward passes (a rank with fewer rows runs a zero-weight
pass), so collectives inside backward (DDP all-reduce, ZeRO reduce-scatter / gather) always pair up.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from agentrl.training.experience import Experience


def shard_rows(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """Contiguous ``[start, stop)`` of ``n`` rows owned by ``rank`` (sizes differ by at most one)."""
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def shard_micro_batches(batch: Experience, rank: int, world_size: int, micro_batch_size: int
                        ) -> list[tuple[Experience, float]]:
    """This rank's micro-batches of ``batch`` with a weight: 1.0, or 0.0 for a padding pass.

    Every rank gets ``ceil(ceil(len/world)/micro)`` entries; a rank that has run out of rows
    repeats row 0 with weight 0 (its gradient is multiplied by 0, but the collectives still run).
    """
    start, stop = shard_rows(len(batch), rank, world_size)
    size = max(1, micro_batch_size)
    count = math.ceil(math.ceil(len(batch) / world_size) / size)
    out = []
    for i in range(count):
        lo, hi = start + i * size, min(stop, start + (i + 1) * size)
        out.append((batch.select(slice(lo, hi)), 1.0) if lo < hi else (batch.select(slice(0, 1)), 0.0))
    return out


def init_process_group(backend: str | None = None) -> None:
    """Join the default process group from the environment (no-op when already joined)."""
    if dist.is_initialized():
        return
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend, rank=int(os.environ.get("RANK", "0")),
                            world_size=int(os.environ.get("WORLD_SIZE", "1")))


class Strategy:
    """One data-parallel rank. Subclasses: :class:`TorchDDPStrategy`, :class:`DeepSpeedStrategy`."""

    name = "base"

    def __init__(self, *, grad_clip: float = 1.0, dtype: str = "float32") -> None:
        self.grad_clip, self.dtype = grad_clip, dtype
        init_process_group()
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
                ) -> tuple[Any, Any, Any]:
        """Wrap model, optimizer and scheduler; returns the objects to use from then on."""
        raise NotImplementedError

    def backward(self, loss: torch.Tensor) -> None:
        raise NotImplementedError

    def step(self) -> float:
        """Reduce gradients, clip, step optimizer and scheduler, zero gradients; returns the grad norm."""
        raise NotImplementedError

    def unwrap(self) -> torch.nn.Module:
        """The bare Hugging Face model."""
        raise NotImplementedError

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full parameters one by one (collective). Tensors are only valid inside the iteration."""
        yield from self.unwrap().named_parameters()

    def engine_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The weights an engine loads, one by one (collective): ``named_parameters``, or for a LoRA policy
        the base weights with the adapters merged under the plain names (``agentrl.training.lora``)."""
        from agentrl.training.lora import is_lora, policy_weights

        model = self.unwrap()
        yield from policy_weights(model) if is_lora(model) else self.named_parameters()

    def optimizer_state(self) -> dict[str, Any]:
        """This rank's optimizer and scheduler state (partitioned under ZeRO)."""
        raise NotImplementedError

    def load_optimizer_state(self, states: list[dict[str, Any]]) -> None:
        """Load from the saved states of every rank (``optimizer_state()`` of each, in rank order)."""
        raise NotImplementedError

    def all_reduce_sum(self, values: dict[str, float]) -> dict[str, float]:
        """Sum scalar metrics over ranks."""
        return self._all_reduce(values, dist.ReduceOp.SUM)

    def all_reduce_max(self, values: dict[str, float]) -> dict[str, float]:
        """The max of scalar metrics over ranks."""
        return self._all_reduce(values, dist.ReduceOp.MAX)

    def _all_reduce(self, values: dict[str, float], op: Any) -> dict[str, float]:
        if self.world_size == 1 or not values:
            return dict(values)
        keys = sorted(values)
        t = torch.tensor([values[k] for k in keys], dtype=torch.float64,
                         device=self.device if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(t, op=op)
        return dict(zip(keys, t.tolist()))

    def offload(self) -> None:
        """Free accelerator memory between training phases (colocated mode); no-op by default."""

    def reload(self) -> None:
        """Undo :meth:`offload`."""
