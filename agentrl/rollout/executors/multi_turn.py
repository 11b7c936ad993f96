"""``MultiTurnExecutor``: episodes of several turns (tool calls, retries), token-in/token-out.

Each turn the policy continues from the exact token ids of everything so far: the prompt, its own
earlier actions (kept as generated, with the engine's log-probs, ``Segment(is_action=True)``) and
the environment's feedback (``Segment(is_action=False)``, masked out of the loss). Nothing is
re-tokenized, so the learner trains on precisely the tokens the engine sampled.

**Feedback tokens.** The env's next observation is rendered and tokenized once, then appended:

- with ``chat_template=True`` and a tokenizer that has one, as a new chat message (role
  ``env.feedback_role``, default ``user``) followed by the generation prompt — the text the chat
  template adds for that message (found by rendering a reference conversation with and without
  it), preceded by whatever part of the assistant turn's closing text (``<|im_end|>\\n``) the
  policy did not generate itself (a template that does not render a conversation as a prefix of
  its extension falls back to plain text, with a warning);
- otherwise as plain text on a line of its own (``"\\n" + observation + "\\n"``).

**Budgets.** A turn may generate ``params.max_new_tokens`` tokens; the whole episode after the
prompt (actions and feedback) ``max_total_tokens`` (default ``2 * max_new_tokens * max_turns``).
A turn that runs out of its budget still goes to ``env.step``, then the episode ends with
``truncated=True`` unless the env terminated it; so does an episode whose next feedback would
not fit, or which reaches ``max_turns`` (``env.max_turns``) without the env ending it.

**Rewards.** ``turn_rewards`` holds every ``env.step`` reward; the episode's ``reward`` is their
sum (Gymnasium's return). Our multi-turn envs give 0 until the final turn.

**Batching and failures.** Every episode gets its own env (a deep copy of the executor's env,
sharing its read-only ``tasks`` list), all live episodes' next turns go to the engine in one
``generate`` call, and an exception inside an env fails only that episode: reward 0,
``info["failed"] = True`` and the error text in ``info["error"]``.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.env import TextEnv
from agentrl.rollout.engines.base import Completion, InferenceEngine, SamplingParams
from agentrl.rollout.executors.single_turn import encode_prompt
from agentrl.types import Segment, Task, Trajectory

log = logging.getLogger(__name__)
_MARK = "<<agentrl-observation>>"
_REPLY = "<<agentrl-reply>>"


def clone_env(env: TextEnv) -> TextEnv:
    """A fresh copy of ``env`` for one episode. Read-only bulk (the ``tasks`` dataset and the text
    spaces, of the env and of envs it wraps) is shared, not copied."""
    memo: dict[int, Any] = {}
    stack, seen = [env], set()
    while stack:
        e = stack.pop()
        seen.add(id(e))
        for name in ("tasks", "observation_space", "action_space"):  # read-only and large
            value = getattr(e, name, None)
            if value is not None:
                memo[id(value)] = value
        stack += [v for v in vars(e).values() if isinstance(v, TextEnv) and id(v) not in seen]
    return copy.deepcopy(env, memo=memo)


@dataclass
class Episode:
    """The state of one episode in flight."""

    env: TextEnv
    task: Task
    group_id: int
    prompt_ids: list[int]
    segments: list[Segment] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    response_tokens: int = 0
    done: bool = False
    terminated: bool = False
    truncated: bool = False

    def context(self) -> list[int]:
        """Every token so far: what the policy continues from."""
        return self.prompt_ids + [t for s in self.segments for t in s.token_ids]


class ChatFeedback:
    """Renders an observation as the chat template's next message (see the module docstring)."""

    def __init__(self, tokenizer: Any, role: str) -> None:
        base = [{"role": "user", "content": "U"}, {"role": "assistant", "content": _REPLY}]
        before = tokenizer.apply_chat_template(base, tokenize=False)
        after = tokenizer.apply_chat_template(base + [{"role": role, "content": _MARK}], tokenize=False,
                                              add_generation_prompt=True)
        if not after.startswith(before) or _MARK not in after:
            raise ValueError("the chat template does not render a conversation as a prefix of its extension")
        self.turn_end = before[before.rindex(_REPLY) + len(_REPLY):]
        self.pre, self.post = after[len(before):].split(_MARK)

    def text(self, observation: str, action_tail: str) -> str:
        """Feedback text after an action whose decoded last token is ``action_tail``."""
        end = self.turn_end
        if action_tail and end.startswith(action_tail):
            end = end[len(action_tail):]
        return end + self.pre + observation + self.post


class MultiTurnExecutor:
    """Runs multi-turn episodes: ``n_samples`` per task, grouped by ``group_id``, batched per turn."""

    def __init__(self, env: TextEnv, engine: InferenceEngine, tokenizer: Any, params: SamplingParams,
                 *, n_samples: int = 1, chat_template: bool = False, max_turns: int | None = None,
                 max_total_tokens: int | None = None) -> None:
        self.env, self.engine, self.tokenizer = env, engine, tokenizer
        self.params, self.n_samples, self.chat_template = params, n_samples, chat_template
        self.max_turns = max_turns or int(getattr(env, "max_turns", 1))
        self.max_total_tokens = max_total_tokens
        self.chat: ChatFeedback | None = None
        if chat_template and getattr(tokenizer, "chat_template", None):
            try:
                self.chat = ChatFeedback(tokenizer, getattr(env, "feedback_role", "user"))
            except ValueError as e:
                log.warning("multi-turn feedback falls back to plain text: %s", e)

    def prompt_ids(self, task: Task) -> list[int]:
        """The token ids the policy sees first for ``task`` (the env's rendering of it)."""
        _, info = self.env.reset(options={"task": task})
        return encode_prompt(self.tokenizer, info["prompt"], self.chat_template)

    def feedback_ids(self, observation: str, action_ids: list[int]) -> list[int]:
        """Token ids of the env's feedback after an action (see the module docstring)."""
        if self.chat is not None:
            tail = self.tokenizer.decode(action_ids[-1:]) if action_ids else ""
            text = self.chat.text(observation, tail)
        else:
            text = "\n" + observation.strip("\n") + "\n"
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def run(self, tasks: list[Task], group_offset: int = 0, n_samples: int | None = None,
            params: SamplingParams | None = None) -> list[Trajectory]:
        """Run ``n`` episodes per task to the end; groups numbered from ``group_offset``."""
        n = self.n_samples if n_samples is None else n_samples
        params = params or self.params
        budget = self.max_total_tokens or 2 * params.max_new_tokens * self.max_turns
        episodes = [self._start(task, group_offset + i) for i, task in enumerate(tasks) for _ in range(n)]
        live = [e for e in episodes if not e.done]
        while live:
            limits = [min(params.max_new_tokens, budget - e.response_tokens) for e in live]
            completions = self.engine.generate([e.context() for e in live],
                                               replace(params, max_new_tokens=max(limits)))
            for e, comp, limit in zip(live, completions, limits):
                self._advance(e, comp, limit, budget)
            live = [e for e in live if not e.done]
        return [self._trajectory(e) for e in episodes]

    # ------------------------------------------------------------------ one episode
    def _start(self, task: Task, group_id: int) -> Episode:
        env = clone_env(self.env)
        try:
            _, info = env.reset(options={"task": task})
            prompt = encode_prompt(self.tokenizer, info["prompt"], self.chat_template)
        except Exception as e:  # a crashing env fails this episode, not the batch
            prompt = encode_prompt(self.tokenizer, task.prompt, self.chat_template)
            ep = Episode(env, task, group_id, prompt)
            self._fail(ep, e)
            return ep
        return Episode(env, task, group_id, prompt, info={"responses": [], "finish_reason": None})

    def _advance(self, e: Episode, comp: Completion, limit: int, budget: int) -> None:
        """Append one generated turn, step the env, append its feedback or end the episode."""
        ids, logprobs = list(comp.token_ids[:limit]), list(comp.logprobs[:limit])
        out_of_budget = len(comp.token_ids) > limit or comp.finish_reason == "length"
        e.segments.append(Segment(ids, True, logprobs))
        e.response_tokens += len(ids)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        e.info["responses"].append(text)
        e.info["finish_reason"] = "length" if out_of_budget else comp.finish_reason
        try:
            obs, reward, terminated, truncated, step_info = e.env.step(text)
        except Exception as exc:
            self._fail(e, exc)
            return
        e.turn_rewards.append(float(reward))
        e.info.update(verified=step_info.get("verified", True),
                      reward_components=dict(step_info.get("reward_components", {})))
        if "parsed" in step_info:  # the env's parsed final answer (majority voting in evaluation)
            e.info["parsed"] = step_info["parsed"]
        if terminated or truncated or out_of_budget or len(e.turn_rewards) >= self.max_turns:
            self._end(e, bool(terminated), bool(truncated) or out_of_budget or not terminated)
            return
        feedback = self.feedback_ids(obs, ids)
        if e.response_tokens + len(feedback) >= budget:  # no room to answer the feedback
            self._end(e, False, True)
            return
        e.segments.append(Segment(feedback, False))
        e.response_tokens += len(feedback)

    def _end(self, e: Episode, terminated: bool, truncated: bool) -> None:
        e.done, e.terminated, e.truncated = True, terminated, truncated
        try:
            e.env.close()
        except Exception as exc:  # closing must not fail the batch either
            log.warning("env %s failed to close: %r", type(e.env).__name__, exc)

    def _fail(self, e: Episode, exc: BaseException) -> None:
        log.warning("env %s raised on task %s: %r", type(e.env).__name__, e.task.id, exc)
        e.info.update(error=f"{type(exc).__name__}: {exc}", failed=True, verified=True)
        e.turn_rewards.append(0.0)
        self._end(e, True, False)

    def _trajectory(self, e: Episode) -> Trajectory:
        info = dict(e.info, turns=sum(s.is_action for s in e.segments))
        responses = info.get("responses") or [""]
        info["response"] = responses[-1]
        reward = 0.0 if info.get("failed") else float(sum(e.turn_rewards))
        return Trajectory(prompt_ids=list(e.prompt_ids), segments=e.segments, reward=reward, task_id=e.task.id,
                          group_id=e.group_id, turn_rewards=list(e.turn_rewards), terminated=e.terminated,
                          truncated=e.truncated, info=info)
