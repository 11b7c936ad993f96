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

**Context.** With a ``context`` policy (``agentrl.rollout.context``) an episode whose next turn would
not fit in the policy's context ends (``none``, ``end_reason`` ``context_full``), or has its context
rebuilt (``truncate``, ``compact``): each rebuilt context starts a new sample of the episode
(``Trajectory.resets``), ``info["truncations"]``/``info["compactions"]`` count them and
``info["context_max"]`` is the longest context the policy continued. A prompt that leaves no room for
one turn fails its episode. Summaries are actions (``info["summaries"]`` holds their text) but not env
turns, and do not count in the episode's token budget.

**Rewards.** ``turn_rewards`` holds every ``env.step`` reward; the episode's ``reward`` is their
sum (Gymnasium's return). Our multi-turn envs give 0 until the final turn. ``state_keys`` names the
state each turn started from: the env's ``info["state_key"]`` (of ``reset``, then of each ``step``)
or a digest of the observation (step groups of turn-level credit). Every segment carries its turn.

**Batching and failures.** Every episode gets its own env (a deep copy of the executor's env,
sharing its read-only ``tasks`` list). Env steps run concurrently on an ``EnvPool`` (worker
threads; an ``async def step`` on its event loop), each under the pool's deadline, and the turns
batch continuously: the episodes whose env has answered go back to the engine in one ``generate``
call without waiting for the slowest env of their wave, once they are at least as many as those still
stepping (``gather``: one decode costs nearly as much for one sequence as for a batch, so stragglers
are gathered rather than decoded one at a time while the others wait for the engine). An exception inside an env, or
a step past its deadline, fails only that episode: reward 0, ``info["failed"] = True``, the
error in ``info["error"]`` and its traceback in ``info["traceback"]`` (the trainer shows each distinct
error once: ``agentrl.rollout.failures``); so does a step whose info says ``failed`` (an env whose grader
could not run: an infrastructure failure, not a 0). ``info["action_versions"]`` holds the policy version of each
turn's engine (``engine.version``, asynchronous runs), when it has one.

**Seeds.** Each ``run`` draws a base seed from torch's global RNG. Every episode's env copy is reset with a
seed derived from it, the episode's group and its place in the group, and each engine call gives each
episode its own row seed (``SamplingParams.row_seeds``: the same three and how many calls it has made).
So after ``torch.manual_seed`` a run plays the same episodes however its envs' timing batches their turns
(with an engine that honours row seeds: ``HFEngine``'s loop sampler; not vLLM, whose GPU numerics change
with the batch), up to the last bits of a row's logits, which move with the batch's shape.

**The env's record.** The keys of a step's ``info["trajectory_info"]`` (a dict) are copied into the
trajectory's ``info``: an env keeps there what a reader of the episode needs beyond its tokens (a
workspace env: ``commands``, ``outputs``, ``diff``, ``verifier``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from agentrl.env import TextEnv
from agentrl.rollout.context import COMPACT_INSTRUCTION, ContextPolicy, marker_text
from agentrl.rollout.engines.base import Completion, InferenceEngine, SamplingParams, derive_seed, draw_seed
from agentrl.rollout.env_pool import EnvPool, Pending, clone_env, failure_info
from agentrl.rollout.executors.episode import ChatFeedback, EnvFailed, Episode, state_key
from agentrl.rollout.executors.single_turn import encode_prompt
from agentrl.types import ContextReset, Segment, Task, Trajectory

log = logging.getLogger(__name__)


class MultiTurnExecutor:
    """Runs multi-turn episodes: ``n_samples`` per task, grouped by ``group_id``, batched per turn."""

    def __init__(self, env: TextEnv, engine: InferenceEngine, tokenizer: Any, params: SamplingParams,
                 *, n_samples: int = 1, chat_template: bool = False, max_turns: int | None = None,
                 max_total_tokens: int | None = None, pool: EnvPool | None = None,
                 context: ContextPolicy | None = None) -> None:
        self.env, self.engine, self.tokenizer = env, engine, tokenizer
        self.pool = pool or EnvPool(workers=1)
        self.context = context or ContextPolicy(turn_tokens=params.max_new_tokens)
        self.params, self.n_samples, self.chat_template = params, n_samples, chat_template
        self.max_turns = max_turns or int(getattr(env, "max_turns", 1))
        self.max_total_tokens = max_total_tokens
        self.chat: ChatFeedback | None = None
        self._script: Callable[[TextEnv], str] | None = None  # run_scripted's policy while it runs
        self._script_seed: int | None = None  # and the seed its episodes' envs are reset with
        self.keep_observations = False  # True: info["prompt"] (the env's) and info["observations"] (every feedback)
        self.gather = 1.0  # episodes back from their env wait for the engine until they are this many times those stepping
        self.running: list[Episode] = []  # the episodes of the current run (its progress)
        self._base_seed = 0  # the current run's, drawn from torch's global RNG: each episode's turns' row seeds
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
        self._base_seed = draw_seed()
        self.running = episodes = [self._start(task, group_offset + i, j) for i, task in enumerate(tasks)
                                   for j in range(n)]
        ready = [e for e in episodes if not e.done]  # waiting for the engine
        stepping: dict[Pending, tuple[Episode, list[int]]] = {}  # waiting for their env
        while ready or stepping:
            if ready and self._engine_turn(len(ready), len(stepping)):
                batch, ready = ready, []
                ready += self._turn(batch, stepping, params, budget)  # compaction summaries: no env step
            # continuous batching: whatever has answered goes back to the engine, the rest keep stepping
            hurry = ready and self._engine_turn(len(ready), len(stepping))
            done = [p for p in stepping if p.done] if hurry else self.pool.wait_any(list(stepping))
            for p in done:
                e, ids = stepping.pop(p)
                self._observe(e, ids, p, budget)
                if not e.done:
                    ready.append(e)
        return [self._trajectory(e) for e in episodes]

    def progress(self) -> tuple[int, int]:
        """(episodes ended, episodes) of the run in progress (read from another thread: a heartbeat's)."""
        episodes = list(self.running)
        return sum(e.done for e in episodes), len(episodes)

    def _engine_turn(self, ready: int, stepping: int) -> bool:
        """Whether the ``ready`` episodes go to the engine now, with ``stepping`` still waiting for their env:
        once they are at least ``gather`` times as many (a generate call costs nearly as much for one
        sequence as for many on a CPU or a batch engine: stragglers are gathered, not decoded one by one)."""
        return stepping == 0 or ready >= self.gather * stepping

    def _turn(self, batch: list[Episode], stepping: dict[Pending, tuple[Episode, list[int]]],
              params: SamplingParams, budget: int) -> list[Episode]:
        """One engine call for ``batch``: each action goes to its env (into ``stepping``); returns the
        episodes that made a compaction summary instead (they go back to the engine)."""
        contexts = [e.context() for e in batch]
        limits = [self._limit(e, len(c), params, budget) for e, c in zip(batch, contexts)]
        # each episode samples from its own stream (run seed, group, sample, call): its tokens do not depend
        # on which episodes the envs' timing put beside it in this call
        seeds = tuple(derive_seed(self._base_seed, e.group_id, e.sample, e.calls) for e in batch)
        for e in batch:
            e.calls += 1
        completions = self._generate(batch, contexts, replace(params, max_new_tokens=max(limits), row_seeds=seeds))
        version = getattr(self.engine, "version", None)
        summarized = []
        for e, comp, limit in zip(batch, completions, limits):
            if e.done:  # a scripted policy that raised failed its episode
                continue
            if e.summary_for is not None:
                self._compact(e, comp, limit, version)
                summarized += [] if e.done else [e]
                continue
            ids, text = self._act(e, comp, limit, budget, version)
            stepping[self.pool.submit(e.env.step, text)] = (e, ids)
        return summarized

    def run_scripted(self, tasks: list[Task], act: Callable[[TextEnv], str], chunk: int = 256,
                     first_group: int = 0, seed: int | None = None) -> list[Trajectory]:
        """One episode per task whose actions are ``act(env)`` (a scripted policy, e.g. the env's
        ``reference_action``), stitched as :meth:`run` stitches the engine's (the action's tokens and
        the EOS, cut at the turn's budget as a generated turn would be, then the feedback's tokens) under
        the same context policy; a compaction request is answered by the env's ``reference_summary()``
        when it has one, else by ``act``. An ``act`` that raises fails its episode. At most ``chunk``
        episodes are open at once (a warm start's thousands of episodes would otherwise each hold a
        workspace until the last one's first step is done). Group ids count from ``first_group``. ``seed``:
        the env of group id ``g`` is reset with seed ``seed + g`` (a random policy plays the same episodes
        again, however they are chunked); None: seeds drawn as :meth:`run` draws them (module docstring)."""
        self._script, self._script_seed = act, seed
        try:
            out: list[Trajectory] = []
            for i in range(0, len(tasks), chunk):
                out += self.run(tasks[i:i + chunk], group_offset=first_group + i, n_samples=1)
            return out
        finally:
            self._script, self._script_seed = None, None

    def _generate(self, episodes: list[Episode], contexts: list[list[int]], params: SamplingParams
                  ) -> list[Completion]:
        """The next turn for each episode: the engine's, or the scripted policy's (:meth:`run_scripted`)."""
        if self._script is None:
            return self.engine.generate(contexts, params)
        out, eos = [], self.tokenizer.eos_token_id
        for e in episodes:
            summarize = getattr(e.env, "reference_summary", None) if e.summary_for is not None else None
            try:
                text = summarize() if callable(summarize) else self._script(e.env)
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
            except Exception as exc:  # a broken reference policy fails its episode
                self._fail(e, exc)
                ids = []
            out.append(Completion(ids, [0.0] * len(ids), "stop"))
        return out

    def _limit(self, e: Episode, context_len: int, params: SamplingParams, budget: int) -> int:
        """Tokens episode ``e`` may generate now: its turn (or summary) budget within the context."""
        if e.summary_for is not None:
            limit = self.context.summary_tokens
        else:
            limit = min(params.max_new_tokens, budget - e.response_tokens)
        return max(1, min(limit, self.context.max_tokens - context_len)) if self.context.limited else limit

    # ------------------------------------------------------------------ one episode
    def _start(self, task: Task, group_id: int, sample: int = 0) -> Episode:
        env = clone_env(self.env)
        seed = (derive_seed(self._base_seed, group_id, sample) % 2**31 if self._script_seed is None
                else self._script_seed + group_id)
        try:
            obs, info = env.reset(seed=seed, options={"task": task})
            prompt = encode_prompt(self.tokenizer, info["prompt"], self.chat_template)
        except Exception as e:  # a crashing env fails this episode, not the batch
            prompt = encode_prompt(self.tokenizer, task.prompt, self.chat_template)
            ep = Episode(env, task, group_id, prompt, sample)
            self._fail(ep, e)
            return ep
        kept = {"env_server": info["env_server"]} if "env_server" in info else {}
        ep = Episode(env, task, group_id, prompt, sample, info={"responses": [], "finish_reason": None,
                                                         "context_max": len(prompt), **kept},
                     state_keys=[state_key(obs, info)])
        if self.keep_observations:
            ep.info["prompt"] = info["prompt"]
        if not self.context.fits(len(prompt), 0):
            self._fail(ep, ValueError(f"the prompt of {len(prompt)} tokens leaves no room for a turn of "
                                      f"{self.context.turn_tokens} in rollout.context.max_tokens="
                                      f"{self.context.max_tokens}"))
        return ep

    def _act(self, e: Episode, comp: Completion, limit: int, budget: int, version: int | None
             ) -> tuple[list[int], str]:
        """Append one generated turn (and the policy version that made it); return its ids and text."""
        ids, logprobs = list(comp.token_ids[:limit]), list(comp.logprobs[:limit])
        cut = len(comp.token_ids) > limit or comp.finish_reason == "length"
        e.append(Segment(ids, True, logprobs, turn=len(e.turn_log)))
        e.turn_log.append((ids, []))
        if version is not None:
            e.info.setdefault("action_versions", []).append(version)
        e.info["context_max"] = max(e.info["context_max"], len(e.context()))
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
        finish = e.info.get("finish_reason")
        feedback = self.feedback_ids(obs, ids, finish)
        if self.max_total_tokens and e.response_tokens + len(feedback) >= budget:  # no room to answer it
            self._end(e, False, True, "episode_budget")
            return
        turn = len(e.turn_log) - 1
        e.turn_log[-1] = (ids, feedback)
        e.observations.append(str(obs))
        e.state_keys.append(state_key(obs, step_info))
        e.response_tokens += len(feedback) if self.max_total_tokens else 0
        self._continue(e, ids, obs, feedback, finish, turn)

    # ------------------------------------------------------------------ the context policy
    def _continue(self, e: Episode, ids: list[int], obs: str, feedback: list[int], finish: str | None,
                  turn: int) -> None:
        """Append the feedback to turn ``ids``, or apply the context policy when the next turn would not fit."""
        policy, length = self.context, len(e.context())
        if policy.name == "compact":
            request = self.feedback_ids(self._request(obs), ids, finish)
            e.longest_request = max(e.longest_request, len(request))  # the next one may be as long
            if policy.compact_due(length, len(feedback), e.longest_request):
                if not policy.room_for_summary(length, len(request)):
                    self._end(e, False, True, "context_full")
                    return
                e.append(Segment(request, False, turn=turn))
                e.summary_for = obs
                return
        if policy.fits(length, len(feedback)):
            e.append(Segment(feedback, False, turn=turn))
            return
        rebuilt = None
        if policy.name == "truncate":
            marker = lambda n: self.tokenizer(marker_text(n), add_special_tokens=False)["input_ids"]  # noqa: E731
            rebuilt = policy.truncated(e.prompt_ids, e.turn_log, e.observations, self.feedback_ids, marker)
        if rebuilt is None:
            self._end(e, False, True, "context_full")
            return
        e.resets.append(ContextReset("truncate", rebuilt))
        e.info["truncations"] = e.info.get("truncations", 0) + 1

    def _request(self, observation: str) -> str:
        """The observation followed by the compaction instruction (the env's, or the default)."""
        return observation + "\n\n" + str(getattr(self.env, "compaction_instruction", None) or COMPACT_INSTRUCTION)

    def _compact(self, e: Episode, comp: Completion, limit: int, version: int | None) -> None:
        """Take the summary the policy wrote and rebuild the context: prompt, summary, last observation."""
        ids, logprobs = list(comp.token_ids[:limit]), list(comp.logprobs[:limit])
        finish = "length" if len(comp.token_ids) > limit or comp.finish_reason == "length" else comp.finish_reason
        e.append(Segment(ids, True, logprobs, turn=len(e.turn_log)))  # it serves the next turn
        if version is not None:
            e.info.setdefault("action_versions", []).append(version)
        e.info["context_max"] = max(e.info["context_max"], len(e.context()))
        e.info.setdefault("summaries", []).append(self.tokenizer.decode(ids, skip_special_tokens=True))
        rebuilt = e.prompt_ids + ids + self.feedback_ids(e.summary_for, ids, finish)
        e.summary_for = None
        if not self.context.fits(len(rebuilt), 0):
            self._end(e, False, True, "context_full")
            return
        e.resets.append(ContextReset("compact", rebuilt))
        e.info["compactions"] = e.info.get("compactions", 0) + 1

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
        info = dict(e.info, turns=len(e.turn_log))
        if self.keep_observations:
            info["observations"] = list(e.observations)
        responses = info.get("responses") or [""]
        info["response"] = responses[-1]
        reward = 0.0 if info.get("failed") else float(sum(e.turn_rewards))
        return Trajectory(prompt_ids=list(e.prompt_ids), segments=e.segments, reward=reward, task_id=e.task.id,
                          group_id=e.group_id, turn_rewards=list(e.turn_rewards), terminated=e.terminated,
                          truncated=e.truncated, info=info, state_keys=e.state_keys[:len(e.turn_rewards)],
                          resets=e.resets)

