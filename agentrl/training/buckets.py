"""Length buckets: split a micro-batch so its forward/backward runs on real tokens, not padding.

A right-padded batch costs ``rows x longest row`` tokens. Sorting the rows by length and cutting
the sorted list into a few buckets, each trimmed to its own longest row, removes most of the
padding once responses end at different lengths. The loss is normalised by the mini-batch's
counts, so the buckets' gradients sum to the one-batch gradient (up to float summation order).
"""

from __future__ import annotations

from collections.abc import Sequence

CANDIDATES = 16  # cut points considered: every 1/16 of the sorted rows


def length_buckets(lengths: Sequence[int], overhead_tokens: int, max_buckets: int = 8,
                   prompts: Sequence[tuple[int, int]] | None = None) -> list[list[int]]:
    """Row indices per bucket, minimising the buckets' tokens + ``overhead_tokens`` per extra bucket.

    ``lengths`` are the rows' token counts. A bucket costs ``rows x its longest row``; with ``prompts``
    (per row: its group id and prompt length, when rows sharing a prompt run it once) it costs its
    distinct prompts once each plus ``rows x its longest response`` (``bucket_tokens``), so a group
    split over two buckets pays its prompt twice. Rows are sorted longest first and cut only at every
    ``len/16`` rows (dynamic programming over those cut points, at most ``max_buckets`` buckets), so
    the cost is negligible. Returns one bucket with every row when splitting would not pay.
    """
    n = len(lengths)
    if n < 2 or overhead_tokens < 0:
        return [list(range(n))]
    order = sorted(range(n), key=lambda i: -lengths[i])
    step = max(1, -(-n // CANDIDATES))
    cuts = list(range(0, n, step)) + [n]
    m = len(cuts)
    cost = [[bucket_tokens(lengths, order[cuts[i]:cuts[j]], prompts) if i < j else 0 for j in range(m)]
            for i in range(m)]
    inf = float("inf")
    # best[k][j]: least cost of the first cuts[j] sorted rows in k buckets
    best = [[inf] * m for _ in range(max_buckets + 1)]
    back = [[0] * m for _ in range(max_buckets + 1)]
    best[0][0] = 0.0
    for k in range(1, max_buckets + 1):
        for j in range(1, m):
            for i in range(j):
                if best[k - 1][i] == inf:
                    continue
                c = best[k - 1][i] + cost[i][j] + (overhead_tokens if k > 1 else 0)
                if c < best[k][j]:
                    best[k][j], back[k][j] = c, i
    k = min(range(1, max_buckets + 1), key=lambda kk: best[kk][m - 1])
    bounds, j = [], m - 1
    while k > 0:
        i = back[k][j]
        bounds.append((cuts[i], cuts[j]))
        j, k = i, k - 1
    return [sorted(order[a:b]) for a, b in reversed(bounds)]


def bucket_tokens(lengths: Sequence[int], rows: Sequence[int], prompts: Sequence[tuple[int, int]] | None = None
                  ) -> int:
    """Tokens one bucket of ``rows`` costs once trimmed: ``rows x longest row``, or with ``prompts``
    ((group id, prompt length) per row) ``distinct prompts x longest prompt + rows x longest response``,
    as ``agentrl.training.packing.shared_prefix_logprobs`` runs them."""
    if not rows:
        return 0
    if prompts is None:
        return len(rows) * max(lengths[i] for i in rows)
    distinct = {prompts[i] for i in rows}  # the shared-prompt forward pads them to the longest
    return (len(distinct) * max(p for _, p in distinct)
            + len(rows) * max(lengths[i] - prompts[i][1] for i in rows))


def padded_tokens(lengths: Sequence[int], buckets: Sequence[Sequence[int]],
                  prompts: Sequence[tuple[int, int]] | None = None) -> int:
    """Tokens the buckets cost once each is trimmed (``bucket_tokens`` summed)."""
    return sum(bucket_tokens(lengths, b, prompts) for b in buckets)


def fit_calls(lengths: Sequence[int], buckets: Sequence[Sequence[int]], max_tokens: int,
              prompts: Sequence[tuple[int, int]] | None = None) -> list[list[int]]:
    """Cut each bucket costing more than ``max_tokens`` (``bucket_tokens``) into ``ceil(cost / max_tokens)``
    pieces of about equal rows, so every forward/backward call's activations stay cache-sized.

    Pieces are consecutive rows by length (longest first) or, with ``prompts``, whole groups when that
    costs fewer tokens (a group split over two pieces pays its prompt twice). ``max_tokens <= 0``: no cut.
    """
    out: list[list[int]] = []
    for bucket in buckets:
        cost = bucket_tokens(lengths, bucket, prompts)
        if max_tokens <= 0 or cost <= max_tokens or len(bucket) < 2:
            out.append(list(bucket))
            continue
        k = min(len(bucket), -(-cost // max_tokens))
        orders = [sorted(bucket, key=lambda i: -lengths[i])]
        if prompts is not None:
            orders.append(sorted(bucket, key=lambda i: (prompts[i], -lengths[i])))
        pieces = min((_even_pieces(o, k) for o in orders), key=lambda ps: padded_tokens(lengths, ps, prompts))
        out += [sorted(p) for p in pieces]
    return out


def _even_pieces(rows: Sequence[int], k: int) -> list[list[int]]:
    """``rows`` in ``k`` consecutive pieces whose sizes differ by at most one."""
    n = len(rows)
    bounds = [n * j // k for j in range(k + 1)]
    return [list(rows[bounds[j]:bounds[j + 1]]) for j in range(k) if bounds[j] < bounds[j + 1]]


CACHE_BYTES = 4 * 2**20
"""Bytes of one activation a CPU forward/backward call keeps in cache (``cache_sized_tokens``)."""


def cache_sized_tokens(width: int, itemsize: int = 4, cache_bytes: int = CACHE_BYTES, floor: int = 256) -> int:
    """Tokens per call whose widest activation (tokens x ``width`` elements of ``itemsize`` bytes) fits
    ``cache_bytes``, at least ``floor``: 2,048 for the demo model (MLP width 512, float32), 682 for
    SmolLM2-135M (1,536). Past that the matmuls and elementwise ops stream their operands from memory."""
    if width <= 0 or itemsize <= 0:
        raise ValueError(f"width and itemsize must be positive, got {width} and {itemsize}")
    return max(floor, cache_bytes // (width * itemsize))
