"""Context policies: what a multi-turn episode does when it outgrows the policy's context
(``rollout.context``; DESIGN.md "Credit and long episodes").

Before each turn the multi-turn executor asks whether the env's feedback and the next turn (up to
``rollout.max_new_tokens``) fit in ``max_tokens``. When they do not:

- ``none``: the episode ends (``truncated``, ``info["end_reason"] = "context_full"``);
- ``truncate``: the context is rebuilt as the prompt, a one-line marker (``[N earlier turns
  omitted]``, in the place of the policy's reply so that the feedback after it renders as after any
  reply), the feedback that preceded the first kept turn, then the last turns that fit in
  ``truncate_keep`` of the room (token-exact: the kept actions and feedback are the ids the engine
  and the env produced), then the new feedback;
- ``compact``: the new feedback asks for a summary (the observation, then :data:`COMPACT_INSTRUCTION`
  or the env's ``compaction_instruction``); the policy's reply is the summary, an action trained by
  the episode's outcome like any other (it serves the turn that follows it); the context is rebuilt
  as the prompt, the summary's own tokens as the policy's reply, and the last observation again.
  A compaction is asked for while it still fits: when the next turn and a compaction after it
  (as long as the longest request of the episode so far) would not.

Each rebuilt context starts a new sample of the episode (``Trajectory.resets``): every sample is
what the policy saw, and fits in ``max_tokens``. :func:`merge_samples` is the step-wise rule itself:
one sample per turn, merged into the previous one while its context extends it exactly (the prefix
property), a new sample where the history was rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentrl.types import Segment

COMPACT_INSTRUCTION = ("Your context is full. Write a summary of this episode so far: everything you need to "
                       "go on with the task (what you know, what you tried, what is left). Reply with the "
                       "summary only; the episode continues from the task and your summary.")
MARKER = "[{n} earlier turns omitted]"
POLICIES = ("none", "truncate", "compact")

Render = Callable[[str, list[int], str | None], list[int]]
"""``render(observation, previous_action_ids, finish_reason) -> feedback ids`` (the executor's rendering)."""


@dataclass(frozen=True)
class ContextPolicy:
    """A context policy with its budgets (see the module docstring); ``max_tokens`` 0 means no limit."""

    name: str = "none"
    max_tokens: int = 0
    turn_tokens: int = 64
    summary_tokens: int = 64
    keep: float = 0.5

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise ValueError(f"unknown context policy {self.name!r}; valid: {', '.join(POLICIES)}")
        if self.name != "none" and self.max_tokens <= 0:
            raise ValueError(f"context policy {self.name} needs max_tokens > 0")

    @property
    def limited(self) -> bool:
        return self.max_tokens > 0

    def fits(self, context_len: int, feedback_len: int) -> bool:
        """Whether ``feedback_len`` more tokens and a whole next turn fit after ``context_len``."""
        return not self.limited or context_len + feedback_len + self.turn_tokens <= self.max_tokens

    def compact_due(self, context_len: int, feedback_len: int, request_len: int) -> bool:
        """Whether to ask for the summary now: after this feedback and a whole next turn, a compaction
        request of ``request_len`` tokens (the longest of the episode so far: feedback and instruction)
        and its summary would no longer fit."""
        after_next = context_len + feedback_len + self.turn_tokens
        return self.limited and after_next + request_len + self.summary_tokens > self.max_tokens

    def room_for_summary(self, context_len: int, request_len: int) -> bool:
        return context_len + request_len + self.summary_tokens <= self.max_tokens

    def truncated(self, prompt: list[int], turns: list[tuple[list[int], list[int]]], observations: list[str],
                  render: Render, marker: Callable[[int], list[int]]) -> list[int] | None:
        """The rebuilt context after ``turns`` (each turn's action ids and the feedback ids after it; the last
        one's feedback is the new one) whose observations were ``observations``: the prompt, the marker, the
        feedback that preceded the first kept turn, the kept turns. None when not even the prompt, the marker
        and the last feedback leave room for a turn."""
        room = self.max_tokens - self.turn_tokens
        history_room = self.keep * (room - len(prompt))
        k, best = len(turns), None
        for j in range(k, 0, -1):  # keep turns j..k-1 (none when j == k), the most that fit
            mark = marker(j)
            head = prompt + mark + render(observations[j - 1], mark, None)
            ctx = head + [t for action, feedback in turns[j:] for t in action + feedback]
            if len(ctx) > room or (j < k and len(ctx) - len(prompt) > history_room):
                break
            best = ctx
        return best


def marker_text(omitted: int) -> str:
    """The one line that stands for ``omitted`` dropped turns."""
    return MARKER.format(n=omitted)


def extension(tokens: list[int], context: list[int]) -> list[int] | None:
    """The tokens ``context`` adds after ``tokens`` when it extends them exactly (the prefix property), else None."""
    n = len(tokens)
    return list(context[n:]) if len(context) >= n and context[:n] == tokens else None


def merge_samples(samples: list[tuple[list[int], list[Segment]]]) -> list[tuple[list[int], list[Segment]]]:
    """Step-wise samples ``(context, segments)`` in order, each merged into the one before while its context
    extends that one's whole token list (what it adds in between becomes a feedback segment); a context
    that does not (a rewritten history) starts a new sample. Token-exact: every segment is kept as it is."""
    out: list[tuple[list[int], list[Segment]]] = []
    for prompt, segments in samples:
        if out:
            first, merged = out[-1]
            delta = extension(first + [t for s in merged for t in s.token_ids], prompt)
            if delta is not None:
                out[-1] = (first, merged + ([Segment(delta, False)] if delta else []) + list(segments))
                continue
        out.append((list(prompt), list(segments)))
    return out
