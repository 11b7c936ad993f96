"""Executors for agents from other frameworks.

- :class:`RawFeedbackExecutor`: the multi-turn executor for envs whose feedback is raw text already
  in the model's template (``env.raw_feedback = True``, e.g. OpenRLHF agent files): the feedback is
  tokenized as it is and appended, never wrapped in a chat message or put on lines of its own.
- :class:`BlackBoxExecutor`: episodes of an agent program that calls the policy through the
  OpenAI-compatible endpoint of :mod:`agentrl.rollout.openai_server`; every completion it asks for
  is recorded token-exact and stitched into one trajectory.
"""

from __future__ import annotations

import logging
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentrl.rollout.engines.base import derive_seed, draw_seed
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.rollout.executors.single_turn import encode_prompt
from agentrl.types import Segment, Task, Trajectory

log = logging.getLogger(__name__)


class RawFeedbackExecutor(MultiTurnExecutor):
    """:class:`MultiTurnExecutor` with the env's feedback appended verbatim (see the module docstring)."""

    def feedback_ids(self, observation: str, action_ids: list[int], finish_reason: str | None = "stop") -> list[int]:
        """Token ids of ``observation`` exactly as the env wrote it."""
        return self.tokenizer(observation, add_special_tokens=False)["input_ids"]


class BlackBoxExecutor:
    """Runs an agent program per episode against the policy's OpenAI-compatible endpoint.

    The env provides ``agent_program(base_url, task) -> result`` (the agent's own loop, prompts and
    tools, talking to ``base_url`` with the ``openai`` client), ``agent_reward(result, task) ->
    float`` and ``concurrency`` (agents run at once; their requests are batched). Each episode's
    completions are stitched into one trajectory (see :mod:`agentrl.rollout.openai_server`); an
    agent that raises, or asks for nothing, fails that episode only (reward 0, ``info["failed"]``).
    """

    def __init__(self, env: Any, engine: Any, tokenizer: Any, params: Any, *, n_samples: int = 1,
                 chat_template: bool = False, stepwise: bool = False) -> None:
        self.env, self.engine, self.tokenizer = env, engine, tokenizer
        self.params, self.n_samples, self.chat_template = params, n_samples, chat_template
        self.stepwise = stepwise  # rollout.samples=turn: a rewritten history starts a new sample
        self.server: Any = None

    def prompt_ids(self, task: Task) -> list[int]:
        """The ids of the task's prompt as the env renders it (the agent may send another)."""
        _, info = self.env.reset(options={"task": task})
        return encode_prompt(self.tokenizer, info["prompt"], self.chat_template)

    def _server(self, params: Any) -> Any:
        from agentrl.rollout.openai_server import PolicyServer

        if self.server is None:
            self.server = PolicyServer(self.engine, self.tokenizer, params, chat_template=self.chat_template,
                                       stepwise=self.stepwise).start()
            weakref.finalize(self, self.server.close)  # the endpoint goes with the executor
        self.server.params = params
        return self.server

    def run(self, tasks: list[Task], group_offset: int = 0, n_samples: int | None = None,
            params: Any = None) -> list[Trajectory]:
        """``n`` agent episodes per task, concurrently; groups numbered from ``group_offset``."""
        n = self.n_samples if n_samples is None else n_samples
        server = self._server(params or self.params)
        base = draw_seed()  # each episode's policy samples: its own stream
        jobs = [(task, group_offset + i, derive_seed(base, group_offset + i, j)) for i, task in enumerate(tasks)
                for j in range(n)]
        workers = max(1, int(getattr(self.env, "concurrency", 8)))
        with ThreadPoolExecutor(workers, thread_name_prefix="agentrl-agent") as pool:
            self._futures = [pool.submit(self._episode, server, *job) for job in jobs]
            return [f.result() for f in self._futures]

    def progress(self) -> tuple[int, int]:
        """(episodes ended, episodes) of the run in progress (read from another thread: a heartbeat's)."""
        futures = list(getattr(self, "_futures", []))
        return sum(f.done() for f in futures), len(futures)

    def _episode(self, server: Any, task: Task, group_id: int, seed: int) -> Trajectory:
        eid, base_url = server.new_episode(seed)
        info: dict[str, Any] = {}
        try:
            result = self.env.agent_program(base_url, task)
            reward = float(self.env.agent_reward(result, task))
            if isinstance(result, dict) and isinstance(result.get("trajectory_info"), dict):
                result = dict(result)
                info.update(result.pop("trajectory_info"))  # the env's record of the episode, as the other executors
            info["response"] = str(result)
        except Exception as e:  # an agent that crashes fails its episode, not the batch
            log.warning("agent episode on task %s failed: %r", task.id, e)
            reward = 0.0
            info.update(failed=True, error=f"{type(e).__name__}: {e}")
        ep = server.pop_episode(eid)
        if not ep.completions and not info.get("failed"):
            reward = 0.0
            info.update(failed=True, error="the agent asked the policy for no completion")
        info.update(verified=True, turns=ep.completions, rewritten_history=ep.rewritten,
                    finish_reason=ep.last_finish, end_reason="failed" if info.get("failed") else "terminated")
        prompt = ep.prompt_ids or encode_prompt(self.tokenizer, task.prompt, self.chat_template)
        segments = ep.segments or [Segment([self.tokenizer.eos_token_id], True, [0.0])]
        for r in [segments] + [r.segments for r in ep.resets]:
            for s in r:
                s.turn = 0  # one env reward for the whole agent run
        return Trajectory(prompt_ids=list(prompt), segments=segments, reward=reward, task_id=task.id,
                          group_id=group_id, turn_rewards=[reward], terminated=True,
                          truncated=ep.last_finish == "length", info=info, resets=ep.resets)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
