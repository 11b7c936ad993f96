"""Check 1, ``tokens``: are the token ids an episode trains on the chat template's rendering of its conversation?

Each context the policy continued from (the first, and each one a context policy rebuilt) is a conversation:
the env's prompt, then per turn the policy's reply (its action's text) and the env's feedback (a message of
role ``feedback_role``). At every turn boundary (the context before an action) two things must hold:

- **text**: the context decodes to the template's rendering of the conversation so far with the
  generation prompt. A reply's text is its action's decoded ids (special tokens kept: a random model's
  odd output is its own text), less a final stop token that starts the template's turn closing
  (``<|im_end|>``) where the rendering says so. This fails for a template that does not render a
  conversation as a prefix of its extension (it rewrites earlier replies, its generation prompt differs
  from a rendered reply, it adds per-render content) and for the executor's plain-text fallback;
- **tokens**: the ids that are not the policy's (prompt, feedback, the template's text around the
  replies) are the tokenization of the template's text between the replies, so every special token is
  the special token (verl #6921, TRL #5242). The policy's own ids are trained as generated (token-in,
  token-out): an action whose ids are not its text's canonical tokenization is counted, never failed.

Rebuilt contexts (``agentrl.rollout.context``) are conversations too: ``compact``: the prompt, the summary
as the reply, the observation it was asked after; ``truncate``: the prompt, the marker (``[N earlier turns
omitted]``) as the reply, the feedback before the first kept turn, the kept turns as generated. A compaction
request is read off the context: one feedback message that starts with the observation. Other rebuilt
contexts (an agent's rewritten history) are only checked to start with the episode's prompt.

Needs the executor's ``keep_observations`` (``info["prompt"]``, ``info["observations"]``): episodes without
them are unchecked; failed ones are skipped. Without a chat template the check is skipped."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.doctor.report import Check
from agentrl.rollout.chat_turns import turn_closing
from agentrl.rollout.context import MARKER, marker_text
from agentrl.rollout.executors.episode import ChatFeedback
from agentrl.types import Segment, Trajectory

WINDOW = 60  # characters shown on each side of a divergence
_SENTINEL = "<<agentrl-doctor-{}>>"  # a reply's (or a request's) content while the template renders around it
_MARKER = re.compile(re.escape(MARKER).replace(re.escape("{n}"), r"(\d+)"))


@dataclass
class Message:
    """A message a context should render: fixed text (prompt, feedback) or a reply of ``ids`` (an action, a
    summary, the truncation marker). ``contents``: candidate texts, preferred first (a reply less its final
    stop token ``stop``, then whole), ``chosen`` the one that rendered; ``starts``: a compaction request."""

    role: str
    contents: list[Any]
    turn: int = 0
    ids: list[int] | None = None
    stop: str = ""
    chosen: int | None = None
    starts: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def content(self) -> Any:
        return self.contents[self.chosen or 0]


@dataclass
class Context:
    """An episode's context ``index`` (0, or ``resets[index - 1]``): its ids in ``pieces``, the messages it renders,
    its boundaries ``(tokens before an action, messages before it, the action's turn)``."""

    pieces: list[list[int]]
    messages: list[Message]
    boundaries: list[tuple[int, int, int]]
    index: int = 0


@dataclass
class Divergence:
    """Where an episode's context first differs from the template's rendering (``kind`` text or tokens)."""

    episode: int
    context: int
    turn: int
    kind: str
    token: int
    what: str
    expected: str
    actual: str

    def line(self) -> str:
        return (f"episode {self.episode}{f', rebuilt context {self.context}' if self.context else ''}, before turn "
                f"{self.turn}: {self.what} at token {self.token}: expected {self.expected!r}, got {self.actual!r}")


def check_tokens(episodes: list[Trajectory], tokenizer: Any, *, chat_template: bool,
                 feedback_role: str = "user") -> Check:
    """The ``tokens`` check (see the module docstring) over ``episodes``: fail on any episode's first text or
    non-action token divergence, pass when every boundary of every context renders; skip without a template."""
    if not chat_template or not getattr(tokenizer, "chat_template", None):
        why = "the config renders no chat template" if not chat_template else "the tokenizer has no chat template"
        return Check("tokens", "skip", f"{why}: no rendering to compare the episodes' tokens with")
    try:
        closing = turn_closing(tokenizer)
    except Exception:  # noqa: BLE001 - a template that renders no reply: no stop token is the template's
        closing = ""
    counts = dict.fromkeys(("episodes", "failed_skipped", "unchecked", "contexts", "rebuilt", "prompt_only",
                            "boundaries", "text_only", "actions", "actions_retokenize_differently"), 0)
    found: list[Divergence] = []
    for i, traj in enumerate(episodes):
        if traj.info.get("failed"):
            counts["failed_skipped"] += 1
        elif not _recorded(traj):
            counts["unchecked"] += 1
        else:
            try:
                div = _Episode(i, traj, tokenizer, closing, feedback_role).check(counts)
            except (IndexError, KeyError):  # a record that does not add up (an observation missing): not checkable
                counts["unchecked"] += 1
                continue
            counts["episodes"] += 1
            _count_actions(traj, tokenizer, closing, counts)
            found += [div] if div is not None else []
    return _verdict(found, counts, tokenizer, feedback_role)


def _recorded(traj: Trajectory) -> bool:
    """Whether the episode kept its prompt and the observation of every turn with feedback (keep_observations)."""
    prompt, obs = traj.info.get("prompt"), traj.info.get("observations")
    chat = isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt)
    feedback = [s for s in traj.segments + [s for r in traj.resets for s in r.segments] if not s.is_action]
    return (isinstance(prompt, str) or chat) and (not feedback or isinstance(obs, list) and all(
        s.turn is None or s.turn < len(obs) for s in feedback))


class _Episode:
    """One episode's contexts, built and checked in order: a rebuilt context reuses the replies (and the
    candidate text each matched) of the contexts before it."""

    def __init__(self, index: int, traj: Trajectory, tok: Any, closing: str, role: str) -> None:
        self.index, self.traj, self.tok, self.closing, self.role = index, traj, tok, closing, role
        prompt = traj.info["prompt"]
        prompt = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        self.head = [Message(m["role"], [m.get("content")], extra=dict(m)) for m in prompt]
        self.obs = [str(o) for o in traj.info.get("observations") or []]
        self.replies: dict[int, Message] = {}  # each env turn's reply (a truncation keeps some)

    def check(self, counts: dict[str, int]) -> Divergence | None:
        """The first divergence of the episode's contexts (None: each renders)."""
        t = self.traj
        windows = [("", t.prompt_ids, t.segments)] + [(r.reason, r.prompt_ids, r.segments) for r in t.resets]
        summarized_last = len(t.info.get("summaries") or []) > sum(r.reason == "compact" for r in t.resets)
        previous: Context | None = None
        for n, (reason, ids, segments) in enumerate(windows):
            counts["contexts"], counts["rebuilt"] = counts["contexts"] + 1, counts["rebuilt"] + (n > 0)
            if n and ids[:len(t.prompt_ids)] != t.prompt_ids:
                x, tok = _first_difference(ids, t.prompt_ids), self.tok
                return Divergence(self.index, n, len(self.replies), "tokens", x, f"the {reason} context does not start "
                                  f"with the prompt", _show(tok, t.prompt_ids[x:x + 6]), _show(tok, ids[x:x + 6]))
            if n and reason not in ("compact", "truncate"):
                counts["prompt_only"] += 1
                continue
            ctx = self._head(n, reason, ids, previous)
            if isinstance(ctx, Divergence):
                return ctx
            nxt = windows[n + 1][0] if n + 1 < len(windows) else None
            self._extend(ctx, segments, nxt == "compact" or (nxt is None and summarized_last))
            div = _check_context(self.index, ctx, self.tok, counts)
            if div is not None:
                return div
            previous = ctx
        return None

    def _head(self, n: int, reason: str, ids: list[int], previous: Context | None) -> Context | Divergence:
        """Context ``n`` before its segments, with one boundary at its end: the prompt; or the conversation a
        context policy rebuilt it as (see the module docstring)."""
        role, done = self.role, len(self.replies)  # env turns played before this context
        if n == 0:
            return Context([list(ids)], list(self.head), [(len(ids), len(self.head), 0)])
        if reason == "compact":
            if previous is None or len(previous.messages) < 2 or previous.messages[-1].ids is None:
                return Divergence(self.index, n, done, "text", len(ids), "a compacted context after no summary", "", "")
            summary, request = previous.messages[-1], previous.messages[-2]
            msgs = self.head + [replace(summary, chosen=None), Message(role, [self.obs[request.turn]], request.turn)]
            return Context([list(ids)], msgs, [(len(ids), len(msgs), done)], n)
        start = len(self.traj.prompt_ids)
        found = _MARKER.match(_decode(self.tok, ids[start:]))
        kept = int(found.group(1)) if found else -1
        if not 0 < kept <= done or any(t not in self.replies for t in range(kept, done)):
            return Divergence(self.index, n, done, "text", start, "the truncated context does not go on with the "
                              "marker of the turns it left out", marker_text(done),
                              _decode(self.tok, ids[start:])[:WINDOW])
        mark = self.tok(marker_text(kept), add_special_tokens=False)["input_ids"]
        msgs = self.head + [Message("assistant", [marker_text(kept)], kept - 1, ids=mark),
                            Message(role, [self.obs[kept - 1]], kept - 1)]
        for t in range(kept, done):
            msgs += [replace(self.replies[t]), Message(role, [self.obs[t]], t)]
        return Context([list(ids)], msgs, [(len(ids), len(msgs), done)], n)

    def _extend(self, ctx: Context, segments: list[Segment], summarized: bool) -> None:
        """``ctx`` with ``segments`` appended: a reply per action (a boundary before each), a feedback message per
        feedback segment; ``summarized``: the last two are a compaction request and the summary."""
        pos, turn = len(ctx.pieces[0]), ctx.boundaries[0][2]
        for k, seg in enumerate(segments):
            if seg.is_action:
                turn = seg.turn if seg.turn is not None else turn + (k > 0)
                if pos != ctx.boundaries[-1][0]:
                    ctx.boundaries.append((pos, len(ctx.messages), turn))
                ctx.messages.append(_reply(seg.token_ids, turn, self.tok, self.closing))
                if not (summarized and k == len(segments) - 1):
                    self.replies[turn] = ctx.messages[-1]
            else:
                t = seg.turn if seg.turn is not None else turn
                request = summarized and k == len(segments) - 2
                ctx.messages.append(Message(self.role, [self.obs[t]], t, starts=self.obs[t] if request else None))
            ctx.pieces.append(seg.token_ids)
            pos += len(seg.token_ids)


def _reply(ids: list[int], turn: int, tok: Any, closing: str) -> Message:
    """The assistant message of a reply whose ids are ``ids``: its text less a final stop token that starts the
    template's turn closing, then its whole text."""
    whole = _decode(tok, ids)
    last = _decode(tok, ids[-1:]) if ids else ""
    if last and closing.startswith(last):
        return Message("assistant", [_decode(tok, ids[:-1]), whole], turn, ids=list(ids), stop=last)
    return Message("assistant", [whole], turn, ids=list(ids))


def _check_context(episode: int, ctx: Context, tok: Any, counts: dict[str, int]) -> Divergence | None:
    """Text at every boundary of ``ctx``, then its tokens up to the last one."""
    ids = [t for p in ctx.pieces for t in p]
    texts = [_decode(tok, p) for p in ctx.pieces]
    joined = "".join(texts) == _decode(tok, ids)
    ends = dict(zip(itertools.accumulate(len(p) for p in ctx.pieces), itertools.accumulate(texts)))
    rendered = ""
    for pos, n, turn in ctx.boundaries:
        actual = ends[pos] if joined and pos in ends else _decode(tok, ids[:pos])
        counts["boundaries"] += 1
        try:
            rendered = _resolve(tok, ctx.messages[:n], actual)
        except Exception as e:  # noqa: BLE001 - a template that raises on the conversation is the finding
            return Divergence(episode, ctx.index, turn, "text", pos, f"the chat template cannot render the "
                              f"conversation ({type(e).__name__}: {e})", "", actual[-WINDOW:])
        if not _same(tok, rendered, actual):
            c = _first_difference(rendered, actual)
            return Divergence(episode, ctx.index, turn, "text", _token_at(tok, ids[:pos], c),
                              f"the context is not the template's rendering of the conversation (character {c})",
                              rendered[max(0, c - WINDOW):c + WINDOW], actual[max(0, c - WINDOW):c + WINDOW])
    pos, n, turn = ctx.boundaries[-1]
    return _check_ids(episode, ctx, ids[:pos], ctx.messages[:n], rendered, tok, counts)


def _resolve(tok: Any, msgs: list[Message], actual: str) -> str:
    """The rendering of ``msgs`` (with the generation prompt) that matches ``actual``, choosing each open
    reply's candidate and reading a compaction request's content off ``actual``; else the preferred one."""
    open_ = [m for m in msgs if m.chosen is None and len(m.contents) > 1][:4]
    request = msgs[-1] if msgs and msgs[-1].starts is not None else None
    first = ""
    for combo in itertools.product(*(range(len(m.contents)) for m in open_)):  # one empty combo when none is open
        for m, c in zip(open_, combo):
            m.chosen = c
        contents = [m.content for m in msgs]
        if request is not None:
            contents[-1] = _request(tok, msgs, contents, actual, request.starts or "")
        rendered = _render(tok, msgs, contents)
        if _same(tok, rendered, actual):
            if request is not None:
                request.contents, request.starts = [contents[-1]], None
            return rendered
        first = first or rendered
    for m in open_:
        m.chosen = 0
    return first


def _request(tok: Any, msgs: list[Message], contents: list[Any], actual: str, starts: str) -> str:
    """The last message's content read off ``actual`` where the rendering around it matches and it starts with
    ``starts`` (a compaction request: the observation, then the instruction); else ``starts`` alone."""
    mark = _SENTINEL.format("request")
    before, _, after = _render(tok, msgs, contents[:-1] + [mark]).partition(mark)
    middle = actual[len(before):len(actual) - len(after)] if len(actual) >= len(before) + len(after) else ""
    fits = actual.startswith(before) and actual.endswith(after) and middle.startswith(starts)
    return middle if fits else starts


def _check_ids(episode: int, ctx: Context, ids: list[int], msgs: list[Message], rendered: str, tok: Any,
               counts: dict[str, int]) -> Divergence | None:
    """The ids before the last boundary against the template's text between the replies, tokenized, with
    each reply's own ids in its place (a template that changes the replies' text leaves the text check only)."""
    replies = [m for m in msgs if m.ids is not None]
    marks = iter(range(len(replies)))
    marked = _render(tok, msgs, [_SENTINEL.format(next(marks)) if m.ids is not None else m.content for m in msgs])
    parts = re.split("|".join(re.escape(_SENTINEL.format(i)) for i in range(len(replies))) or "(?!)", marked)
    if len(parts) != len(replies) + 1 or "".join(
            p + (replies[i].content if i < len(replies) else "") for i, p in enumerate(parts)) != rendered:
        counts["text_only"] += 1
        return None
    for i, m in enumerate(replies):  # a stop token left to the template is in the reply's ids
        if m.chosen == 0 and m.stop:
            parts[i + 1] = parts[i + 1][len(m.stop):]
    expected: list[int] = []
    owners: list[tuple[int, str, int]] = []  # each part of ``expected``: where it ends, what it is, its turn
    for i, part in enumerate(tok(parts, add_special_tokens=False)["input_ids"]):
        turn = replies[i - 1].turn + 1 if i else ctx.boundaries[0][2]
        what = (f"the feedback after turn {turn - 1}'s reply" if i else
                "the prompt" if ctx.index == 0 else "the rebuilt context's start")
        expected += part
        owners.append((len(expected), what, turn))
        if i < len(replies):
            expected += replies[i].ids or []
            owners.append((len(expected), f"turn {replies[i].turn}'s reply", replies[i].turn))
    if expected == ids:
        return None
    x = _first_difference(expected, ids)
    _, what, turn = next((o for o in owners if x < o[0]), owners[-1])
    return Divergence(episode, ctx.index, turn, "tokens", x, f"{what}: the template's text in other tokens",
                      _show(tok, expected[max(0, x - 3):x + 6]), _show(tok, ids[max(0, x - 3):x + 6]))


def _render(tok: Any, msgs: list[Message], contents: list[str]) -> str:
    """The template's rendering of ``msgs`` with ``contents``, followed by the generation prompt."""
    convo = [{**m.extra, "role": m.role} | ({} if c is None else {"content": c}) for m, c in zip(msgs, contents)]
    return str(tok.apply_chat_template(convo, tokenize=False, add_generation_prompt=True))


def _decode(tok: Any, ids: list[int]) -> str:
    return str(tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))


def _same(tok: Any, rendered: str, actual: str) -> bool:
    """Whether ``actual`` (decoded ids) is ``rendered``, or its tokenization decoded (a tokenizer whose
    decoding does not give every text back, e.g. SentencePiece's leading spaces)."""
    return rendered == actual or _decode(tok, tok(rendered, add_special_tokens=False)["input_ids"]) == actual


def _first_difference(a: Any, b: Any) -> int:
    """The first index where sequences ``a`` and ``b`` differ (the shorter one's length when one extends the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _token_at(tok: Any, ids: list[int], char: int) -> int:
    """The index of the token of ``ids`` whose decoded text holds character ``char`` (binary search)."""
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if len(_decode(tok, ids[:mid + 1])) > char else (mid + 1, hi)
    return lo


def _show(tok: Any, ids: list[int]) -> str:
    """A few tokens, each decoded, joined by ``|`` (a token divergence has the same text on both sides)."""
    return "|".join(_decode(tok, [t]) for t in ids)


def _count_actions(traj: Trajectory, tok: Any, closing: str, counts: dict[str, int]) -> None:
    """Count the episode's actions, and those whose ids are not their text's tokenization (a final stop
    token that starts the template's turn closing set apart): trained as generated, never a fault."""
    actions = [s.token_ids for s in traj.segments + [s for r in traj.resets for s in r.segments] if s.is_action]
    own = [ids[:-1] if ids and closing.startswith(_decode(tok, ids[-1:]) or "\0") else ids for ids in actions]
    if not own:
        return
    again = tok([_decode(tok, ids) for ids in own], add_special_tokens=False)["input_ids"]
    counts["actions"] += len(own)
    counts["actions_retokenize_differently"] += sum(list(a) != list(b) for a, b in zip(again, own))


def _verdict(found: list[Divergence], counts: dict[str, int], tok: Any, role: str) -> Check:
    """The check from the divergences found and the counts."""
    details: dict[str, Any] = dict(counts, divergent_episodes=len(found),
                                   text_divergences=sum(d.kind == "text" for d in found),
                                   token_divergences=sum(d.kind == "tokens" for d in found))
    if not counts["episodes"]:
        return Check("tokens", "skip", f"no episode to check: {counts['failed_skipped']} failed, {counts['unchecked']} "
                     f"without their prompt and feedback texts (the executor's keep_observations)", details=details)
    retok = (f"; {counts['actions_retokenize_differently']} of {counts['actions']} actions are not their text's "
             f"tokenization (trained as generated)" if counts["actions_retokenize_differently"] else "")
    if not found:
        return Check("tokens", "pass", f"{counts['episodes']} episodes ({counts['contexts']} contexts, "
                     f"{counts['rebuilt']} rebuilt): every context is the chat template's rendering at its "
                     f"{counts['boundaries']} turn boundaries, prompt and feedback tokenized as the template's "
                     f"text{retok}", details=details)
    first = found[0]
    details.update(first_divergence=dict(vars(first)), divergences=[d.line() for d in found[:5]])
    return Check("tokens", "fail", f"{len(found)} of {counts['episodes']} episodes are not the chat template's "
                 f"rendering of their conversation: {first.line()}", _advice(first, tok, role), details)


def _advice(first: Divergence, tok: Any, role: str) -> str:
    """What to change for the first divergence."""
    if first.kind == "tokens":
        return ("build prompt and feedback ids by tokenizing the template's text whole, with a tokenizer that "
                "parses its special tokens (MultiTurnExecutor.feedback_ids); never re-tokenize a decoded context")
    try:
        ChatFeedback(tok, role)
    except ValueError as e:
        return (f"the executor refuses this template ({e}) and sends feedback as plain text: give the model a chat "
                f"template that renders each conversation as a prefix of its extension")
    return ("the policy trains on contexts this chat template does not produce (it rewrites earlier turns, or its "
            "generation prompt differs from how it renders a reply): use a template that renders each "
            "conversation as a prefix of its extension (one that renders every reply as the policy saw it)")
