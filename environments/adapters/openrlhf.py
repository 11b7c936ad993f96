"""OpenRLHF agent files as environments: ``env.id: openrlhf:path/to/agent_func.py``.

The file is used unchanged, as OpenRLHF's ``--train.agent_func_path`` takes it: it defines
``AgentExecutor``, a ``MultiTurnAgentExecutor`` over an ``AgentInstanceBase`` subclass (or just
that subclass). Each episode gets a fresh instance; ``await reset({"observation": prompt, "label":
label})`` gives the first observation, then every turn ``await step(states)`` with ``states`` =
``{"observation_text"`` (the whole transcript so far), ``"action_text"``, ``"label"``,
``"sampling_params": None}`` returns ``{"rewards", "scores", "environment_feedback", "done", ...}``.

- Rewards may be tensors or floats; the episode's reward is their sum over turns (as OpenRLHF).
- ``environment_feedback`` is raw text already in the model's template (``"\\n\\nHuman: ..."``): it
  is appended token for token as it is (``raw_feedback``), never wrapped in a chat message.
- ``scores`` and numeric ``extra_logs`` become reward components.
- A custom ``AgentExecutor.execute`` is out of scope (agentrl runs the episode loop, token-exact):
  such a file is refused with a clear error.

Prompts and labels come from ``dataset`` (JSONL or parquet; ``{split}`` in the path is the split, so
``data/{split}.jsonl`` evaluates on ``data/test.jsonl``; without it give ``env.eval_kwargs: {dataset:
...}``, or evaluation runs on the training rows, with a warning) with fields ``prompt_key`` /
``label_key`` (OpenRLHF's ``--data.input_key`` / ``--data.label_key``).
``openrlhf.utils.agent`` resolves to :mod:`.openrlhf_shim` when OpenRLHF is not installed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Coroutine
from typing import Any

from agentrl.env import EnvError, construct
from agentrl.types import Task
from environments.adapters.openrlhf_shim import install as install_shim
from environments.sources import DatasetEnv, load_records
from rewards.foreign import load_file


def run_coroutine(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` to completion from sync code (in a helper thread if a loop already runs here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def as_float(value: Any) -> float:
    """A reward as a float: tensors (``.item()``), numbers and 1-element lists."""
    if hasattr(value, "item"):
        return float(value.item())
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return as_float(value[0])
    return float(value)


def agent_instance_class(path: str) -> type:
    """The ``AgentInstanceBase`` subclass of the agent file at ``path`` (see the module docstring)."""
    install_shim()
    from openrlhf.utils import agent as base  # the real package, or the shim

    module = load_file(path)
    executor_cls = getattr(module, "AgentExecutor", None)
    if executor_cls is not None:
        if getattr(executor_cls, "execute", None) is not getattr(base.MultiTurnAgentExecutor, "execute", None):
            raise EnvError(f"{path}: AgentExecutor overrides execute(); agentrl runs the episode loop itself, "
                             "so a custom execute is not supported: put the logic in AgentInstance.reset/step")
        return executor_cls().agent_instance_cls
    found = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, base.AgentInstanceBase)
             and v is not base.AgentInstanceBase and v.__module__ == module.__name__]
    if len(found) != 1:
        raise EnvError(f"{path}: define AgentExecutor (a MultiTurnAgentExecutor) or exactly one "
                         f"AgentInstanceBase subclass; found {len(found)}")
    return found[0]


def prompt_text(prompt: Any) -> str:
    """A dataset prompt as the text OpenRLHF hands the agent (chat messages: their contents, joined)."""
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in prompt)
    return str(prompt)


def new_instance(cls: type) -> Any:
    """``cls()``; an ``async def __init__`` (as in OpenRLHF's own example) is awaited."""
    if inspect.iscoroutinefunction(cls.__init__):
        obj = cls.__new__(cls)
        run_coroutine(cls.__init__(obj))
        return obj
    return cls()


class OpenRLHFAgentEnv(DatasetEnv):
    """An OpenRLHF agent file over a JSONL/parquet prompt file; multi-turn, raw-text feedback."""

    raw_feedback = True
    feedback_role = "user"

    def __init__(self, agent_file: str, dataset: str, prompt_key: str = "prompt", label_key: str = "label",
                 max_turns: int = 8, split: str = "train", limit: int | None = None,
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self.agent_cls = agent_instance_class(agent_file)
        self.max_turns = max_turns
        rows = load_records(dataset, split)
        missing = [k for k in (prompt_key, label_key) if rows and k not in rows[0]]
        if missing:
            raise EnvError(f"{dataset}: rows have no field {missing[0]!r} (fields: {', '.join(rows[0])}); "
                             "set env.kwargs.prompt_key / label_key")
        self.set_tasks([Task(id=f"openrlhf-{i}", prompt=prompt_text(r[prompt_key]), answer=r.get(label_key))
                        for i, r in enumerate(rows)], limit)
        self.agent: Any = None
        self.transcript = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        _, info = super().reset(seed=seed, options=options)
        self.agent = new_instance(self.agent_cls)
        out = run_coroutine(self.agent.reset({"observation": self.task.prompt, "label": self.task.answer}))
        self.transcript = self._last_obs = str(out["observation"])
        return self.transcript, {**info, "prompt": self.transcript}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.agent is None:
            raise RuntimeError("call reset() before step()")
        states = {"observation_text": self.transcript, "action_text": action, "label": self.task.answer,
                  "sampling_params": None}
        out = run_coroutine(self.agent.step(states))
        feedback = str(out.get("environment_feedback") or "")
        reward = as_float(out["rewards"])
        parts = {"scores": as_float(out["scores"])} if out.get("scores") is not None else {}
        for key, value in (out.get("extra_logs") or {}).items():
            try:
                parts[str(key)] = as_float(value)
            except (TypeError, ValueError):
                pass
        self.transcript += action + feedback
        self._last_obs = feedback
        done = bool(out.get("done"))
        return feedback, reward, done, False, {"reward_components": parts, "verified": True}


def make_env(rest: str, **kwargs: Any) -> OpenRLHFAgentEnv:
    """``openrlhf:FILE.py`` with env kwargs (``dataset``, ``prompt_key``, ``label_key``, ...)."""
    if not rest.endswith(".py"):
        raise EnvError(f"openrlhf:{rest}: expected openrlhf:path/to/agent_func.py")
    if "dataset" not in kwargs:
        raise EnvError("openrlhf env needs env.kwargs.dataset: a JSONL or parquet file of prompts and labels")
    return construct(OpenRLHFAgentEnv, f"openrlhf:{rest}", rest, **kwargs)
