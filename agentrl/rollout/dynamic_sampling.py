"""Dynamic sampling (DAPO): keep only informative prompt groups and refill the batch; overlong penalty.

A group whose samples all got the same reward has zero advantage under group estimators, so it
only dilutes the batch. :func:`fill_batch` drops such groups and draws more tasks until the batch
holds the target number of informative groups or a round cap is hit. Groups already accepted are
never dropped: when the cap is hit or the data runs out, the batch is simply smaller (OpenRLHF
once discarded the accumulated samples in that case).

:func:`overlong_penalty` is DAPO's soft overlong punishment: 0 up to ``max_tokens - buffer``
tokens, then a linear penalty reaching ``-penalty`` at the token budget.
"""

from __future__ import annotations

from collections.abc import Callable

from agentrl.types import Segment, Trajectory


def informative(trajs: list[Trajectory]) -> list[Trajectory]:
    """The trajectories of groups whose rewards are not all equal (order kept)."""
    by_group: dict[int, list[float]] = {}
    for t in trajs:
        by_group.setdefault(t.group_id, []).append(t.reward)
    return [t for t in trajs if max(by_group[t.group_id]) > min(by_group[t.group_id])]


def num_groups(trajs: list[Trajectory]) -> int:
    """Distinct ``group_id``s."""
    return len({t.group_id for t in trajs})


def fill_batch(first: list[Trajectory], draw: Callable[[int], list[Trajectory]], target_groups: int,
               max_rounds: int) -> tuple[list[Trajectory], list[Trajectory], int]:
    """Informative groups of ``first``, refilled with ``draw(k)`` (rollouts of ``k`` more tasks; an
    empty list means the data ran out) until ``target_groups`` or ``max_rounds`` refills.

    Returns ``(kept, generated, rounds)``: the batch, every trajectory generated (for metrics) and
    the number of refill rounds. Each round asks for exactly the missing number of groups, so the
    batch never exceeds the target and nothing accepted is thrown away.
    """
    kept, generated, rounds = informative(first), list(first), 0
    while num_groups(kept) < target_groups and rounds < max_rounds:
        more = draw(target_groups - num_groups(kept))
        if not more:
            break
        generated += more
        kept += informative(more)
        rounds += 1
    return kept, generated, rounds


def overlong_penalty(length: int, max_tokens: int, buffer: int, penalty: float = 1.0) -> float:
    """DAPO: ``0`` for ``length <= max_tokens - buffer``, then ``-penalty * (length - (max_tokens -
    buffer)) / buffer``, capped at ``-penalty``."""
    if buffer <= 0:
        return 0.0
    start = max_tokens - buffer
    if length <= start:
        return 0.0
    return -penalty * min(1.0, (length - start) / buffer)


def turn_actions(t: Trajectory) -> list[Segment]:
    """The episode's turns, of every context: its action segments but the compaction summaries (the last
    action of a context that a compaction rebuilt, or of an episode a compaction ended), which have
    their own budget (``rollout.context.summary_tokens``)."""
    samples = t.samples()
    summaries = len(t.info.get("summaries") or [])
    out: list[Segment] = []
    for i, (_, segs) in enumerate(samples):
        actions = [s for s in segs if s.is_action]
        compacted = t.resets[i].reason == "compact" if i < len(t.resets) else \
            summaries > sum(r.reason == "compact" for r in t.resets)  # the last: a summary that did not fit
        out += actions[:-1] if compacted and actions else actions
    return out


def apply_overlong_penalty(trajs: list[Trajectory], max_tokens: int, buffer: int, penalty: float) -> None:
    """Add the penalty of each trajectory's longest turn (of any of its contexts; summaries are not turns:
    :func:`turn_actions`) to its reward (``info["overlong_penalty"]``)."""
    for t in trajs:
        longest = max((len(s.token_ids) for s in turn_actions(t)), default=0)
        p = overlong_penalty(longest, max_tokens, buffer, penalty)
        t.info["overlong_penalty"] = p
        t.reward = float(t.reward + p)
