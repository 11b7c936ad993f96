"""Decoder activation checkpointing that keeps the KV cache working (``learner.gradient_checkpointing``).

A decoder layer's saved activations (attention projections, MLP intermediates, norms) dominate the
memory of a policy update once the logits are chunked: for SmolLM2-135M on 4,096 tokens ~7 GB. With
checkpointing each layer keeps only its input and recomputes the rest in the backward pass.

Hugging Face's own ``gradient_checkpointing_enable`` drops the KV cache during training
(``use_cache=False, past_key_values=None``), which would break the learner's shared-prompt path
(``agentrl.training.packing.shared_prefix_logprobs``: prompts run once, their cache feeds the
responses, and gradients flow back through the cached keys and values). Here every decoder layer's
``forward`` runs under ``torch.utils.checkpoint`` (non-reentrant) with a one-layer stand-in for the
cache: it holds the keys and values cached *before* the call, so the recomputation sees exactly what
the first run saw, and the layer's new keys and values are returned as checkpoint outputs and
appended to the real cache outside. Values and gradients are those of the plain forward (tested to
1e-5, with and without LoRA). Layers whose cache is not a plain ``DynamicLayer`` (sliding windows,
static caches) run unchanged.

The instance's ``forward`` is replaced (names and ``state_dict`` stay the same, so checkpoints, peft
and weight syncs are unaffected); nothing is checkpointed outside training or without gradients.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

_MARK = "_agentrl_checkpointed"


class _LayerCache:
    """The cache as one attention layer sees it: ``update`` concatenates onto the keys and values held
    before the call (tensors (B,KV,S,D) or None) and remembers this call's new ones."""

    def __init__(self, keys: torch.Tensor | None, values: torch.Tensor | None) -> None:
        self.keys, self.values = keys, values
        self.new: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        self.new = (key_states, value_states)
        if self.keys is None:
            return key_states, value_states
        return torch.cat([self.keys, key_states], -2), torch.cat([self.values, value_states], -2)


def _cached_state(cache: Any, idx: int) -> tuple[bool, torch.Tensor | None, torch.Tensor | None]:
    """(whether the layer can be checkpointed with this cache, its keys, its values before the call)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    if not isinstance(cache, DynamicCache):
        return False, None, None
    layers = getattr(cache, "layers", None)
    if layers is None or idx >= len(layers):
        return True, None, None
    layer = layers[idx]
    if type(layer) is not DynamicLayer:
        return False, None, None
    if not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0:
        return True, None, None
    return True, layer.keys, layer.values


def _forward(layer: torch.nn.Module, forward: Any, idx: int, hidden_states: torch.Tensor, *args: Any,
             past_key_values: Any = None, **kwargs: Any) -> Any:
    """``forward`` of one decoder layer, checkpointed while training with gradients."""
    if not (layer.training and torch.is_grad_enabled()):
        return forward(hidden_states, *args, past_key_values=past_key_values, **kwargs)
    if past_key_values is None:
        return checkpoint(functools.partial(forward, past_key_values=None, **kwargs), hidden_states, *args,
                          use_reentrant=False)
    ok, keys, values = _cached_state(past_key_values, idx)
    if not ok:
        return forward(hidden_states, *args, past_key_values=past_key_values, **kwargs)

    def run(h: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None) -> tuple[Any, Any, Any]:
        stand_in = _LayerCache(k, v)
        out = forward(h, *args, past_key_values=stand_in, **kwargs)
        if stand_in.new is None:
            raise RuntimeError(f"gradient_checkpointing: decoder layer {idx} did not update its KV cache")
        return out, *stand_in.new

    out, new_k, new_v = checkpoint(run, hidden_states, keys, values, use_reentrant=False)
    past_key_values.update(new_k, new_v, idx)
    return out


def decoder_layers(model: Any) -> torch.nn.ModuleList:
    """The decoder's layer list of a Hugging Face causal LM (plain or peft-wrapped)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"learner.gradient_checkpointing: {type(base).__name__} has no decoder layer list "
                         f"(model.get_decoder().layers)")
    return layers


def enable_activation_checkpointing(model: Any) -> int:
    """Checkpoint every decoder layer of ``model`` (idempotent). Returns the number of layers."""
    layers = decoder_layers(model)
    for i, layer in enumerate(layers):
        if getattr(layer, _MARK, False):
            continue
        idx = getattr(getattr(layer, "self_attn", None), "layer_idx", i)
        layer.forward = functools.partial(_forward, layer, layer.forward, idx)
        setattr(layer, _MARK, True)
    return len(layers)


def disable_activation_checkpointing(model: Any) -> None:
    """Undo ``enable_activation_checkpointing``."""
    for layer in decoder_layers(model):
        if getattr(layer, _MARK, False):
            del layer.forward
            setattr(layer, _MARK, False)
