"""Pushing the policy's weights to the rollout engines after each update.

- **object store** (CPU, or any machine): every policy rank iterates its (ZeRO-3: gathered)
  parameters; rank 0 streams them as buckets of about ``BUCKET_BYTES`` (a Ray streaming generator),
  each cast to the engine's dtype and stored as numpy arrays (read zero-copy from the object store).
  The driver forwards each bucket's reference to every engine as soon as it exists; the engine's
  reload (``VLLMEngine.load_weights`` over an iterator) runs in a thread and consumes the buckets as
  they arrive, so producing, transferring and reloading overlap. The driver never holds the
  weights. Each push logs its bytes, seconds and the engines' own reload seconds.
- **NCCL** (GPU): a stateless NCCL group of policy rank 0 (group rank 0) and every vLLM worker
  (ranks 1..); rank 0 broadcasts parameter by parameter while the engines receive into fresh
  tensors and reload once (``agentrl.rollout.engines.vllm_worker``). Needs vLLM on the policy nodes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch

from agentrl.distributed.strategies.base import Strategy

BUCKET_BYTES = 64 << 20
log = logging.getLogger(__name__)

Bucket = list[tuple[str, str, np.ndarray]]
"""``(name, torch dtype name, array)``; bf16/fp16 travel as int16 arrays of the same bits."""


def to_buckets(named: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype | None = None,
               bucket_bytes: int = BUCKET_BYTES, copy: bool = True) -> Iterator[Bucket]:
    """Group ``(name, tensor)`` into buckets of about ``bucket_bytes``, each tensor cast to ``dtype``
    (None: kept) as a CPU numpy array (Ray stores numpy without pickling). With ``copy=False`` an
    array may view the live tensor: only for a consumer that copies it before the tensor changes
    (a Ray generator serialises each bucket when it is yielded)."""
    bucket: Bucket = []
    size = 0
    for name, src in named:
        t = src.detach().to("cpu", dtype or src.dtype)
        if copy and t.data_ptr() == src.data_ptr():
            t = t.clone()
        kind = str(t.dtype).removeprefix("torch.")
        raw = t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t
        bucket.append((name, kind, raw.contiguous().numpy()))
        size += t.numel() * t.element_size()
        if size >= bucket_bytes:
            yield bucket
            bucket, size = [], 0
    if bucket:
        yield bucket


def from_bucket(bucket: Bucket) -> Iterator[tuple[str, torch.Tensor]]:
    """The bucket's tensors (views of the arrays, no copy)."""
    with warnings.catch_warnings():  # arrays from the object store are read-only; the reload only reads them
        warnings.simplefilter("ignore", UserWarning)
        for name, kind, arr in bucket:
            t = torch.from_numpy(arr)
            yield name, (t.view(getattr(torch, kind)) if kind in ("bfloat16", "float16") else t)


def bucket_bytes(bucket: Bucket) -> int:
    return sum(arr.nbytes for _, _, arr in bucket)


class StreamingReload:
    """Engine side of a streamed sync: ``begin``, ``add(bucket)`` per bucket, ``end() -> stats``.

    The engine's ``load_weights`` runs in a thread over an iterator that waits for the next bucket,
    so the reload proceeds while later buckets are still being produced and transferred.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._queue: queue.Queue[Bucket | None] = queue.Queue()
        self._waited = 0.0
        self._bytes = 0
        self._error: BaseException | None = None
        self._start = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        while True:
            t0 = time.perf_counter()
            bucket = self._queue.get()
            self._waited += time.perf_counter() - t0
            if bucket is None:
                return
            self._bytes += bucket_bytes(bucket)
            yield from from_bucket(bucket)

    def _run(self) -> None:
        try:
            self.engine.load_weights(self._tensors())
        except BaseException as e:  # re-raised by end() in the caller's thread
            self._error = e

    def add(self, bucket: Bucket) -> None:
        self._queue.put(bucket)

    def end(self) -> dict[str, float]:
        """Wait for the reload; returns its bytes, seconds, and seconds not spent waiting for buckets."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
        total = time.perf_counter() - self._start
        return {"bytes": float(self._bytes), "seconds": total, "reload_s": total - self._waited}


def nccl_group(host: str, port: int, rank: int, world_size: int) -> Any:
    """A vLLM ``PyNcclCommunicator`` over a stateless group (does not touch ``torch.distributed``)."""
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.utils import StatelessProcessGroup

    group = StatelessProcessGroup.create(host=host, port=port, rank=rank, world_size=world_size)
    return PyNcclCommunicator(group, device=torch.cuda.current_device())


def broadcast_parameters(strategy: Strategy, comm: Any) -> None:
    """Iterate the parameters on every rank (ZeRO-3 gather); the rank holding ``comm`` broadcasts."""
    stream = torch.cuda.current_stream() if torch.cuda.is_available() else None
    for _, t in strategy.engine_weights():  # LoRA: merged
        if comm is not None:
            comm.broadcast(t.contiguous(), src=0, stream=stream)
    if comm is not None:
        torch.cuda.synchronize()


class WeightSync:
    """Connects a policy group to engine workers; ``push()`` returns the seconds it took."""

    def __init__(self, policy: Any, engines: Any, mode: str = "auto") -> None:
        import ray

        self.policy, self.engines = policy, engines
        self.last: dict[str, float] = {}
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
        """One sync; returns its seconds (``last`` holds bytes, seconds and the engines' reload seconds)."""
        import ray

        start = time.perf_counter()
        if self.mode == "nccl":
            receiving = self.engines.call_async("receive_nccl", self.specs)
            ray.get(self.policy.call_async("broadcast_nccl") + receiving)
            self.last = {"seconds": time.perf_counter() - start}
            return self.last["seconds"]
        gens = [a.weight_buckets.options(num_returns="streaming").remote() for a in self.policy.actors]
        ray.get(self.engines.call_async("begin_load"))
        added = []
        for ref in gens[0]:  # rank 0 yields a bucket at a time; the engines start on it at once
            added += self.engines.call_async("add_bucket", ref)
        for gen in gens[1:]:
            for ref in gen:
                ray.get(ref)
        ray.get(added)
        stats = ray.get(self.engines.call_async("end_load"))
        seconds = time.perf_counter() - start
        self.last = {"seconds": seconds, "bytes": stats[0]["bytes"],
                     "engine_reload_s": max(s["reload_s"] for s in stats)}
        log.info("weight sync: %.1f MB in %.3f s (engine reload %.3f s)", self.last["bytes"] / 2**20, seconds,
                 self.last["engine_reload_s"])
        return seconds


def _cluster_has_gpus() -> bool:
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0
