"""SkyRL-gym environments as agentrl environments: ``env.id: skyrl:module:Class`` or
``skyrl:path/to/env.py:Class``.

The class is a SkyRL-gym ``BaseTextEnv`` used unchanged: for every episode it is built as
``Class(env_config, extras)``, where ``extras`` is the dataset row (SkyRL's dataset format:
``prompt`` chat messages, ``reward_spec: {"ground_truth": ...}``, any other fields), then
``init(prompt)`` gives the first prompt and every ``step(action)`` returns ``{"observations",
"reward", "done", "metadata"}``. Multi-turn: the observations (chat messages) of a step that is
not done are the next turn's feedback (their contents joined; the role of the first is the
feedback role). The episode's reward is the sum of the step rewards. ``env_config`` comes from
``env.kwargs.env_config``; rows from ``env.kwargs.dataset`` (JSONL or parquet). Held-out data:
``{split}`` in the dataset path becomes the split (``env.eval_kwargs`` sets ``split: test``), or give
``env.eval_kwargs: {dataset: test.jsonl}``; a path without ``{split}`` reads the training rows for
evaluation too, and the run says so in a warning. Needs the optional extra ``skyrl-gym``.
"""

from __future__ import annotations

from typing import Any

from agentrl.env import EnvError, construct
from agentrl.types import Task
from environments.sources import DatasetEnv, load_records, load_user_object


class SkyRLEnv(DatasetEnv):
    """A SkyRL-gym ``BaseTextEnv`` subclass over a dataset of SkyRL rows."""

    feedback_role = "user"

    def __init__(self, env_class: str, dataset: str, env_config: dict[str, Any] | None = None,
                 max_turns: int = 1, split: str = "train", limit: int | None = None,
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self.env_cls = load_user_object(env_class, "skyrl")
        self.env_config = dict(env_config or {})
        self.max_turns = max_turns
        rows = load_records(dataset, split)
        tasks = []
        for i, row in enumerate(rows):
            prompt = row.get("prompt")
            if isinstance(prompt, str):
                prompt = [{"role": "user", "content": prompt}]
            answer = (row.get("reward_spec") or {}).get("ground_truth")
            tasks.append(Task(id=f"skyrl-{i}", prompt=prompt, answer=answer, metadata={"row": row}))
        self.set_tasks(tasks, limit)
        self.skyrl_env: Any = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        _, info = super().reset(seed=seed, options=options)
        row = self.task.metadata["row"]
        self.skyrl_env = self.env_cls(self.env_config, {k: v for k, v in row.items() if k != "prompt"})
        prompt, _ = self.skyrl_env.init([dict(m) for m in self.task.prompt])
        self._last_obs = "\n".join(m["content"] for m in prompt)
        return self._last_obs, {**info, "prompt": prompt}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.skyrl_env is None:
            raise RuntimeError("call reset() before step()")
        out = self.skyrl_env.step(action)
        messages = out.get("observations") or []
        obs = "\n".join(str(m.get("content", "")) for m in messages)
        if messages:
            self.feedback_role = str(messages[0].get("role", "user"))
        self._last_obs = obs
        meta = out.get("metadata") or {}
        parts = {k: float(v) for k, v in meta.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return obs, float(out["reward"]), bool(out["done"]), False, {"reward_components": parts, "verified": True}

    def close(self) -> None:
        if self.skyrl_env is not None:
            self.skyrl_env.close()
            self.skyrl_env = None


def make_env(rest: str, **kwargs: Any) -> SkyRLEnv:
    """``skyrl:module:Class`` or ``skyrl:FILE.py:Class`` with ``dataset`` (and ``env_config``) kwargs."""
    if "dataset" not in kwargs:
        raise EnvError("skyrl env needs env.kwargs.dataset: a JSONL or parquet file of SkyRL rows")
    return construct(SkyRLEnv, f"skyrl:{rest}", rest, **kwargs)
