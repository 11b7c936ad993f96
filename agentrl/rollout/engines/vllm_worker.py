"""Worker-side hooks of :class:`agentrl.rollout.engines.vllm.VLLMEngine` (vLLM ``worker_extension_cls``).

vLLM mixes this class into each of its workers, so its methods run where the weights live and are
called by name through ``LLM.collective_rpc`` (no pickled functions needed):

- ``agentrl_reload(weights)``: in-place reload from HF-named tensors (CPU and GPU; the object-store
  sync path). vLLM's layer-wise reloader does not reload the LM head of a model with tied
  embeddings (``lm_head.*`` is skipped by the loader and the old tensor put back; on CPU its packed
  GEMM too), so the tie is restored and the head re-packed afterwards; without that, the engine's
  logits drift from the trainer's after the first sync.
- ``agentrl_sync_connect`` / ``agentrl_sync_receive``: join the collective weight-sync group
  (``agentrl.rollout.engines.weight_protocol``: NCCL on GPU, gloo on CPU) as rank ``rank_offset + this
  worker's rank`` and receive one sync, bucket by bucket, straight into the in-place reload.
"""

from __future__ import annotations

from collections.abc import Iterable
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

    def agentrl_reload(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Reload in place from ``(name, tensor)`` pairs with HF state-dict names (any iterable: consumed once)."""
        if not hasattr(self, "reload_weights"):
            raise RuntimeError(f"this vLLM worker ({type(self).__name__}) has no reload_weights: agentrl needs "
                               "vllm>=0.32,<0.34 (agentrl.preflight.SUPPORTED)")
        self.reload_weights(weights_iterator=weights)
        retie_embeddings(self.model_runner.get_model())

    def agentrl_sync_connect(self, kind: str, host: str, port: int, rank_offset: int, world_size: int,
                             timeout_s: float) -> None:
        """Join the weight-sync group as rank ``rank_offset + <this worker's rank>`` and read the manifest."""
        from agentrl.rollout.engines.weight_protocol import WeightReceiver, connect

        device = self.device if kind == "nccl" else None
        transport = connect(kind, host, port, getattr(self, "rank", 0) + rank_offset, world_size, timeout_s=timeout_s,
                            device=device)
        self._agentrl_receiver = WeightReceiver(transport)

    def agentrl_sync_receive(self) -> None:
        """One sync: the buckets go into the reload as they arrive (what it leaves is still received)."""
        from agentrl.rollout.engines.weight_protocol import receive_into

        receive_into(self._agentrl_receiver, self.agentrl_reload)
