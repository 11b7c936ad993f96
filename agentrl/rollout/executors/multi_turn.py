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
  policy did not generate itself: all of it, unless the turn ended on a stop token that starts it
  (``agentrl.rollout.chat_turns``; a turn cut at its budget is always closed). A template that
  does not render a conversation as a prefix of its extension falls back to plain text, with a
  warning;
- otherwise as plain text on a line of its own (``"\\n" + observation + "\\n"``).

**Budgets.** A turn may generate ``params.max_new_tokens`` tokens; a turn cut off there still goes
to ``env.step`` and the episode goes on (the env's feedback answers it). With ``max_total_tokens``
set, the whole episode after the prompt (actions and feedback) must fit in it: an episode that runs
out, or whose next feedback would not fit, ends with ``truncated=True``. Without it (the default)
only the action tokens are counted, ``max_new_tokens * max_turns``, so every turn fits. An episode
that reaches ``max_turns`` (``env.max_turns``) without the env ending it ends ``truncated=True``.
``info["end_reason"]`` says which (see ``agentrl.training.metrics.END_REASONS``); ``info["turns"]``
counts the policy's turns; ``info["tool_calls"]`` keeps the tool calls an env reports in its step's
``info["calls"]`` (each with its ``turn``).

**Rewards.** ``turn_rewards`` holds every ``env.step`` reward; the episode's ``reward`` is their
sum (Gymnasium's return). Our multi-turn envs give 0 until the final turn.

**Batching and failures.** Every episode gets its own env (a deep copy of the executor's env,
sharing its read-only ``tasks`` list). Env steps run concurrently on an ``EnvPool`` (worker
threads; an ``async def step`` on its event loop), each under the pool's deadline, and the turns
batch continuously: every episode whose env has answered goes back to the engine in one
``generate`` call without waiting for the slowest env of its wave. An exception inside an env, or
a step past its deadline, fails only that episode: reward 0, ``info["failed"] = True``, the
error in ``info["error"]`` and its traceback in ``info["traceback"]`` (the trainer shows each distinct
error once: ``agentrl.rollout.failures``); so does a step whose info says ``failed`` (an env whose grader
could not run: an infrastructure failure, not a 0). ``info["action_versions"]`` holds the policy version of each
turn's engine (``engine.version``, asynchronous runs), when it has one.

**The env's record.** The keys of a step's ``info["trajectory_info"]`` (a dict) are copied into the
trajectory's ``info``: an env keeps there what a reader of the episode needs beyond its tokens (a
workspace env: ``commands``, ``outputs``, ``diff``, ``verifier``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.env import TextEnv
from agentrl.rollout.chat_turns import REPLY_MARK, closing_left, turn_closing
from agentrl.rollout.engines.base import Completion, InferenceEngine, SamplingParams
from agentrl.rollout.env_pool import EnvPool, Pending, clone_env, failure_info
from agentrl.rollout.executors.single_turn import encode_prompt
from agentrl.types import Segment, Task, Trajectory

log = logging.getLogger(__name__)
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
    segments: list[Segment] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    response_tokens: int = 0
    out_of_budget: bool = False  # the last turn used up the episode's budget
    done: bool = False
    terminated: bool = False
    truncated: bool = False

    def context(self) -> list[int]:
        """Every token so far: what the policy continues from."""
        return self.prompt_ids + [t for s in self.segments for t in s.token_ids]


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


class MultiTurnExecutor:
    """Runs multi-turn episodes: ``n_samples`` per task, grouped by ``group_id``, batched per turn."""

    def __init__(self, env: TextEnv, engine: InferenceEngine, tokenizer: Any, params: SamplingParams,
                 *, n_samples: int = 1, chat_template: bool = False, max_turns: int | None = None,
                 max_total_tokens: int | None = None, pool: EnvPool | None = None) -> None:
        self.env, self.engine, self.tokenizer = env, engine, tokenizer
        self.pool = pool or EnvPool(workers=1)
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

    def feedback_ids(self, observation: str, action_ids: list[int], finish_reason: str | None = "stop") -> list[int]:
        """Token ids of the env's feedback after an action that ended with ``finish_reason`` (see the
        module docstring)."""
        if self.chat is not None:
            tail = self.tokenizer.decode(action_ids[-1:]) if action_ids else ""
            text = self.chat.text(observation, tail, finish_reason)
        else:
            text = "\n" + observation.strip("\n") + "\n"
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def run(self, tasks: list[Task], group_offset: int = 0, n_samples: int | None = None,
            params: SamplingParams | None = None) -> list[Trajectory]:
        """Run ``n`` episodes per task to the end; groups numbered from ``group_offset``."""
        n = self.n_samples if n_samples is None else n_samples
        params = params or self.params
        budget = self.max_total_tokens or params.max_new_tokens * self.max_turns  # default: actions only
        episodes = [self._start(task, group_offset + i) for i, task in enumerate(tasks) for _ in range(n)]
        ready = [e for e in episodes if not e.done]  # waiting for the engine
        stepping: dict[Pending, tuple[Episode, list[int]]] = {}  # waiting for their env
        while ready or stepping:
            if ready:
                limits = [min(params.max_new_tokens, budget - e.response_tokens) for e in ready]
                completions = self.engine.generate([e.context() for e in ready],
                                                   replace(params, max_new_tokens=max(limits)))
                version = getattr(self.engine, "version", None)
                for e, comp, limit in zip(ready, completions, limits):
                    ids, text = self._act(e, comp, limit, budget, version)
                    stepping[self.pool.submit(e.env.step, text)] = (e, ids)
            # continuous batching: whatever has answered goes back to the engine, the rest keep stepping
            ready = []
            for p in self.pool.wait_any(list(stepping)):
                e, ids = stepping.pop(p)
                self._observe(e, ids, p, budget)
                if not e.done:
                    ready.append(e)
        return [self._trajectory(e) for e in episodes]

    def run_scripted(self, tasks: list[Task], act: Callable[[TextEnv], str]) -> list[Trajectory]:
        """One episode per task whose actions are ``act(env)`` (a scripted policy, e.g. the env's
        ``reference_action``), stitched as :meth:`run` stitches the engine's: the action's tokens and
        the EOS, cut at the turn's budget as a generated turn would be, then the feedback's tokens."""
        params, eos = self.params, self.tokenizer.eos_token_id
        budget = self.max_total_tokens or params.max_new_tokens * self.max_turns
        episodes = []
        for i, task in enumerate(tasks):
            e = self._start(task, i)
            while not e.done:
                try:
                    ids = self.tokenizer(act(e.env), add_special_tokens=False)["input_ids"] + [eos]
                except Exception as exc:  # a broken reference policy fails its episode
                    self._fail(e, exc)
                    break
                comp = Completion(ids, [0.0] * len(ids), "stop")
                ids, text = self._act(e, comp, min(params.max_new_tokens, budget - e.response_tokens), budget, None)
                pending = self.pool.submit(e.env.step, text)
                self.pool.wait_all([pending])
                self._observe(e, ids, pending, budget)
            episodes.append(e)
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
        info = {"responses": [], "finish_reason": None, **({"env_server": info["env_server"]}
                                                               if "env_server" in info else {})}
        return Episode(env, task, group_id, prompt, info=info)

    def _act(self, e: Episode, comp: Completion, limit: int, budget: int, version: int | None
             ) -> tuple[list[int], str]:
        """Append one generated turn (and the policy version that made it); return its ids and text."""
        ids, logprobs = list(comp.token_ids[:limit]), list(comp.logprobs[:limit])
        cut = len(comp.token_ids) > limit or comp.finish_reason == "length"
        e.segments.append(Segment(ids, True, logprobs))
        if version is not None:
            e.info.setdefault("action_versions", []).append(version)
        e.response_tokens += len(ids)
        e.out_of_budget = cut and e.response_tokens >= budget  # a turn cut at max_new_tokens alone goes on
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        e.info["responses"].append(text)
        e.info["finish_reason"] = "length" if cut else comp.finish_reason
        return ids, text

    def _observe(self, e: Episode, ids: list[int], step: Pending, budget: int) -> None:
        """Take the env's answer to the turn ``ids``: append its feedback or end the episode."""
        out_of_budget = e.out_of_budget
        try:
            obs, reward, terminated, truncated, step_info = step.result()
        except Exception as exc:  # the env raised or ran past its deadline
            self._fail(e, exc)
            return
        e.info.update(step_info.get("trajectory_info") or {})  # the env's record of the episode
        if step_info.get("failed"):  # the env could not score the episode (its grader failed): not a 0
            self._fail(e, EnvFailed(step_info.get("error") or "the env marked the episode failed"))
            return
        e.turn_rewards.append(float(reward))
        e.info.update(verified=step_info.get("verified", True),
                      reward_components=dict(step_info.get("reward_components", {})))
        if "parsed" in step_info:  # the env's parsed final answer (majority voting in evaluation)
            e.info["parsed"] = step_info["parsed"]
        if isinstance(step_info.get("calls"), list):  # the turn's tool calls and their results
            turn = len(e.turn_rewards) - 1
            e.info.setdefault("tool_calls", []).extend({"turn": turn, **c} for c in step_info["calls"]
                                                       if isinstance(c, dict))
        if terminated or truncated or out_of_budget or len(e.turn_rewards) >= self.max_turns:
            reason = ("terminated" if terminated else "env_truncated" if truncated
                      else "max_turns" if len(e.turn_rewards) >= self.max_turns else "episode_budget")
            self._end(e, bool(terminated), bool(truncated) or out_of_budget or not terminated, reason)
            return
        feedback = self.feedback_ids(obs, ids, e.info.get("finish_reason"))
        if self.max_total_tokens and e.response_tokens + len(feedback) >= budget:  # no room to answer it
            self._end(e, False, True, "episode_budget")
            return
        e.segments.append(Segment(feedback, False))
        e.response_tokens += len(feedback) if self.max_total_tokens else 0

    def _end(self, e: Episode, terminated: bool, truncated: bool, reason: str) -> None:
        e.done, e.terminated, e.truncated = True, terminated, truncated
        e.info["end_reason"] = reason
        try:
            e.env.close()
        except Exception as exc:  # closing must not fail the batch either
            log.warning("env %s failed to close: %r", type(e.env).__name__, exc)

    def _fail(self, e: Episode, exc: BaseException) -> None:
        log.debug("env %s raised on task %s: %r", type(e.env).__name__, e.task.id, exc)
        e.info.update(failure_info(exc), failed=True, verified=True)
        e.turn_rewards.append(0.0)
        self._end(e, True, False, "failed")

    def _trajectory(self, e: Episode) -> Trajectory:
        info = dict(e.info, turns=sum(s.is_action for s in e.segments))
        responses = info.get("responses") or [""]
        info["response"] = responses[-1]
        reward = 0.0 if info.get("failed") else float(sum(e.turn_rewards))
        return Trajectory(prompt_ids=list(e.prompt_ids), segments=e.segments, reward=reward, task_id=e.task.id,
                          group_id=e.group_id, turn_rewards=list(e.turn_rewards), terminated=e.terminated,
                          truncated=e.truncated, info=info)
