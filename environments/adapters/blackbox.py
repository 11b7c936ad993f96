"""Black-box agents as environments: ``env.id: agent:path/to/agent.py:FUNCTION``.

The agent is a program written against the ``openai`` client, with its own loop, prompts and
tools: ``FUNCTION(base_url, task) -> result``, where ``task`` is a dict (``id``, ``prompt``,
``answer``, ``metadata``) and ``base_url`` the policy's OpenAI-compatible endpoint for this episode
(``openai.OpenAI(base_url=base_url, api_key="agentrl")``). agentrl's black-box executor records
every completion token-exact and stitches them into one trajectory, the agent's own turns masked
as feedback. The reward is ``reward(str(result), task)``: any reward name, ``module:function`` or
``FILE.py:FUNCTION`` (ours, or an OpenRLHF / verl / TRL reward function; default ``math``).

Tasks come from ``dataset`` (JSONL or parquet), one per row: the ``prompt_key`` field (default
``prompt``) is ``task["prompt"]``, the ``label_key`` field (default ``label``) ``task["answer"]``, every
other field ``task["metadata"]``; ``task["id"]`` is ``agent-<row>``. Held-out data: ``{split}`` in the
path becomes the split, or ``env.eval_kwargs: {dataset: ...}``; evaluation on the training rows is
warned about. ``concurrency`` agents run at once and share the endpoint.
"""

from __future__ import annotations

from typing import Any

from agentrl.env import EnvError, construct
from agentrl.types import RewardResult, Task
from environments.sources import DatasetEnv, load_records, load_user_object, reward_by_name


class BlackBoxAgentEnv(DatasetEnv):
    """Tasks for an agent program; ``agent_program`` and ``agent_reward`` are what the executor calls."""

    def __init__(self, agent: str, dataset: str, reward: str = "math", prompt_key: str = "prompt",
                 label_key: str = "label", concurrency: int = 8, split: str = "train", limit: int | None = None,
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self.agent_spec, self.reward_spec, self.concurrency = agent, reward, concurrency
        self.agent_fn = load_user_object(agent, "agent")
        if not callable(self.agent_fn):
            raise EnvError(f"agent:{agent}: {agent.rpartition(':')[2]!r} is not a function")
        self.reward_fn = reward_by_name(reward, "agent")
        rows = load_records(dataset, split)
        missing = [k for k in (prompt_key, label_key) if rows and k not in rows[0]]
        if missing:
            raise EnvError(f"{dataset}: rows have no field {missing[0]!r}; set env.kwargs.prompt_key / label_key")
        self.set_tasks([Task(id=f"agent-{i}", prompt=r[prompt_key], answer=r.get(label_key),
                             metadata={k: v for k, v in r.items() if k not in (prompt_key, label_key)})
                        for i, r in enumerate(rows)], limit)

    def agent_program(self, base_url: str, task: Task) -> Any:
        """Run the agent on ``task`` against ``base_url``; its result."""
        return self.agent_fn(base_url, task.to_dict())

    def agent_reward(self, result: Any, task: Task) -> float:
        """The reward of the agent's result."""
        return float(self.reward_fn("" if result is None else str(result), task).score)

    def score(self, action: str, task: Task) -> RewardResult:
        return self.reward_fn(action, task)


def make_env(rest: str, **kwargs: Any) -> BlackBoxAgentEnv:
    """``agent:FILE.py:FUNCTION`` (or ``agent:module:function``) with a ``dataset`` kwarg."""
    if "dataset" not in kwargs:
        raise EnvError("agent env needs env.kwargs.dataset: a JSONL or parquet file of tasks")
    return construct(BlackBoxAgentEnv, f"agent:{rest}", rest, **kwargs)
