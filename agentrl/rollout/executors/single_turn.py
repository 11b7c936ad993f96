"""``SingleTurnExecutor``: one prompt, ``n`` sampled responses, one ``env.step`` each.

Token-exact: the prompt ids and the engine's generated ids (with their log-probs) go into the
``Trajectory`` unchanged; the env sees the decoded text. The ``env.step`` calls of a batch run
concurrently on an ``EnvPool`` (each worker thread steps its own copy of the env; an ``async def
step`` runs on the pool's event loop), each under the pool's deadline. An exception inside the env,
or a step past its deadline, marks that episode failed (reward 0, ``info["failed"]``, the error in
``info["error"]``, its traceback in ``info["traceback"]``) and the batch goes on; so does a step whose
info says ``failed``. As in the multi-turn executor, the keys of a step's ``info["trajectory_info"]`` go
into the trajectory's info and its ``info["calls"]`` become ``info["tool_calls"]``. A ``step`` that
returns ``terminated=False`` (feedback for a next turn) ends the episode anyway, as ``max_turns``
(truncated), with a warning once per env class: the env forgot ``max_turns > 1``. ``info["action_versions"]``
holds the policy version of the engine that generated the response (``engine.version``, asynchronous
runs), when it has one. Each sample draws from its own random stream (``SamplingParams.row_seeds``, from a base
seed drawn from torch's RNG, its group and its place in the group): under ``torch.manual_seed`` a sample's
tokens do not depend on how the engine batches the rows, and two policies evaluated under one seed are
compared on the same random numbers.
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
from dataclasses import replace
from typing import Any

from agentrl.env import TextEnv
from agentrl.rollout.engines.base import Completion, InferenceEngine, SamplingParams, derive_seed, draw_seed
from agentrl.rollout.env_pool import EnvPool, Pending, clone_env, failure_info
from agentrl.types import Segment, Task, Trajectory

log = logging.getLogger(__name__)
_warned_turns: set[str] = set()  # env classes already warned about a forgotten max_turns


def warn_forgotten_max_turns(env: Any, observation: Any) -> None:
    """Once per env class: its single-turn episode got ``terminated=False`` (and feedback) from ``step``."""
    name = type(env).__name__
    if name in _warned_turns:
        return
    _warned_turns.add(name)
    shown = str(observation)[:60]
    print(f"warning: env {name}: step returned terminated=False" + (f" with feedback {shown!r}" if shown else "")
          + f", but {name}.max_turns is {getattr(env, 'max_turns', 1)}, so every episode ends after one turn (end "
          f"reason max_turns); set max_turns > 1 on the class for a multi-turn env", file=sys.stderr, flush=True)


def encode_prompt(tokenizer: Any, prompt: str | list[dict[str, str]], chat_template: bool) -> list[int]:
    """Token ids of a prompt: chat messages through the tokenizer's chat template when asked for."""
    if isinstance(prompt, str) and not chat_template:
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    if chat_template and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # transformers 5: a BatchEncoding
    text = "\n".join(m["content"] for m in messages)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class _Serialized:
    """``reset`` + ``step`` of a shared env under one lock (for envs ``clone_env`` cannot copy): the
    lock is taken at ``reset`` and released after the ``step`` that follows on the same thread."""

    def __init__(self, env: TextEnv, lock: threading.Lock) -> None:
        self.env, self.lock = env, lock

    def reset(self, **kw: Any) -> Any:
        self.lock.acquire()
        try:
            return self.env.reset(**kw)
        except BaseException:
            self.lock.release()
            raise

    def step(self, action: str) -> Any:
        try:
            return self.env.step(action)
        finally:
            self.lock.release()


class SingleTurnExecutor:
    """Runs single-turn episodes: ``n_samples`` per task, grouped by ``group_id``."""

    def __init__(self, env: TextEnv, engine: InferenceEngine, tokenizer: Any, params: SamplingParams,
                 *, n_samples: int = 1, chat_template: bool = False, pool: EnvPool | None = None) -> None:
        self.env, self.engine, self.tokenizer = env, engine, tokenizer
        self.params, self.n_samples, self.chat_template = params, n_samples, chat_template
        self.eos_id = tokenizer.eos_token_id
        self.pool = pool or EnvPool(workers=1)
        self._local = threading.local()  # each pool worker steps its own copy of the env
        self._shared_lock = threading.Lock()
        self.keep_observations = False  # True: each trajectory's info["prompt"] holds the env's prompt (the doctor)
        self._prompts: dict[str, Any] = {}

    def prompt_ids(self, task: Task) -> list[int]:
        """The token ids the policy sees for ``task`` (the env's rendering of it)."""
        _, info = self.env.reset(options={"task": task})
        if self.keep_observations:
            self._prompts[task.id] = info["prompt"]
        return encode_prompt(self.tokenizer, info["prompt"], self.chat_template)

    def run(self, tasks: list[Task], group_offset: int = 0, n_samples: int | None = None,
            params: SamplingParams | None = None) -> list[Trajectory]:
        """Sample ``n`` responses per task, score each with ``env.step``; groups numbered from offset."""
        n = self.n_samples if n_samples is None else n_samples
        self._prompts.clear()
        prompts = [self.prompt_ids(t) for t in tasks]
        flat = [p for p in prompts for _ in range(n)]
        base = draw_seed()  # each sample its own stream: (run, group, sample)
        seeds = tuple(derive_seed(base, group_offset + k // n, k % n) for k in range(len(flat)))
        completions = self.engine.generate(flat, replace(params or self.params, row_seeds=seeds))
        version = getattr(self.engine, "version", None)
        texts = self.decode_batch([c.token_ids for c in completions])
        score = self._score_async if inspect.iscoroutinefunction(self.env.step) else self._score
        steps = self.pool.map(score, [(tasks[k // n], text) for k, text in enumerate(texts)])
        out = []
        for k, (prompt, comp, text, step) in enumerate(zip(flat, completions, texts, steps)):
            task = tasks[k // n]
            out.append(self._episode(task, prompt, comp, group_offset + k // n, text, step))
            if version is not None:
                out[-1].info["action_versions"] = [version]
        return out

    def _score(self, task: Task, text: str) -> tuple:
        """``env.reset(task)`` then ``env.step(text)`` on this thread's env (the executor's own inline)."""
        env = self.env
        if not self.pool.inline:
            env = getattr(self._local, "env", None)
            if env is None:
                try:
                    env = self._local.env = clone_env(self.env)
                except Exception as e:  # an env that cannot be copied steps alone, one call at a time
                    log.warning("env %s cannot be copied (%r): its steps run one at a time", type(self.env).__name__, e)
                    env = self._local.env = _Serialized(self.env, self._shared_lock)
        env.reset(options={"task": task})
        return env.step(text)

    async def _score_async(self, task: Task, text: str) -> tuple:
        """``_score`` for an env whose ``step`` is ``async def``: a fresh copy per call (one event loop)."""
        env = clone_env(self.env)
        env.reset(options={"task": task})
        return await env.step(text)

    def decode(self, token_ids: list[int]) -> str:
        """Response text for the env: special tokens (the EOS) dropped."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def decode_batch(self, token_ids: list[list[int]]) -> list[str]:
        """``decode`` of many responses in one tokenizer call (cheaper than one call each)."""
        return self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)

    def _episode(self, task: Task, prompt: list[int], comp: Completion, group_id: int,
                 text: str | None = None, step: Pending | None = None) -> Trajectory:
        text = self.decode(comp.token_ids) if text is None else text
        info: dict[str, Any] = {"finish_reason": comp.finish_reason, "response": text}
        try:
            obs, reward, terminated, truncated, step_info = self._score(task, text) if step is None else step.result()
            info.update(verified=step_info.get("verified", True),
                        reward_components=step_info.get("reward_components", {}))
            if "parsed" in step_info:  # the env's parsed final answer (majority voting in evaluation)
                info["parsed"] = step_info["parsed"]
            info.update(step_info.get("trajectory_info") or {})  # the env's record of the episode
            if isinstance(step_info.get("calls"), list):  # its tool calls and their results
                info["tool_calls"] = [{"turn": 0, **c} for c in step_info["calls"] if isinstance(c, dict)]
            if step_info.get("failed"):  # the env could not score it (its grader failed): not a 0
                reward = 0.0
                info.update(failed=True, error=step_info.get("error") or "the env marked the episode failed")
        except Exception as e:  # a crashing env fails this episode, not the batch
            log.debug("env %s raised on task %s: %r", type(self.env).__name__, task.id, e)
            reward, terminated, truncated = 0.0, True, False
            info.update(failure_info(e), verified=True, failed=True)
        out_of_turns = not (terminated or truncated)  # the env wanted another turn: max_turns is 1
        if out_of_turns:
            warn_forgotten_max_turns(self.env, obs)
        if self.keep_observations:
            info["prompt"] = self._prompts.get(task.id)
        info["turns"], info["end_reason"] = 1, ("failed" if info.get("failed") else "turn_budget"
                                                if comp.finish_reason == "length" else
                                                "env_truncated" if truncated else
                                                "max_turns" if out_of_turns else "terminated")
        return Trajectory(prompt_ids=list(prompt), segments=[Segment(comp.token_ids, True, comp.logprobs)],
                          reward=float(reward), task_id=task.id, group_id=group_id, turn_rewards=[float(reward)],
                          terminated=bool(terminated),
                          truncated=bool(truncated) or out_of_turns or comp.finish_reason == "length",
                          info=info)
