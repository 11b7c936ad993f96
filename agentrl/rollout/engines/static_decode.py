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


SHARED_MIN_ROWS = 4
"""Rows per distinct prompt (on average) from which a prompt's keys are attended to once for all its rows
(``SharedPromptCaches``): at 16 prompts of ~140 tokens its step cost half the per-row product's with 8
rows a prompt, as much with 4, three times as much with 1 (its grids are sized for every row)."""


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

    The KV cache is preallocated and filled in place: per layer one (B, kv_heads, prompt_width +
    max_new_tokens, head_dim) tensor for keys and one for values (``RowCaches``), or, when rows share
    prompts (the ``n`` samples of a task), each distinct prompt's keys once beside each row's own new
    ones (``SharedPromptCaches``). When the ended rows' remaining decode steps add up to
    ``compact_factor`` times (1 + the live rows that must move), the batch is compacted: live rows
    from the back move into the ended rows' slots and every tensor keeps its first rows (a view), so
    finished rows stop costing compute and a compaction copies only the rows it moves.
    """

    def __init__(self, compact_factor: float = 2.0) -> None:
        self.weights = _Weights()
        self.compact_factor = compact_factor
        self.compactions = 0  # how many times the last decode compacted its batch
        self.shared_steps = 0  # steps of the last decode that attended to each shared prompt's keys once

    def decode(self, model: Any, past: Any, logits: torch.Tensor, mask: torch.Tensor, next_pos: torch.Tensor,
               params: SamplingParams, stops: list[int], pad_id: int,
               sample: Callable[..., tuple[torch.Tensor, torch.Tensor]],
               groups: torch.Tensor | None = None, draws: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """``past``: the prefill's cache, one row per sample, or with ``groups`` (B,) (each row's distinct
        prompt) one row per distinct prompt; ``logits`` (B,V) of each row's last prompt token, ``mask``
        (B,W) the prompts' attention mask, ``next_pos`` (B,1) the first new position; ``draws`` (B,S) each
        row's uniforms (``sample(logits, params, u)`` gets the live rows' (b,1) of the step; None: its own)."""
        base = _base(model)
        cfg = base.config
        B, W = mask.shape
        S = params.max_new_tokens
        dev = logits.device
        layers = self.weights.get(model)
        nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // nh
        eps = cfg.rms_norm_eps
        emb_w, (head_w, head_b) = self.weights.embed, self.weights.head
        kv: RowCaches | SharedPromptCaches = (RowCaches(past, len(layers), mask, S) if groups is None
                                               else SharedPromptCaches(past, len(layers), mask, groups, S, nh))
        pos = next_pos + torch.arange(S, device=dev)[None]                              # (B,S)
        cos, sin = base.model.rotary_emb(emb_w[:1][None], pos)                          # (B,S,hd)
        final_w = base.model.norm.weight
        stop_t = torch.tensor(stops, device=dev)
        toks = torch.full((B, S), pad_id, dtype=torch.long, device=dev)
        lps = torch.zeros((B, S), dtype=torch.float32, device=dev)
        rows = torch.arange(B, device=dev)
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        self.compactions = self.shared_steps = 0
        for step in range(S):
            tok, lp = sample(logits, params, None if draws is None else draws[rows, step, None])
            tok = torch.where(done, torch.full_like(tok, pad_id), tok)
            toks[rows, step], lps[rows, step] = tok, lp
            done |= torch.isin(tok, stop_t)
            n_done = int(done.sum())
            if n_done == done.shape[0] or step == S - 1:
                break
            alive = done.shape[0] - n_done
            if n_done and n_done * (S - step - 1) >= self.compact_factor * (1 + int(done[:alive].sum())):
                order = kv.compact(done, step)
                if isinstance(kv, SharedPromptCaches) and not kv.worth_it():
                    kv = kv.as_rows(step)
                rows, tok, done, cos, sin = (t[order] for t in (rows, tok, done, cos, sin))
                self.compactions += 1
            kv.at(step)
            self.shared_steps += isinstance(kv, SharedPromptCaches)
            c, s = cos[:, step, None], sin[:, step, None]                               # (b,1,hd)
            x = _layers_step(F.embedding(tok, emb_w), layers, kv, c, s, (nh, nkv, hd, eps))
            logits = F.linear(_rms(x, final_w, eps), head_w, head_b).float()
        n = step + 1
        return toks[:, :n].cpu(), lps[:, :n].cpu()


class RowCaches:
    """Each row's keys and values: per layer (B, kv_heads, W + S, head_dim), its prompt's prefill in front
    and the new tokens' after it; ``am`` (b,1,1,L) the keys each row may attend to (0 / -inf)."""

    def __init__(self, past: Any, n_layers: int, mask: torch.Tensor, S: int,
                 caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
        self.W = mask.shape[1]
        self.caches = caches if caches is not None else _preallocate(past, n_layers, self.W + S)
        dtype = self.caches[0][0].dtype
        self.mask = torch.zeros((mask.shape[0], self.W + S), dtype=dtype, device=mask.device)
        self.mask[:, :self.W].masked_fill_(~mask.bool(), float("-inf"))
        self.L = self.W

    def at(self, step: int) -> None:
        """The next token is new token ``step + 1`` (position ``W + step`` of the caches)."""
        self.L = self.W + step + 1
        self.am = self.mask[:, None, None, :self.L]

    def attend(self, i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Layer ``i``: store the token's k, v (b,kv_heads,hd); its query q (b,heads,hd) -> (b,heads,hd)."""
        K, V = self.caches[i]
        K[:, :, self.L - 1], V[:, :, self.L - 1] = k, v
        return _attend(q, K[:, :, :self.L], V[:, :, :self.L], self.am)

    def compact(self, done: torch.Tensor, step: int) -> torch.Tensor:
        """Live rows to the front (``_compact``); returns the new row order."""
        order = _compact(self.caches, done, self.W + step)
        self.caches = [(K[:len(order)], V[:len(order)]) for K, V in self.caches]
        self.mask = self.mask[order]
        return order


class SharedPromptCaches:
    """Rows that share a prompt (``groups`` (B,): each row's distinct prompt, U of them) keep its keys and
    values once: per layer the prefill's (U, kv_heads, W, head_dim) and each row's own new ones
    (B, kv_heads, S, head_dim). A step's query attends to both in one softmax; the prompt part is one
    (rows of the prompt x heads per KV head, head_dim) @ (head_dim, W) product per prompt and KV head,
    so a prompt's keys are read once a step instead of once per sample (a matrix-vector product per row
    and head, bound by memory, was ~40% of a decode step of 16 prompts x 8 samples)."""

    def __init__(self, past: Any, n_layers: int, mask: torch.Tensor, groups: torch.Tensor, S: int,
                 heads: int) -> None:
        self.prompts = [_layer_kv(past, i) for i in range(n_layers)]
        U, nkv, W, hd = self.prompts[0][0].shape
        B, dev = groups.shape[0], groups.device
        seen = [0] * U
        rank = []
        for g in groups.tolist():  # each row's place among its prompt's rows
            rank.append(seen[g])
            seen[g] += 1
        R, G, dtype = max(seen), heads // nkv, self.prompts[0][0].dtype
        self.slot = groups * R + torch.tensor(rank, device=dev)                        # (B,) in a (U*R) grid
        first = torch.zeros(U, dtype=torch.long, device=dev).scatter_(0, groups, torch.arange(B, device=dev))
        self.prompt_mask = torch.zeros((U, 1, 1, W), dtype=dtype, device=dev)
        self.prompt_mask.masked_fill_(~mask[first].bool()[:, None, None, :], float("-inf"))
        self.own = [(torch.empty((B, nkv, S, hd), dtype=dtype, device=dev),
                     torch.empty((B, nkv, S, hd), dtype=dtype, device=dev)) for _ in range(n_layers)]
        self.q = torch.zeros((U, R, nkv, G, hd), dtype=dtype, device=dev)  # queries by (prompt, rank)
        self.p = torch.zeros((U, R, nkv, G, W), dtype=dtype, device=dev)   # their weights on the prompt
        self.n = 0

    def at(self, step: int) -> None:
        """The next token is new token ``step + 1``: ``n`` own keys after it is stored."""
        self.n = step + 1

    def attend(self, i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Layer ``i``: store the token's k, v (b,kv_heads,hd); its query q (b,heads,hd) -> (b,heads,hd)."""
        (Kp, Vp), (K, V) = self.prompts[i], self.own[i]
        K[:, :, self.n - 1], V[:, :, self.n - 1] = k, v
        b, nh, hd = q.shape
        U, R, nkv, G, W = self.p.shape
        qg = q.view(b, nkv, G, hd)
        scale = hd ** -0.5
        # rows -> (prompt, rank) grids: index_copy_ / index_select of whole rows (advanced indexing over two
        # dims was 3x slower); the grids' (U, nkv, R*G, .) copies are what the batched products take
        self.q.view(U * R, nkv, G, hd).index_copy_(0, self.slot, qg)
        queries = self.q.permute(0, 2, 1, 3, 4).reshape(U, nkv, R * G, hd)
        on_prompt = torch.matmul(queries, Kp.transpose(-1, -2)).mul_(scale).add_(self.prompt_mask)
        on_prompt = _rows(on_prompt, self.slot, R, G)                                          # (b,nkv,G,W)
        on_own = torch.matmul(qg, K[:, :, :self.n].transpose(-1, -2)).mul_(scale)              # (b,nkv,G,n)
        p = torch.cat([on_prompt, on_own], -1).softmax(-1)
        self.p.view(U * R, nkv, G, W).index_copy_(0, self.slot, p[..., :W])
        out = _rows(torch.matmul(self.p.permute(0, 2, 1, 3, 4).reshape(U, nkv, R * G, W), Vp), self.slot, R, G)
        return out.add_(torch.matmul(p[..., W:], V[:, :, :self.n])).view(b, nh, hd)

    def compact(self, done: torch.Tensor, step: int) -> torch.Tensor:
        """Live rows to the front (``_compact`` of the rows' own keys); returns the new row order."""
        order = _compact(self.own, done, step)
        self.own = [(K[:len(order)], V[:len(order)]) for K, V in self.own]
        self.slot = self.slot[order]
        return order

    def worth_it(self) -> bool:
        """Whether the live rows are still at least ``SHARED_MIN_ROWS`` per prompt on average (the grids cost
        the same however few rows are left)."""
        return len(self.slot) >= SHARED_MIN_ROWS * self.p.shape[0]

    def as_rows(self, step: int) -> RowCaches:
        """The live rows' caches as ``RowCaches`` (each row its prompt's keys, then its own), before the
        token of ``step``."""
        prompt = self.slot // self.p.shape[1]
        W, S = self.p.shape[-1], self.own[0][0].shape[2]
        caches = []
        for (Kp, Vp), (K, V) in zip(self.prompts, self.own):
            full = []
            for part, own in ((Kp, K), (Vp, V)):
                t = own.new_empty((own.shape[0], own.shape[1], W + S, own.shape[3]))
                t[:, :, :W], t[:, :, W:W + step] = part[prompt], own[:, :, :step]
                full.append(t)
            caches.append((full[0], full[1]))
        mask = self.prompt_mask[prompt, 0, 0] == 0                                           # (b,W)
        return RowCaches(None, len(caches), mask, S, caches=caches)


def _rows(grid: torch.Tensor, slot: torch.Tensor, R: int, G: int) -> torch.Tensor:
    """(U, kv_heads, R*G, X) per (prompt, KV head) -> the rows' (b, kv_heads, G, X), row i at ``slot[i]``
    (prompt * R + rank)."""
    U, nkv, _, X = grid.shape
    return grid.view(U, nkv, R, G, X).transpose(1, 2).reshape(U * R, nkv, G, X).index_select(0, slot)


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


def _layers_step(x: torch.Tensor, layers: list[tuple], kv: RowCaches | SharedPromptCaches, c: torch.Tensor,
                 s: torch.Tensor, dims: tuple[int, int, int, float]) -> torch.Tensor:
    """One token through every decoder layer: x (b,hidden) -> (b,hidden); ``kv`` stores its keys/values
    and attends. ``c``, ``s`` (b,1,hd) its rotary angles, ``dims`` = (heads, kv heads, head_dim, rms eps)."""
    nh, nkv, hd, eps = dims
    b = x.shape[0]
    split = (nh * hd, nkv * hd, nkv * hd)
    for i, (ln1, qkv_w, qkv_b, o_w, o_b, ln2, gu_w, gu_b, d_w, d_b) in enumerate(layers):
        q, k, v = F.linear(_rms(x, ln1, eps), qkv_w, qkv_b).split(split, dim=-1)
        a = kv.attend(i, _rotate(q.view(b, nh, hd), c, s), _rotate(k.view(b, nkv, hd), c, s), v.view(b, nkv, hd))
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
