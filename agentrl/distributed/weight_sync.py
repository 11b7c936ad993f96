"""Pushing the policy's weights to the rollout engines after each update.

- **object store** (CPU, or any machine): every policy rank iterates its (ZeRO-3: gathered)
  parameters; rank 0 streams them as buckets of about ``BUCKET_BYTES`` (a Ray streaming generator),
  each cast to the engine's dtype and stored as numpy arrays (read zero-copy from the object store).
  The driver forwards each bucket's reference to every engine as soon as it exists; the engine's
  reload (``VLLMEngine.load_weights`` over an iterator) runs in a thread and consumes the buckets as
  they arrive, so producing, transferring and reloading overlap. The driver never holds the
  weights. Each push logs its bytes, seconds and the engines' own reload seconds.
- **collective** (``nccl`` on GPU, ``gloo`` on CPU): a group of policy rank 0 (group rank 0) and every
  engine worker (ranks 1..), formed once with a timeout (a peer that never joins fails the run in one
  line instead of hanging); each push broadcasts flat buckets of ``cluster.sync_bucket_mb`` (one
  broadcast per bucket) that the engines reload from as they arrive. The protocol and its two
  transports are :mod:`agentrl.rollout.engines.weight_protocol`; the gloo transport runs the same code
  on CPU, so CI exercises the GPU path's logic. NCCL needs vLLM on the policy nodes and each rank on
  its own GPU.
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


class WeightSync:
    """Connects a policy group to engine workers; ``push()`` returns the seconds it took."""

    def __init__(self, policy: Any, engines: Any, mode: str = "auto", *, timeout_s: float = 300.0,
                 bucket_bytes: int = BUCKET_BYTES, shared_gpus: bool = False) -> None:
        import ray

        self.policy, self.engines = policy, engines
        self.last: dict[str, float] = {}
        if mode == "auto":  # NCCL refuses two ranks on one GPU: fractional GPUs sync through host memory (gloo)
            on_gpus = torch.cuda.is_available() or _cluster_has_gpus()
            mode = ("gloo" if shared_gpus else "nccl") if on_gpus else "object_store"
        self.mode = mode
        if mode in ("nccl", "gloo"):
            host, port = ray.get(policy.actors[0].address.remote())
            world = 1 + len(engines.actors)  # one worker per engine (tensor_parallel_size 1)
            _get(policy.call_async("connect_weight_sync", mode, host, port, world, timeout_s, bucket_bytes)
                 + [e.connect_weight_sync.remote(mode, host, port, 1 + i, world, timeout_s)
                    for i, e in enumerate(engines.actors)])

    def push(self) -> float:
        """One sync; returns its seconds (``last`` holds bytes, seconds and the engines' reload seconds)."""
        import ray

        start = time.perf_counter()
        if self.mode in ("nccl", "gloo"):
            receiving = self.engines.call_async("receive_weights")
            sent = [r for r in _get(self.policy.call_async("send_weights") + receiving)[:len(self.policy.actors)]
                    if r is not None][0]
            self.last = {"seconds": time.perf_counter() - start, "bytes": sent["bytes"], "buckets": sent["buckets"]}
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


def _get(refs: list[Any]) -> list[Any]:
    """``ray.get``; an actor's ``WeightSyncError`` comes back as itself, with its one-line message."""
    import ray

    from agentrl.rollout.engines.weight_protocol import WeightSyncError

    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, WeightSyncError):
            raise WeightSyncError(str(e.cause)) from e
        raise


def _cluster_has_gpus() -> bool:
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0
