"""Pushing the policy's weights to the rollout engines after each update.

- **object store** (CPU, or any machine): every policy rank iterates its (ZeRO-3: gathered)
  parameters; rank 0 returns them as one list of CPU tensors, which lands in Ray's object store;
  its reference goes to every engine, which reloads in place (``VLLMEngine.load_weights``). The
  driver never holds the weights.
- **NCCL** (GPU): a stateless NCCL group of policy rank 0 (group rank 0) and every vLLM worker
  (ranks 1..); rank 0 broadcasts parameter by parameter while the engines receive into fresh
  tensors and reload once (``agentrl.rollout.engines.vllm_worker``). Needs vLLM on the policy nodes.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from agentrl.distributed.strategies.base import Strategy


def weight_specs(strategy: Strategy) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(name, dtype, full shape)`` of every parameter, in iteration order."""
    return [(n, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for n, t in strategy.named_parameters()]


def nccl_group(host: str, port: int, rank: int, world_size: int) -> Any:
    """A vLLM ``PyNcclCommunicator`` over a stateless group (does not touch ``torch.distributed``)."""
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.utils import StatelessProcessGroup

    group = StatelessProcessGroup.create(host=host, port=port, rank=rank, world_size=world_size)
    return PyNcclCommunicator(group, device=torch.cuda.current_device())


def broadcast_parameters(strategy: Strategy, comm: Any) -> None:
    """Iterate the parameters on every rank (ZeRO-3 gather); the rank holding ``comm`` broadcasts."""
    stream = torch.cuda.current_stream() if torch.cuda.is_available() else None
    for _, t in strategy.named_parameters():
        if comm is not None:
            comm.broadcast(t.contiguous(), src=0, stream=stream)
    if comm is not None:
        torch.cuda.synchronize()


class WeightSync:
    """Connects a policy group to engine workers; ``push()`` returns the seconds it took."""

    def __init__(self, policy: Any, engines: Any, mode: str = "auto") -> None:
        import ray

        self.policy, self.engines = policy, engines
        if mode == "auto":
            mode = "nccl" if torch.cuda.is_available() or _cluster_has_gpus() else "object_store"
        self.mode = mode
        if mode == "nccl":
            host, port = ray.get(policy.actors[0].address.remote())
            world = 1 + len(engines.actors)  # one vLLM worker per engine (tensor_parallel_size 1)
            ray.get([policy.actors[0].init_nccl.remote(host, port, world)]
                    + [e.init_nccl.remote(host, port, 1 + i, world) for i, e in enumerate(engines.actors)])
            self.specs = ray.get(policy.call_async("weight_specs"))[0]

    def push(self) -> float:
        import ray

        start = time.perf_counter()
        if self.mode == "nccl":
            receiving = self.engines.call_async("receive_nccl", self.specs)
            ray.get(self.policy.call_async("broadcast_nccl") + receiving)
        else:
            refs = self.policy.call_async("named_weights")
            ray.get(self.engines.call_async("load_weights", refs[0]) + refs)
        return time.perf_counter() - start


def _cluster_has_gpus() -> bool:
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0
