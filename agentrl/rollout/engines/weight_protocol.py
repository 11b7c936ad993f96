"""The collective weight sync from a policy rank to engine workers: one protocol, two transports.

**Group.** Rank 0 is the policy's rank 0 (it sends); ranks 1..N are the engine workers (they
receive). Every member calls :func:`connect` with the same ``host:port`` (rank 0 listens there) and
``world_size``; a member that does not join within ``timeout_s`` makes the others raise
:class:`WeightSyncError` naming the address and the ranks, instead of hanging.

**Transport** (the seam): ``broadcast(tensor, src)`` into a tensor on ``transport.device``.

- ``nccl`` (GPU): vLLM's ``PyNcclCommunicator`` over a ``StatelessProcessGroup``; neither touches
  ``torch.distributed``'s default group, so DeepSpeed's and vLLM's own groups are left alone.
  NCCL needs each rank on its own GPU.
- ``gloo`` (CPU): a ``torch.distributed`` gloo process group of its own (``ProcessGroupGloo`` over a
  private ``TCPStore``, not the default group); every broadcast has the same timeout.

**Protocol.** At connect the sender broadcasts the manifest: the bucket size and the ordered
``(name, dtype, shape)`` of every weight (HF state-dict names; tied weights appear once, as
``named_parameters`` yields them). Both sides cut the manifest into the same buckets
(:func:`plan_buckets`: consecutive weights of one dtype, up to ``bucket_bytes``; a larger weight is a
bucket of its own). Each sync is a header (magic, sync number, bucket count) and then one broadcast
per bucket of a flat tensor; the sender packs weights into it as the (ZeRO-3: gathered) parameters
come, and the receiver yields views of each bucket as it arrives, so an engine's reload starts on the
first bucket. Whatever the reload does not consume is still received (:meth:`WeightReceiver.drain`),
so a failing reload never leaves the sender waiting.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Iterator
from typing import Any

import torch

Spec = tuple[str, str, tuple[int, ...]]
"""``(name, dtype name as in torch, shape)`` of one weight."""

BUCKET_BYTES = 256 << 20
MAGIC = 0x57535943  # "WSYC": a header that is not one means the two sides are out of step
DEFAULT_TIMEOUT_S = 300.0


class WeightSyncError(ConnectionError):
    """The weight-sync group could not form, fell out of step, or a transfer failed (one line; a
    ``ConnectionError``, so ``agentrl`` prints it as one line like other connection failures)."""


def plan_buckets(specs: list[Spec], bucket_bytes: int) -> list[list[int]]:
    """Indices into ``specs`` of each bucket: consecutive weights of one dtype up to ``bucket_bytes``."""
    buckets: list[list[int]] = []
    size, dtype = 0, None
    for i, (_, kind, shape) in enumerate(specs):
        nbytes = _numel(shape) * _dtype(kind).itemsize
        if not buckets or kind != dtype or size + nbytes > bucket_bytes:
            buckets.append([])
            size, dtype = 0, kind
        buckets[-1].append(i)
        size += nbytes
    return buckets


def weight_specs(named: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype | None = None) -> list[Spec]:
    """The manifest of ``named`` as sent in ``dtype`` (None: each tensor's own; integer tensors keep theirs)."""
    out = []
    for name, t in named:
        kind = dtype if dtype is not None and t.is_floating_point() else t.dtype
        out.append((name, str(kind).removeprefix("torch."), tuple(t.shape)))
    return out


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _dtype(kind: str) -> torch.dtype:
    dtype = getattr(torch, kind, None)
    if not isinstance(dtype, torch.dtype):
        raise WeightSyncError(f"weight sync: unknown dtype {kind!r} in the manifest")
    return dtype


# ---------------------------------------------------------------------------------------------- transports
class GlooTransport:
    """A gloo process group of its own (CPU tensors), with ``timeout_s`` on joining and every broadcast."""

    kind = "gloo"

    def __init__(self, host: str, port: int, rank: int, world_size: int, timeout_s: float) -> None:
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        self.rank, self.world_size, self.timeout = rank, world_size, timeout
        self.device = torch.device("cpu")
        store = dist.TCPStore(host, port, world_size, rank == 0, timeout=timeout, wait_for_workers=True)
        options = dist.ProcessGroupGloo._Options()
        options._timeout = timeout
        if host in ("127.0.0.1", "localhost"):  # every member is on this machine: stay on loopback
            options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        else:
            options._devices = [dist.ProcessGroupGloo.create_default_device()]
        self.group = dist.ProcessGroupGloo(dist.PrefixStore("agentrl-weight-sync", store), rank, world_size, options)
        self.store = store

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank, opts.timeout = src, self.timeout
        self.group.broadcast([tensor], opts).wait()

    def synchronize(self) -> None:
        """Gloo broadcasts complete in ``wait()``: nothing is in flight."""

    def close(self) -> None:
        self.group = self.store = None


class NcclTransport:
    """vLLM's ``PyNcclCommunicator`` over a ``StatelessProcessGroup`` (tensors on ``device``, a GPU)."""

    kind = "nccl"

    def __init__(self, host: str, port: int, rank: int, world_size: int, timeout_s: float,
                 device: torch.device | None = None) -> None:
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        self.rank, self.world_size = rank, world_size
        self.device = device or torch.device("cuda", torch.cuda.current_device())
        group = StatelessProcessGroup.create(host=host, port=port, rank=rank, world_size=world_size,
                                             store_timeout=max(1, int(timeout_s)))
        self.comm = PyNcclCommunicator(group, device=self.device)
        if getattr(self.comm, "disabled", False) or not getattr(self.comm, "available", True):
            # vLLM disables the communicator, silently, when it cannot load libnccl (or VLLM_DISABLE_PYNCCL=1):
            # its broadcasts would then do nothing and the engines would keep their old weights
            raise WeightSyncError("weight sync: vLLM's PyNcclCommunicator is disabled (no NCCL library, or "
                                  "VLLM_DISABLE_PYNCCL=1): use cluster.weight_sync=object_store")

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        self.comm.broadcast(tensor, src=src, stream=torch.cuda.current_stream(self.device))

    def synchronize(self) -> None:
        torch.cuda.current_stream(self.device).synchronize()

    def close(self) -> None:
        self.comm = None


Transport = GlooTransport | NcclTransport


def connect(kind: str, host: str, port: int, rank: int, world_size: int, *, timeout_s: float = DEFAULT_TIMEOUT_S,
            device: torch.device | None = None) -> Transport:
    """Join the weight-sync group (every member calls this; rank 0 listens on ``host:port``)."""
    if kind not in ("nccl", "gloo"):
        raise ValueError(f"weight-sync transport must be nccl or gloo, got {kind!r}")
    try:
        if kind == "gloo":
            return GlooTransport(host, port, rank, world_size, timeout_s)
        return NcclTransport(host, port, rank, world_size, timeout_s, device)
    except WeightSyncError:
        raise
    except Exception as e:  # torch's DistStoreError / DistNetworkError / TimeoutError: many lines, C++ frames
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise WeightSyncError(
            f"weight sync ({kind}) at {host}:{port}: rank {rank} of {world_size} gave up after {timeout_s:g} s "
            f"waiting for the others to join (rank 0: the policy's rank 0; 1..{world_size - 1}: the engine "
            f"workers): {first}") from e


def _transfer(transport: Transport, tensor: torch.Tensor, what: str) -> None:
    try:
        transport.broadcast(tensor, src=0)
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise WeightSyncError(f"weight sync ({transport.kind}): {what} failed on rank {transport.rank}: {first}") from e


# ---------------------------------------------------------------------------------------------- the two sides
class WeightSender:
    """Rank 0: sends the manifest at construction, then the weights bucket by bucket at each ``send``."""

    def __init__(self, transport: Transport, specs: list[Spec], bucket_bytes: int = BUCKET_BYTES) -> None:
        self.transport, self.specs, self.bucket_bytes = transport, specs, bucket_bytes
        self.buckets = plan_buckets(specs, bucket_bytes)
        self.syncs = 0
        raw = json.dumps({"bucket_bytes": bucket_bytes, "specs": specs}).encode()
        dev = transport.device
        _transfer(transport, torch.tensor([len(raw)], dtype=torch.int64, device=dev), "the manifest's size")
        _transfer(transport, torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(dev), "the manifest")

    def send(self, named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, float]:
        """Broadcast one sync of ``named`` (the manifest's weights, in its order; consumed to the end, as
        ZeRO-3's collective gather needs); returns its bytes and bucket count."""
        dev, it = self.transport.device, iter(named)
        self.syncs += 1
        header = torch.tensor([MAGIC, self.syncs, len(self.buckets)], dtype=torch.int64, device=dev)
        _transfer(self.transport, header, "the header")
        sent = 0
        for b, indices in enumerate(self.buckets):
            flat = torch.empty(sum(_numel(self.specs[i][2]) for i in indices), dtype=_dtype(self.specs[indices[0]][1]),
                               device=dev)
            offset = 0
            for i in indices:
                name, shape = self.specs[i][0], self.specs[i][2]
                got = next(it, None)
                if got is None or got[0] != name or tuple(got[1].shape) != shape:
                    seen = "nothing" if got is None else f"{got[0]} {tuple(got[1].shape)}"
                    raise WeightSyncError(f"weight sync: the policy yielded {seen} where the manifest has {name} "
                                          f"{shape}: the model changed after the group was set up")
                n = _numel(shape)
                flat[offset:offset + n].copy_(got[1].detach().reshape(-1))
                offset += n
            _transfer(self.transport, flat, f"bucket {b + 1} of {len(self.buckets)}")
            sent += flat.numel() * flat.element_size()
        extra = next(it, None)
        if extra is not None:
            raise WeightSyncError(f"weight sync: the policy yielded {extra[0]}, which is not in the manifest")
        self.transport.synchronize()
        return {"bytes": float(sent), "buckets": float(len(self.buckets))}


class WeightReceiver:
    """Ranks 1..N: receive the manifest at construction; ``receive()`` yields one sync's weights."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        dev = transport.device
        size = torch.zeros(1, dtype=torch.int64, device=dev)
        _transfer(transport, size, "the manifest's size")
        raw = torch.empty(int(size.item()), dtype=torch.uint8, device=dev)
        _transfer(transport, raw, "the manifest")
        manifest = json.loads(bytes(raw.cpu().numpy()).decode())
        self.specs: list[Spec] = [(n, k, tuple(s)) for n, k, s in manifest["specs"]]
        self.buckets = plan_buckets(self.specs, manifest["bucket_bytes"])
        self.syncs = 0
        self._open: Iterator[tuple[str, torch.Tensor]] | None = None

    def receive(self) -> Iterator[tuple[str, torch.Tensor]]:
        """``(name, tensor)`` of one sync, each a view of its bucket (kept alive by the view), as they arrive."""
        self._open = self._receive()
        return self._open

    def _receive(self) -> Iterator[tuple[str, torch.Tensor]]:
        dev = self.transport.device
        header = torch.zeros(3, dtype=torch.int64, device=dev)
        _transfer(self.transport, header, "the header")
        magic, number, count = header.tolist()
        self.syncs += 1
        if magic != MAGIC or number != self.syncs or count != len(self.buckets):
            raise WeightSyncError(f"weight sync out of step: header (magic {magic:#x}, sync {number}, {count} buckets), "
                                  f"expected sync {self.syncs} of {len(self.buckets)} buckets")
        for b, indices in enumerate(self.buckets):
            shapes = [self.specs[i][2] for i in indices]
            flat = torch.empty(sum(_numel(s) for s in shapes), dtype=_dtype(self.specs[indices[0]][1]), device=dev)
            _transfer(self.transport, flat, f"bucket {b + 1} of {len(self.buckets)}")
            offset = 0
            for i, shape in zip(indices, shapes):
                n = _numel(shape)
                yield self.specs[i][0], flat[offset:offset + n].view(shape)
                offset += n
        self.transport.synchronize()

    def drain(self) -> None:
        """Receive what the last ``receive()``'s consumer left (after a reload error), so the sender finishes."""
        if self._open is not None:
            for _ in self._open:
                pass
            self._open = None


def receive_into(receiver: WeightReceiver, load: Any) -> None:
    """One sync: ``load(iterator of (name, tensor))`` (an engine's reload) over the arriving buckets; the
    rest is drained if ``load`` stops early or raises, then its error propagates."""
    try:
        load(receiver.receive())
    finally:
        receiver.drain()
