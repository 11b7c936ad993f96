"""Branch-point credit: which of a sample's tokens decided its outcome against its siblings (torch only).

A group's samples share their task; a sample that succeeded and one that failed usually agree on a prefix
of their actions and part at one token (a copied name, a flag). Every token the two share before that
point was taken in both outcomes, so it says nothing of either; the outcome's credit belongs to the
token where they part and what follows it. On a peaked policy the trajectory-level gradient of a group
is dominated instead by the rare low-probability tokens of its samples' tails (docs/agent_tasks.md), so
``branch_window`` keeps the credit of each sample on a window of tokens from its branch point:

- a sample's branch point is the longest prefix of generated tokens it shares with any sibling whose
  reward differs from its own (its actions concatenated across turns, as the policy generated them);
- its kept tokens are the ``window`` generated tokens from there (``window = 0``: every token from the
  branch point to its end); a sample equal to a sibling of another reward, token for token, keeps none;
- a sample whose siblings all have its reward keeps every token (its advantage is the group's business:
  0 under the group estimators).

Shapes: B samples, T tokens, A = T-1 action positions (position t predicts token t+1).
"""

from __future__ import annotations

import torch


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def branch_points(actions: list[list[int]], rewards: list[float], groups: list[int]) -> list[int | None]:
    """For each sample, the length of the longest prefix of its ``actions`` (generated token ids) shared
    with a sibling (same ``groups`` entry) of another reward; None where no sibling's reward differs."""
    out: list[int | None] = []
    for i, (a, r, g) in enumerate(zip(actions, rewards, groups)):
        others = [_common_prefix(a, b) for j, (b, s, h) in enumerate(zip(actions, rewards, groups))
                  if j != i and h == g and s != r]
        out.append(max(others) if others else None)
    return out


def branch_window(sequences: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor, rewards: torch.Tensor,
                  window: int = 0) -> torch.Tensor:
    """(B,A) float mask of the generated tokens that keep their credit: from each sample's branch point
    (:func:`branch_points`), ``window`` of them (0: to the sample's end); 1 on every generated token of a
    sample without a sibling of another reward. ``sequences`` (B,T) long, ``mask`` (B,A), ``group_ids`` (B,),
    ``rewards`` (B,)."""
    if window < 0:
        raise ValueError(f"window: expected a token count >= 0 (0: to the end), got {window}")
    gen = mask > 0
    targets = sequences[:, 1:]
    positions = [torch.nonzero(gen[i]).flatten() for i in range(len(gen))]
    actions = [targets[i, p].tolist() for i, p in enumerate(positions)]
    points = branch_points(actions, rewards.tolist(), group_ids.tolist())
    keep = torch.zeros_like(mask, dtype=torch.float32)
    for i, (p, d) in enumerate(zip(positions, points)):
        if d is None:
            keep[i, p] = 1.0
            continue
        end = len(p) if window == 0 else min(len(p), d + window)
        keep[i, p[d:end]] = 1.0
    return keep
