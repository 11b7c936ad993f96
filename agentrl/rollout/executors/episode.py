"""The state of a multi-turn episode in flight and the text between its turns (``MultiTurnExecutor``'s parts).

``Episode`` holds one episode's env, tokens and record; ``ChatFeedback`` renders an env's observation as the chat
template's next message; ``state_key`` names the state a turn starts from (turn-level credit's step groups).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from agentrl.env import TextEnv
from agentrl.rollout.chat_turns import REPLY_MARK, closing_left, turn_closing
from agentrl.types import ContextReset, Segment, Task

_MARK = "<<agentrl-observation>>"


class EnvFailed(RuntimeError):
    """An env's step said the episode failed (``info["failed"]``, the reason in ``info["error"]``)."""


@dataclass
class Episode:
    """The state of one episode in flight."""

    env: TextEnv
    task: Task
    group_id: int
    prompt_ids: list[int]
    sample: int = 0  # its place in its group
    calls: int = 0  # engine calls it took part in (turns and summaries): with the group and sample, its seed
    segments: list[Segment] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    response_tokens: int = 0
    out_of_budget: bool = False  # the last turn used up the episode's budget
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    resets: list[ContextReset] = field(default_factory=list)  # contexts rebuilt by the context policy
    turn_log: list[tuple[list[int], list[int]]] = field(default_factory=list)  # each turn's action, feedback ids
    observations: list[str] = field(default_factory=list)  # each step's observation
    state_keys: list[str] = field(default_factory=list)
    summary_for: str | None = None  # compact: the observation the summary being written is asked after
    longest_request: int = 0  # compact: the longest compaction request of the episode so far (tokens)

    def window(self) -> tuple[list[int], list[Segment]]:
        """The current context's start and the segments appended to it."""
        last = self.resets[-1] if self.resets else None
        return (last.prompt_ids, last.segments) if last else (self.prompt_ids, self.segments)

    def context(self) -> list[int]:
        """Every token of the current context: what the policy continues from."""
        prompt, segments = self.window()
        return prompt + [t for s in segments for t in s.token_ids]

    def append(self, segment: Segment) -> None:
        self.window()[1].append(segment)


class ChatFeedback:
    """Renders an observation as the chat template's next message (see the module docstring)."""

    def __init__(self, tokenizer: Any, role: str) -> None:
        base = [{"role": "user", "content": "U"}, {"role": "assistant", "content": REPLY_MARK}]
        before = tokenizer.apply_chat_template(base, tokenize=False)
        after = tokenizer.apply_chat_template(base + [{"role": role, "content": _MARK}], tokenize=False,
                                              add_generation_prompt=True)
        if not after.startswith(before) or _MARK not in after:
            raise ValueError("the chat template does not render a conversation as a prefix of its extension")
        self.turn_end = turn_closing(tokenizer)
        self.pre, self.post = after[len(before):].split(_MARK)

    def text(self, observation: str, action_tail: str, finish_reason: str | None) -> str:
        """Feedback text after an action whose decoded last token is ``action_tail`` and which ended with
        ``finish_reason`` (only a stopped turn generated the start of the turn's closing itself)."""
        return closing_left(self.turn_end, action_tail, finish_reason) + self.pre + observation + self.post


def state_key(observation: Any, info: dict[str, Any]) -> str:
    """The state a turn starts from: the env's ``info["state_key"]``, else a digest of the observation."""
    key = info.get("state_key") if isinstance(info, dict) else None
    if key is not None:
        return str(key)
    return hashlib.sha1(str(observation).encode("utf-8", "replace")).hexdigest()[:16]
