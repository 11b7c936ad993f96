"""Check 3, the loss mask: the learner trains exactly the tokens the policy generated.

Each token of each training sample gets a role from the trajectories alone (not from ``Experience``'s
layout code): ``prompt`` (a context's prompt, a rebuilt context included), ``action`` (an action
segment), ``summary`` (a compaction summary: the last action segment of a context followed by a
``compact`` reset, or one the episode ended on, counted by ``info["summaries"]``), ``request`` (the
non-action segment just before a summary: the observation and the compaction instruction) and
``feedback`` (any other non-action segment: env feedback, tool output). Experience's rows are then
mapped back to samples (row ``i`` is the ``i``-th of ``Trajectory.samples()`` over the episodes in order;
each row's real tokens, found from ``attention_mask`` so that either padding side reads right, must be
that sample's tokens) and its ``action_mask`` compared: action position ``t`` predicts token ``t+1``, so
token ``i`` of a row whose real tokens start at column ``o`` is trained at position ``o+i-1``.

It fails on any trained prompt, feedback, request or padding position, on any action or summary token
left out of the loss, and on an empty action segment: the env was stepped with a reply the policy never
generated a token of (an engine asked for 0 tokens, an executor or agent path that records a turn without
its tokens), so nothing trains the choice that turn stood for. The shipped multi-turn executor never makes
one (every turn gets at least one token of budget). The one empty action it lets pass is the last segment
of a truncated episode: a last turn cut to nothing by a spent token budget only ends the episode.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrl.doctor.report import Check
from agentrl.training.experience import Experience
from agentrl.types import Segment, Trajectory

ROLES = ("prompt", "action", "summary", "feedback", "request", "padding")
TRAINED = ("action", "summary")
UNTRAINED = ("prompt", "feedback", "request", "padding")
_CODE = {r: i for i, r in enumerate(ROLES)}
_PAD = _CODE["padding"]


@dataclass
class Sample:
    """One training sample as the trajectories say it is: its ``tokens``, each token's ``roles`` and the
    index of the segment it belongs to (``segment``: -1 in the prompt)."""

    episode: int
    index: int  # 0: the first context, k: the context after the k-th reset
    tokens: list[int]
    roles: list[str]
    segment: list[int]
    segments: list[Segment]


def summary_segments(traj: Trajectory) -> set[tuple[int, int]]:
    """(sample, segment) of every compaction summary of ``traj``: the last action segment of each context
    followed by a ``compact`` reset, and the episode's last action segment when ``info["summaries"]`` counts
    one more summary than there are compact resets (the rebuilt context did not fit and the episode ended)."""
    samples = traj.samples()
    out = set()
    for k, reset in enumerate(traj.resets):
        if reset.reason == "compact":
            actions = [j for j, s in enumerate(samples[k][1]) if s.is_action]
            if actions:
                out.add((k, actions[-1]))
    compacted = sum(r.reason == "compact" for r in traj.resets)
    last = samples[-1][1]
    if len(traj.info.get("summaries") or []) > compacted and last and last[-1].is_action:
        out.add((len(samples) - 1, len(last) - 1))
    return out


def episode_samples(traj: Trajectory, episode: int) -> list[Sample]:
    """The training samples of one episode with every token's role (see the module docstring)."""
    summaries = summary_segments(traj)
    out = []
    for k, (prompt, segments) in enumerate(traj.samples()):
        tokens, roles, where = list(prompt), ["prompt"] * len(prompt), [-1] * len(prompt)
        for j, s in enumerate(segments):
            if s.is_action:
                role = "summary" if (k, j) in summaries else "action"
            else:
                before_summary = (k, j + 1) in summaries
                role = "request" if before_summary else "feedback"
            tokens += s.token_ids
            roles += [role] * len(s.token_ids)
            where += [j] * len(s.token_ids)
        out.append(Sample(episode, k, tokens, roles, where, list(segments)))
    return out


def empty_actions(traj: Trajectory) -> tuple[list[tuple[int, int]], int]:
    """Empty action segments of ``traj``: those that are faults, as (sample, segment), and how many are the
    harmless last step of a truncated episode (see the module docstring)."""
    samples = traj.samples()
    faults, final = [], 0
    for k, (_, segments) in enumerate(samples):
        for j, s in enumerate(segments):
            if s.is_action and not s.token_ids:
                if traj.truncated and k == len(samples) - 1 and j == len(segments) - 1:
                    final += 1
                else:
                    faults.append((k, j))
    return faults, final


def _row_span(exp: Experience, row: int) -> tuple[int, int] | None:
    """(first column, length) of ``row``'s real tokens; None when they are not one contiguous run."""
    cols = torch.nonzero(exp.attention_mask[row] > 0).flatten()
    if cols.numel() == 0:
        return 0, 0
    first, n = int(cols[0]), int(cols.numel())
    return (first, n) if int(cols[-1]) == first + n - 1 else None


def map_rows(samples: list[Sample], exp: Experience) -> tuple[list[int] | None, str]:
    """Each row's first real column, when the rows are the samples in order token for token; else (None,
    why not)."""
    B = exp.sequences.shape[0]
    if B != len(samples):
        return None, (f"Experience has {B} rows but the episodes hold {len(samples)} samples (contexts): its rows "
                      f"cannot be mapped back to the trajectories")
    offsets = []
    for row, s in enumerate(samples):
        if exp.episode_ids is not None and int(exp.episode_ids[row]) != s.episode:
            return None, f"row {row} has episode id {int(exp.episode_ids[row])}, its sample is of episode {s.episode}"
        span = _row_span(exp, row)
        if span is None:
            return None, f"row {row}'s attention mask is not one run of real tokens"
        first, n = span
        if n != len(s.tokens) or exp.sequences[row, first:first + n].tolist() != s.tokens:
            return None, (f"row {row} holds {n} tokens that are not those of episode {s.episode} sample {s.index} "
                          f"({len(s.tokens)} tokens)")
        offsets.append(first)
    return offsets, ""


def expected_roles(samples: list[Sample], offsets: list[int], A: int) -> tuple[torch.Tensor, int]:
    """The role code of the token each action position predicts (B,A) (``padding`` where it predicts none),
    and how many action tokens stand first in their row (no position predicts them: never trainable)."""
    codes = torch.full((len(samples), A), _PAD, dtype=torch.long)
    first_actions = 0
    for row, (s, o) in enumerate(zip(samples, offsets)):
        if len(s.roles) > 1:
            codes[row, o:o + len(s.roles) - 1] = torch.tensor([_CODE[r] for r in s.roles[1:]])
        first_actions += bool(s.roles) and s.roles[0] in TRAINED
    return codes, first_actions


def _where(samples: list[Sample], offsets: list[int], row: int, pos: int) -> str:
    """Where action position ``pos`` of ``row`` points: episode, sample, token, turn."""
    s = samples[row]
    i = pos - offsets[row] + 1
    if not 0 < i < len(s.tokens):
        return f"row {row} position {pos}, past the tokens of episode {s.episode} sample {s.index}"
    text = f"episode {s.episode} sample {s.index} token {i}"
    if s.segment[i] >= 0:
        seg = s.segments[s.segment[i]]
        text += f" (segment {s.segment[i]}" + ("" if seg.turn is None else f", turn {seg.turn}") + ")"
    return text


def _shift_hint(trained: torch.Tensor, expected: torch.Tensor) -> str:
    """A lead for the summary when the mask is the expected one moved by one position."""
    if expected.shape[1] > 1 and expected.any():
        if torch.equal(trained[:, 1:], expected[:, :-1]) or torch.equal(trained[:, :-1], expected[:, 1:]):
            return "the mask is off by one position (action position t must predict token t+1): "
    return ""


def check_mask(episodes: list[Trajectory], exp: Experience) -> Check:
    """Check 3 (``mask``): ``exp.action_mask`` (B,A) against the token roles of ``episodes`` (failed ones are
    left out, as the trainer leaves them out of ``exp``). Details: ``roles`` (tokens and trained tokens per
    role), rows, episodes, empty actions."""
    episodes = [t for t in episodes if not t.info.get("failed")]
    if not episodes:
        return Check("mask", "skip", "no episode to check (every one failed or none was played)")
    samples = [s for e, t in enumerate(episodes) for s in episode_samples(t, e)]
    offsets, why = map_rows(samples, exp)
    if offsets is None:
        return Check("mask", "fail", why, advice="build the batch as the trainer does: "
                     "Experience.from_trajectories over the episodes that did not fail, in order",
                     details={"rows": int(exp.sequences.shape[0]), "samples": len(samples)})
    codes, first_actions = expected_roles(samples, offsets, exp.action_mask.shape[1])
    trained = exp.action_mask.detach().cpu() > 0
    table = {r: {"tokens": int((codes == c).sum()), "trained": int((trained & (codes == c)).sum())}
             for r, c in _CODE.items()}
    table["action"]["tokens"] += first_actions
    empties = [empty_actions(t) for t in episodes]
    faults = [(e, k, j) for e, (found, _) in enumerate(empties) for k, j in found]
    final_empty = sum(n for _, n in empties)
    details = {"roles": table, "rows": len(samples), "episodes": len(episodes), "empty_actions": len(faults),
               "empty_final_actions": final_empty, "first_token_actions": first_actions}
    problems = _problems(samples, offsets, codes, trained, table, first_actions, faults)
    if problems:
        expected = (codes == _CODE["action"]) | (codes == _CODE["summary"])
        summary = _shift_hint(trained, expected) + "; ".join(problems)
        return Check("mask", "fail", summary, advice=_advice(table, faults), details=details)
    n = table["action"]["trained"] + table["summary"]["trained"]
    summary = (f"{n:,} action tokens trained ({table['summary']['trained']:,} of them summaries), 0 "
               f"prompt/feedback/request tokens trained, 0 action tokens masked, over {len(samples)} rows of "
               f"{len(episodes)} episodes")
    if final_empty:
        summary += f"; {final_empty} truncated episode(s) ended on an empty turn (its token budget was spent)"
    return Check("mask", "pass", summary, details=details)


def _problems(samples: list[Sample], offsets: list[int], codes: torch.Tensor, trained: torch.Tensor,
              table: dict[str, dict[str, int]], first_actions: int, faults: list[tuple[int, int, int]]
              ) -> list[str]:
    """One line per fault: trained untrainable roles, masked actions, empty actions; each with its first
    occurrence."""
    out = []
    for role in UNTRAINED:
        bad = trained & (codes == _CODE[role])
        if bad.any():
            row, pos = (int(x) for x in torch.nonzero(bad)[0])
            out.append(f"{int(bad.sum()):,} {role} tokens trained (first: {_where(samples, offsets, row, pos)})")
    for role in TRAINED:
        bad = ~trained & (codes == _CODE[role])
        if bad.any():
            row, pos = (int(x) for x in torch.nonzero(bad)[0])
            out.append(f"{int(bad.sum()):,} of {table[role]['tokens']:,} {role} tokens masked out of the loss "
                       f"(first: {_where(samples, offsets, row, pos)})")
    if first_actions:
        out.append(f"{first_actions} action token(s) stand first in their row: no position predicts them")
    if faults:
        e, k, j = faults[0]
        out.append(f"{len(faults)} empty action segment(s): the env was stepped with a reply of 0 tokens (first: "
                   f"episode {e} sample {k} segment {j})")
    return out


def _advice(table: dict[str, dict[str, int]], faults: list[tuple[int, int, int]]) -> str:
    """What to change, by what went wrong."""
    out = []
    if any(table[r]["trained"] for r in UNTRAINED):
        out.append("tokens the policy did not generate get gradient: the executor must mark prompt, feedback and "
                   "tool output Segment(is_action=False), and the batch must put action position t on token t+1")
    if any(table[r]["trained"] < table[r]["tokens"] for r in TRAINED):
        out.append("generated tokens get no gradient: every action segment (summaries included) must be "
                   "is_action=True and laid out in action_mask")
    if faults:
        out.append("an empty turn means the engine returned no tokens (a turn budget of 0, or an agent that "
                   "replied with nothing): give every turn at least one token")
    return "; ".join(out)
