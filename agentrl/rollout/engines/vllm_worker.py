"""Worker-side hooks of :class:`agentrl.rollout.engines.vllm.VLLMEngine` (vLLM ``worker_extension_cls``).

vLLM mixes this class into each of its workers, so its methods run where the weights live and are
called by name through ``LLM.collective_rpc`` (no pickled functions needed):

- ``agentrl_reload(weights)``: in-place reload from HF-named tensors (CPU and GPU; the object-store
  sync path). vLLM's layer-wise reloader does not reload the LM head of a model with tied
  embeddings (``lm_head.*`` is skipped by the loader and the old tensor put back; on CPU its packed
  GEMM too), so the tie is restored and the head re-packed afterwards; without that, the engine's
  logits drift from the trainer's after the first sync.
- ``agentrl_init_nccl`` / ``agentrl_receive_nccl``: GPU only. Join a stateless NCCL group with the
  policy's rank 0 (rank 0 in that group; engine workers follow) and receive a broadcast parameter by
  parameter, then reload once.
"""

from __future__ import annotations

from typing import Any

import torch


def retie_embeddings(model: Any) -> None:
    """Point the LM head back at the input embeddings when the config ties them."""
    config = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    if not getattr(config, "tie_word_embeddings", False) or inner is None:
        return
    head, embed = getattr(model, "lm_head", None), getattr(inner, "embed_tokens", None)
    if head is None or embed is None:
        return
    head.weight = embed.weight
    method = getattr(head, "quant_method", None)
    if method is not None:  # on CPU this re-packs the GEMM the head's logits go through
        method.process_weights_after_loading(head)


class WeightSyncExtension:
    """Mixed into vLLM's worker class: ``self`` is the worker (``self.model_runner``, ``self.device``)."""

    def agentrl_reload(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """Reload in place from ``(name, tensor)`` pairs with HF state-dict names."""
        self.reload_weights(weights_iterator=weights)
        retie_embeddings(self.model_runner.get_model())

    def agentrl_init_nccl(self, host: str, port: int, rank_offset: int, world_size: int) -> None:
        """Join the weight-sync NCCL group as rank ``rank_offset + <this worker's rank>``."""
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.parallel_state import get_world_group
        from vllm.distributed.utils import StatelessProcessGroup

        rank = get_world_group().rank + rank_offset
        group = StatelessProcessGroup.create(host=host, port=port, rank=rank, world_size=world_size)
        self._agentrl_nccl = PyNcclCommunicator(group, device=self.device)

    def agentrl_receive_nccl(self, specs: list[tuple[str, str, tuple[int, ...]]]) -> None:
        """Receive one broadcast per ``(name, dtype, shape)`` from group rank 0, then reload."""
        received = []
        for name, dtype, shape in specs:
            t = torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
            self._agentrl_nccl.broadcast(t, src=0, stream=torch.cuda.current_stream())
            received.append((name, t))
        torch.cuda.current_stream().synchronize()
        self.agentrl_reload(received)
