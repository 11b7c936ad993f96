"""A decode loop for Llama-family models over a preallocated KV cache, without transformers' per-step
machinery (cache objects, mask builders, module hooks): one token per row per step, a handful of
torch ops per layer, and finished rows dropped from the batch as they end.

Used by ``HFEngine``'s ``loop`` sampler after transformers' own prefill; the same arithmetic as the
transformers Llama / Qwen2 forward (RMSNorm, rotary embedding, attention with grouped KV heads, SiLU
MLP), so greedy tokens match it. A peft LoRA model decodes here too: each adapted layer's weight is
its base weight plus its active adapters' ``B @ A * alpha / r`` (rebuilt only after an update), so
the adapters cost nothing per token. Models it does not recognise (``supports`` is False) keep the
transformers decode step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from agentrl.models import adapted_weight, is_peft
from agentrl.rollout.engines.base import SamplingParams

SUPPORTED = ("LlamaForCausalLM", "Qwen2ForCausalLM")


def _base(model: Any) -> Any:
    """The model under a peft wrapper (``model`` itself when it has none)."""
    return model.get_base_model() if is_peft(model) else model


def supports(model: Any) -> bool:
    """True when ``model`` (or the base of a peft LoRA model) is a Llama / Qwen2 causal LM this loop
    reproduces exactly."""
    if any(any(getattr(m, "use_dora", {}).values()) for m in model.modules() if hasattr(m, "lora_A")):
        return False  # DoRA rescales the merged weight: not the plain delta used here
    model = _base(model)
    cfg = getattr(model, "config", None)
    if type(model).__name__ not in SUPPORTED or cfg is None:
        return False
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "use_sliding_window", False):
        return False
    layers = model.model.layers
    return all(not hasattr(layer.self_attn, "q_norm") for layer in layers)


class _Weights:
    """The model's weights as the decode step uses them (q/k/v and gate/up fused), rebuilt only when a
    parameter changed in place since the last call (the learner's optimizer bumps ``_version``)."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.layers: list[tuple[torch.Tensor, ...]] = []
        self.embed: torch.Tensor | None = None
        self.head: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def get(self, model: Any) -> list[tuple[torch.Tensor, ...]]:
        params = list(model.parameters())
        adapters = tuple((m.merged, m.disable_adapters, tuple(m.active_adapters))
                         for m in model.modules() if hasattr(m, "get_delta_weight"))
        key = tuple(id(p) for p in params) + tuple(p._version for p in params) + adapters
        if key != self.key:
            base = _base(model)
            self.layers = [_fuse(layer) for layer in base.model.layers]
            self.embed = adapted_weight(base.model.embed_tokens)
            self.head = adapted_weight(base.lm_head), _bias(base.lm_head)
            self.key = key
        return self.layers


def _bias(m: Any) -> torch.Tensor | None:
    return getattr(m.base_layer if hasattr(m, "get_delta_weight") else m, "bias", None)


def _fuse(layer: Any) -> tuple[torch.Tensor | None, ...]:
    att, mlp = layer.self_attn, layer.mlp
    q, k, v, gate, up = att.q_proj, att.k_proj, att.v_proj, mlp.gate_proj, mlp.up_proj
    qkv = torch.cat([adapted_weight(q), adapted_weight(k), adapted_weight(v)])
    qkv_b = torch.cat([_bias(q), _bias(k), _bias(v)]) if _bias(q) is not None else None
    gu = torch.cat([adapted_weight(gate), adapted_weight(up)])
    gu_b = torch.cat([_bias(gate), _bias(up)]) if _bias(gate) is not None else None
    return (layer.input_layernorm.weight, qkv, qkv_b, adapted_weight(att.o_proj), _bias(att.o_proj),
            layer.post_attention_layernorm.weight, gu, gu_b, adapted_weight(mlp.down_proj), _bias(mlp.down_proj))


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * x.to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class StaticDecoder:
    """Decodes after a transformers prefill: ``decode(past, logits, mask, next_pos, ...) -> (B,S) ids, logprobs``.

    The KV cache is one preallocated (B, kv_heads, prompt_width + max_new_tokens, head_dim) tensor per
    layer for keys and values, filled in place. When the ended rows' remaining decode steps add up to
    ``compact_factor`` times (1 + the live rows that must move), the batch is compacted: live rows
    from the back move into the ended rows' slots and every tensor keeps its first rows (a view), so
    finished rows stop costing compute and a compaction copies only the rows it moves.
    """

    def __init__(self, compact_factor: float = 2.0) -> None:
        self.weights = _Weights()
        self.compact_factor = compact_factor
        self.compactions = 0  # how many times the last decode compacted its batch

    def decode(self, model: Any, past: Any, logits: torch.Tensor, mask: torch.Tensor, next_pos: torch.Tensor,
               params: SamplingParams, stops: list[int], pad_id: int,
               sample: Callable[[torch.Tensor, SamplingParams], tuple[torch.Tensor, torch.Tensor]]
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """``past``: the prefill's cache (one row per sample), ``logits`` (B,V) of each row's last prompt
        token, ``mask`` (B,W) the prompts' attention mask, ``next_pos`` (B,1) the first new position."""
        base = _base(model)
        cfg = base.config
        B, W = mask.shape
        S = params.max_new_tokens
        dev = logits.device
        layers = self.weights.get(model)
        nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // nh
        eps = cfg.rms_norm_eps
        caches = _preallocate(past, len(layers), W + S)
        emb_w, (head_w, head_b) = self.weights.embed, self.weights.head
        # an additive mask (0 / -inf) over every position the rows may attend to
        attend = torch.zeros((B, W + S), dtype=emb_w.dtype, device=dev)
        attend[:, :W].masked_fill_(~mask.bool(), float("-inf"))
        pos = next_pos + torch.arange(S, device=dev)[None]                              # (B,S)
        cos, sin = base.model.rotary_emb(emb_w[:1][None], pos)                          # (B,S,hd)
        final_w = base.model.norm.weight
        stop_t = torch.tensor(stops, device=dev)
        toks = torch.full((B, S), pad_id, dtype=torch.long, device=dev)
        lps = torch.zeros((B, S), dtype=torch.float32, device=dev)
        rows = torch.arange(B, device=dev)
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        self.compactions = 0
        for step in range(S):
            tok, lp = sample(logits, params)
            tok = torch.where(done, torch.full_like(tok, pad_id), tok)
            toks[rows, step], lps[rows, step] = tok, lp
            done |= torch.isin(tok, stop_t)
            n_done = int(done.sum())
            if n_done == done.shape[0] or step == S - 1:
                break
            alive = done.shape[0] - n_done
            if n_done and n_done * (S - step - 1) >= self.compact_factor * (1 + int(done[:alive].sum())):
                order = _compact(caches, done, W + step)
                rows, tok, done, attend, cos, sin = (t[order] for t in (rows, tok, done, attend, cos, sin))
                caches = [(K[:alive], V[:alive]) for K, V in caches]
                self.compactions += 1
            L = W + step + 1                                                            # keys after this token
            c, s = cos[:, step, None], sin[:, step, None]                               # (b,1,hd)
            am = attend[:, None, None, :L]
            x = _layers_step(F.embedding(tok, emb_w), layers, caches, L, c, s, am, (nh, nkv, hd, eps))
            logits = F.linear(_rms(x, final_w, eps), head_w, head_b).float()
        n = step + 1
        return toks[:, :n].cpu(), lps[:, :n].cpu()


def _compact(caches: list[tuple[torch.Tensor, torch.Tensor]], done: torch.Tensor, filled: int) -> torch.Tensor:
    """Move the live rows that sit behind the first ``alive`` rows into the ended rows' slots in front
    (first ``filled`` positions of every cache, in place), so the live rows' caches are the tensors'
    first ``alive`` rows: a view, and only the moved rows are copied. Returns the new row order (alive,)
    as indices of the old rows."""
    alive = int((~done).sum())
    holes = done[:alive].nonzero().squeeze(1)
    movers = (~done[alive:]).nonzero().squeeze(1) + alive
    for K, V in caches:
        K[holes, :, :filled] = K[movers, :, :filled]
        V[holes, :, :filled] = V[movers, :, :filled]
    order = torch.arange(alive, device=done.device)
    order[holes] = movers
    return order


def _preallocate(past: Any, n_layers: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, keys and values (B, kv_heads, length, head_dim) holding the prefill's cache in front."""
    caches = []
    for i in range(n_layers):
        k, v = _layer_kv(past, i)
        B, nkv, W, hd = k.shape
        K, V = k.new_empty((B, nkv, length, hd)), v.new_empty((B, nkv, length, hd))
        K[:, :, :W], V[:, :, :W] = k, v
        caches.append((K, V))
    return caches


def _layers_step(x: torch.Tensor, layers: list[tuple], caches: list[tuple[torch.Tensor, torch.Tensor]], L: int,
                 c: torch.Tensor, s: torch.Tensor, am: torch.Tensor, dims: tuple[int, int, int, float]
                 ) -> torch.Tensor:
    """One token through every decoder layer: x (b,hidden) -> (b,hidden); its keys/values are written at
    position ``L - 1`` of ``caches``. ``c``, ``s`` (b,1,hd) its rotary angles, ``am`` (b,1,1,L) the keys it
    attends to, ``dims`` = (heads, kv heads, head_dim, rms eps)."""
    nh, nkv, hd, eps = dims
    b = x.shape[0]
    split = (nh * hd, nkv * hd, nkv * hd)
    for (ln1, qkv_w, qkv_b, o_w, o_b, ln2, gu_w, gu_b, d_w, d_b), (K, V) in zip(layers, caches):
        q, k, v = F.linear(_rms(x, ln1, eps), qkv_w, qkv_b).split(split, dim=-1)
        q = _rotate(q.view(b, nh, hd), c, s)
        K[:, :, L - 1] = _rotate(k.view(b, nkv, hd), c, s)
        V[:, :, L - 1] = v.view(b, nkv, hd)
        a = _attend(q, K[:, :, :L], V[:, :, :L], am)
        x = x + F.linear(a.reshape(b, nh * hd), o_w, o_b)
        g, u = F.linear(_rms(x, ln2, eps), gu_w, gu_b).chunk(2, dim=-1)
        x = x + F.linear(F.silu(g) * u, d_w, d_b)
    return x


def _attend(q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, am: torch.Tensor) -> torch.Tensor:
    """One query per row: q (b,heads,hd) over keys K, values V (b,kv_heads,L,hd) with the additive
    mask am (b,1,1,L) -> (b,heads,hd). Two batched matmuls: query heads sharing a KV head are the
    rows of one (group, hd) @ (hd, L) product. In the decode loop, with every layer's cache live, this
    ran ~5% faster than ATen's SDPA flash kernel, which is tuned for many queries (measured in issue 19: git history of ``bench/README.md``)."""
    b, nh, hd = q.shape
    nkv = K.shape[1]
    scores = torch.matmul(q.view(b, nkv, nh // nkv, hd), K.transpose(-1, -2)).mul_(hd ** -0.5).add_(am)
    return torch.matmul(scores.softmax(-1), V).view(b, nh, hd)


def _layer_kv(past: Any, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values (B, kv_heads, W, head_dim) of layer ``i`` from a transformers cache."""
    if hasattr(past, "layers"):
        return past.layers[i].keys, past.layers[i].values
    return past[i][0], past[i][1]
