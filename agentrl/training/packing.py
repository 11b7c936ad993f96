"""Less padding and less repeated work in the learner's forward/backward (torch and stdlib only).

Two exact rearrangements of the same computation:

- **Shared prompts.** The ``n`` samples of a GRPO group repeat one prompt. ``shared_prefix_logprobs``
  runs each distinct prompt once (with gradients), repeats its KV cache to the group's rows and runs
  only the responses on top, so the prompt costs one forward/backward instead of ``n``; autograd
  sums the rows' gradients into the shared prompt, giving the same gradients as the padded path.
  Distinct prompts that begin alike (every task's system prompt, ``SHARED_PREFIX_MIN`` tokens or
  more) run that beginning once too, and so do SFT batches (``agentrl.training.supervised``).
- **Token-balanced micro-batches.** ``token_balanced_micro_batches`` splits a mini-batch into
  micro-batches of about equal token counts with the Karmarkar–Karp largest-differencing method,
  keeping each group whole (so its prompt is still shared). The loss is normalised by the
  mini-batch's counts, so any partition gives the same gradient.

The model is any Hugging Face causal LM whose cache supports ``reorder_cache`` (``DynamicCache``).

Log-probs never need the full ``(B,T,V)`` logits: ``decode`` runs the decoder to its last hidden
states and ``states_logprobs`` sends them through the LM head ``chunk_tokens`` positions at a time,
each chunk checkpointed (its logits are recomputed in the backward pass instead of kept), so peak
memory holds one chunk's logits instead of the batch's. When the call's logits are small anyway (one
chunk, or under ``SMALL_LOGITS_BYTES``) the head runs once without checkpointing: at a small vocabulary
the recompute and the per-chunk dispatch cost more than the memory they save. Values and gradients are
those of the full logits either way (tested to 1e-5). Models whose head is not a plain projection of the decoder's output (logit
soft-capping or scaling) fall back to the full logits.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from agentrl.algorithms import entropy_from_logits

CHUNK_TOKENS = 1024
"""Positions per LM-head chunk in ``states_logprobs`` (0 = the full logits at once)."""

SMALL_LOGITS_BYTES = 32 * 2**20
"""``states_logprobs`` skips chunking and checkpointing when a call's float32 logits (rows x vocab x 4
bytes) fit in this many bytes (the demo's 3k rows x 320 tokens are 4 MB; one SmolLM2 chunk is 200 MB)."""


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0,
                   with_entropy: bool = False, entropy_grad: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of ``targets`` (...,) under ``logits`` (...,V) / temperature, and optionally the entropy."""
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    entropy = None
    if with_entropy or entropy_grad:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = entropy_from_logits(logits)
    return logprobs, entropy


def lm_head(model: Any, chunk_tokens: int = CHUNK_TOKENS) -> Any | None:
    """The output projection when log-probs can be computed in chunks of the decoder's hidden states;
    None means "use the full logits": chunking off, a head with soft-capping or scaling, or a wrapper
    (DDP, DeepSpeed) whose own forward must run."""
    if chunk_tokens <= 0 or not any(c.__name__ in ("PreTrainedModel", "PeftModel") for c in type(model).__mro__):
        return None
    config = getattr(model, "config", None)
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None) not in (None, 1.0):
        return None
    head = model.get_output_embeddings()
    return head if isinstance(head, torch.nn.Module) else None


def decode(model: Any, head: Any | None, **inputs: Any) -> tuple[Any, torch.Tensor]:
    """Run the model: (its output, the states ``states_logprobs`` scores), where the states are the
    last hidden states (B,T,H) when ``head`` is given and the logits (B,T,V) otherwise."""
    if head is None:
        out = model(**inputs)
        return out, out.logits
    out = model.get_decoder()(**inputs)
    return out, out.last_hidden_state


def states_logprobs(states: torch.Tensor, targets: torch.Tensor, head: Any | None, *, temperature: float = 1.0,
                    with_entropy: bool = False, entropy_grad: bool = False, chunk_tokens: int = CHUNK_TOKENS
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``token_logprobs`` of ``states`` (...,H) through ``head`` in chunks of ``chunk_tokens`` positions
    (or of logits (...,V) when ``head`` is None): targets (...,) -> logprobs (...,), entropy (...,)."""
    kw = dict(temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)
    if head is None:
        return token_logprobs(states, targets, **kw)
    shape = targets.shape
    flat, tgt = states.reshape(-1, states.shape[-1]), targets.reshape(-1)
    step = max(1, chunk_tokens)
    if flat.shape[0] <= step or flat.shape[0] * _vocab_size(head) * 4 <= SMALL_LOGITS_BYTES:
        return token_logprobs(head(states), targets, **kw)  # small logits: one call, nothing recomputed

    def chunk(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lp, ent = token_logprobs(head(h), t, **kw)
        return lp, (ent if ent is not None else lp.new_zeros(()))

    lps, ents = [], []
    for start in range(0, flat.shape[0], step):
        h, t = flat[start:start + step], tgt[start:start + step]
        if torch.is_grad_enabled():
            lp, ent = checkpoint(chunk, h, t, use_reentrant=False)
        else:
            lp, ent = chunk(h, t)
        lps.append(lp)
        ents.append(ent)
    logprobs = torch.cat(lps).reshape(shape) if lps else flat.new_zeros(shape)
    entropy = torch.cat(ents).reshape(shape) if (with_entropy or entropy_grad) and lps else None
    return logprobs, entropy


def _vocab_size(head: Any) -> float:
    """Output size of the LM head (infinite when it cannot be read: always chunk)."""
    weight = getattr(head, "weight", None)
    return weight.shape[0] if isinstance(weight, torch.Tensor) and weight.dim() == 2 else math.inf


def prompt_lengths(action_mask: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Tokens before each row's first generated token (B,): action position ``t`` predicts token ``t+1``.

    Rows without a generated token count as all prompt but their last token."""
    lens = attention_mask.sum(-1)
    has = action_mask.bool().any(-1)
    first = action_mask.bool().float().argmax(-1) + 1
    return torch.where(has, first, lens - 1).clamp(min=1)


def shared_prefix_logprobs(model: Any, sequences: torch.Tensor, attention_mask: torch.Tensor,
                           prompt_lens: torch.Tensor, *, temperature: float = 1.0, with_entropy: bool = False,
                           entropy_grad: bool = False, chunk_tokens: int = CHUNK_TOKENS
                           ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """``sequence_logprobs`` with each distinct prompt run once: (B,T) right-padded -> (B,A), (B,A).

    Returns None when no two rows share a prompt (the caller runs the plain forward). Positions past a
    row's end hold 0.
    """
    lens = attention_mask.sum(-1)
    P = torch.minimum(prompt_lens.to(lens.device), lens - 1)
    if bool((P < 1).any()):
        return None
    first, inverse = _distinct_prompts(sequences, P)
    if first is None:
        return None
    T = sequences.shape[1]
    Pmax, S = int(P.max()), int((lens - P).max())
    ar_p = torch.arange(Pmax, device=sequences.device)
    p_mask = (ar_p[None] < P[first][:, None]).long()                                   # (U,Pmax) right-padded
    p_ids = sequences[first, :Pmax] * p_mask
    head = lm_head(model, chunk_tokens)
    past, p_states = _run_prompts(model, head, p_ids, p_mask)                         # (U,Pmax,H|V)
    past.reorder_cache(inverse)                                                       # one cache row per sample
    ar_s = torch.arange(S, device=sequences.device)
    s_mask = (ar_s[None] < (lens - P)[:, None]).long()                              # (B,S) right-padded
    s_pos = P[:, None] + ar_s[None]
    s_ids = sequences.gather(1, s_pos.clamp(max=T - 1)) * s_mask
    _, s_states = decode(model, head, input_ids=s_ids, attention_mask=torch.cat([p_mask[inverse], s_mask], 1),
                         position_ids=s_pos, past_key_values=past, use_cache=True)   # (B,S,H|V)
    kw = dict(temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad,
              chunk_tokens=chunk_tokens)
    lp_p, ent_p = states_logprobs(p_states[:, :-1], p_ids[:, 1:], head, **kw)        # (U,Pmax-1) inside prompts
    last = p_states[inverse, P - 1]                                                   # (B,H|V) predicts response[0]
    lp_l, ent_l = states_logprobs(last, s_ids[:, 0], head, **kw)
    lp_s, ent_s = states_logprobs(s_states[:, :-1], s_ids[:, 1:], head, **kw)        # (B,S-1) inside responses
    # row layout [prompt positions (Pmax-1) | last prompt position | response positions (S-1)]
    t = torch.arange(T - 1, device=sequences.device)[None]
    idx = torch.where(t < P[:, None] - 1, t, Pmax - 1 + t - (P[:, None] - 1)).clamp(max=Pmax + S - 2)
    valid = t < (lens - 1)[:, None]

    def place(inside: torch.Tensor, at_last: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return torch.cat([inside[inverse], at_last[:, None], after], 1).gather(1, idx) * valid

    logprobs = place(lp_p, lp_l, lp_s)
    entropy = place(ent_p, ent_l, ent_s) if ent_p is not None else None
    return logprobs, entropy


SHARED_PREFIX_MIN = 16
"""Rows (or distinct prompts) that all begin with at least this many identical tokens (a chat template's system
prompt, a tool list) run them once; below it the extra decoder call costs more than it saves."""


def common_prefix(sequences: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Leading tokens that every row of right-padded ``sequences`` (R,T) shares, at most the shortest row's
    length - 1 (a row keeps one token of its own); 0 for a single row."""
    if sequences.shape[0] < 2:
        return 0
    same = (sequences == sequences[:1]).all(0).long()       # (T,)
    return max(0, min(int(same.cumprod(0).sum()), int(attention_mask.sum(-1).min()) - 1))


def _run_prompts(model: Any, head: Any | None, p_ids: torch.Tensor, p_mask: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """The distinct prompts (U,Pmax) right-padded through the decoder: (their cache, their states (U,Pmax,H|V)).
    When they begin alike (``SHARED_PREFIX_MIN`` tokens or more: the system prompt of every task) that prefix
    runs once, its cache and states under every prompt (autograd sums the prompts' gradients into it)."""
    c = common_prefix(p_ids, p_mask)
    if c < SHARED_PREFIX_MIN:
        out, states = decode(model, head, input_ids=p_ids, attention_mask=p_mask, use_cache=True)
        return out.past_key_values, states
    U = p_ids.shape[0]
    out, head_states = decode(model, head, input_ids=p_ids[:1, :c], attention_mask=p_mask[:1, :c], use_cache=True)
    past = out.past_key_values
    past.reorder_cache(torch.zeros(U, dtype=torch.long, device=p_ids.device))        # the prefix under every prompt
    pos = c + torch.arange(p_ids.shape[1] - c, device=p_ids.device)[None].expand(U, -1)
    _, rest = decode(model, head, input_ids=p_ids[:, c:], attention_mask=p_mask, position_ids=pos,
                     past_key_values=past, use_cache=True)
    return past, torch.cat([head_states.expand(U, -1, -1), rest], 1)


def _distinct_prompts(sequences: torch.Tensor, P: torch.Tensor) -> tuple[list[int] | None, torch.Tensor | None]:
    """Rows grouped by identical prompt (length and tokens): (first row of each prompt, row -> prompt),
    or (None, None) when no prompt repeats."""
    index: dict[tuple[int, ...], int] = {}
    first: list[int] = []
    inverse = []
    for b, (row, p) in enumerate(zip(sequences.tolist(), P.tolist())):
        key = tuple(row[:p])
        if key not in index:
            index[key] = len(first)
            first.append(b)
        inverse.append(index[key])
    if len(first) == len(inverse):
        return None, None
    return first, torch.tensor(inverse, device=sequences.device)


def karmarkar_karp(weights: Sequence[float], k: int) -> list[list[int]]:
    """Partition item indices into ``k`` subsets of about equal total weight (largest differencing).

    Each step merges the two partial partitions whose spread (max - min subset sum) is largest,
    pairing the heaviest subset of one with the lightest of the other. Subsets may be empty when
    there are fewer items than ``k``; each subset's indices are sorted.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    heap: list[tuple[float, int, list[tuple[float, list[int]]]]] = []
    for i, w in enumerate(weights):
        parts = [(float(w), [i])] + [(0.0, []) for _ in range(k - 1)]
        heapq.heappush(heap, (-float(w), i, parts))
    if not heap:
        return [[] for _ in range(k)]
    tie = len(weights)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        a = sorted(a, key=lambda s: s[0], reverse=True)
        b = sorted(b, key=lambda s: s[0])
        merged = sorted(((sa + sb, ia + ib) for (sa, ia), (sb, ib) in zip(a, b)), key=lambda s: s[0], reverse=True)
        heapq.heappush(heap, (-(merged[0][0] - merged[-1][0]), tie, merged))
        tie += 1
    return [sorted(ix) for _, ix in heap[0][2]]


def token_balanced_micro_batches(lengths: Sequence[int], group_ids: Sequence[int], max_tokens: int
                                 ) -> list[list[int]]:
    """Row indices of micro-batches with about ``max_tokens`` real tokens each, groups kept whole.

    The number of micro-batches is ``ceil(total tokens / max_tokens)`` (at most one per group);
    Karmarkar–Karp balances their token counts. Empty micro-batches are dropped.
    """
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids):
        groups.setdefault(int(g), []).append(i)
    members = list(groups.values())
    weights = [sum(lengths[i] for i in m) for m in members]
    k = max(1, min(len(members), math.ceil(sum(weights) / max(max_tokens, 1))))
    parts = karmarkar_karp(weights, k)
    return [sorted(i for g in part for i in members[g]) for part in parts if part]
