"""Less padding and less repeated work in the learner's forward/backward (torch and stdlib only).

Two exact rearrangements of the same computation:

- **Shared prompts.** The ``n`` samples of a GRPO group repeat one prompt. ``shared_prefix_logprobs``
  runs each distinct prompt once (with gradients), repeats its KV cache to the group's rows and runs
  only the responses on top, so the prompt costs one forward/backward instead of ``n``; autograd
  sums the rows' gradients into the shared prompt, giving the same gradients as the padded path.
- **Token-balanced micro-batches.** ``token_balanced_micro_batches`` splits a mini-batch into
  micro-batches of about equal token counts with the Karmarkar–Karp largest-differencing method,
  keeping each group whole (so its prompt is still shared). The loss is normalised by the
  mini-batch's counts, so any partition gives the same gradient.

The model is any Hugging Face causal LM whose cache supports ``reorder_cache`` (``DynamicCache``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

import torch

from agentrl.algorithms import entropy_from_logits


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


def prompt_lengths(action_mask: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Tokens before each row's first generated token (B,): action position ``t`` predicts token ``t+1``.

    Rows without a generated token count as all prompt but their last token."""
    lens = attention_mask.sum(-1)
    has = action_mask.bool().any(-1)
    first = action_mask.bool().float().argmax(-1) + 1
    return torch.where(has, first, lens - 1).clamp(min=1)


def shared_prefix_logprobs(model: Any, sequences: torch.Tensor, attention_mask: torch.Tensor,
                           prompt_lens: torch.Tensor, *, temperature: float = 1.0, with_entropy: bool = False,
                           entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor | None] | None:
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
    out = model(input_ids=p_ids, attention_mask=p_mask, use_cache=True)
    past, p_logits = out.past_key_values, out.logits                                  # (U,Pmax,V)
    past.reorder_cache(inverse)                                                       # one cache row per sample
    ar_s = torch.arange(S, device=sequences.device)
    s_mask = (ar_s[None] < (lens - P)[:, None]).long()                              # (B,S) right-padded
    s_pos = P[:, None] + ar_s[None]
    s_ids = sequences.gather(1, s_pos.clamp(max=T - 1)) * s_mask
    s_logits = model(input_ids=s_ids, attention_mask=torch.cat([p_mask[inverse], s_mask], 1),
                     position_ids=s_pos, past_key_values=past, use_cache=True).logits  # (B,S,V)
    kw = dict(temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)
    lp_p, ent_p = token_logprobs(p_logits[:, :-1], p_ids[:, 1:], **kw)               # (U,Pmax-1) inside prompts
    last = p_logits[inverse, P - 1]                                                   # (B,V) predicts response[0]
    lp_l, ent_l = token_logprobs(last, s_ids[:, 0], **kw)
    lp_s, ent_s = token_logprobs(s_logits[:, :-1], s_ids[:, 1:], **kw)               # (B,S-1) inside responses
    # row layout [prompt positions (Pmax-1) | last prompt position | response positions (S-1)]
    t = torch.arange(T - 1, device=sequences.device)[None]
    idx = torch.where(t < P[:, None] - 1, t, Pmax - 1 + t - (P[:, None] - 1)).clamp(max=Pmax + S - 2)
    valid = t < (lens - 1)[:, None]

    def place(inside: torch.Tensor, at_last: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return torch.cat([inside[inverse], at_last[:, None], after], 1).gather(1, idx) * valid

    logprobs = place(lp_p, lp_l, lp_s)
    entropy = place(ent_p, ent_l, ent_s) if ent_p is not None else None
    return logprobs, entropy


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
