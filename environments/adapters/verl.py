"""verl-style datasets as environments: ``env.id: verl:path/to/train.parquet``.

Each row is a verl RL record: ``prompt`` (chat messages), ``reward_model.ground_truth`` (the
task's answer), ``data_source`` and ``extra_info`` (kept in the task's metadata, so a verl
``compute_score`` given as ``reward.fn: FILE.py:compute_score`` receives them). Without
``reward.fn`` the answer is checked by agentrl's math verifier (``reward=NAME`` picks another
registered reward). ``{split}`` in the path is replaced by the split name (held-out data: ``verl:
data/{split}.parquet`` evaluates on ``data/test.parquet``; a path without it evaluates on the training
rows, with a warning); parquet needs pyarrow, JSONL works too.
"""

from __future__ import annotations

from typing import Any

from agentrl.env import EnvError, construct
from agentrl.types import RewardResult, Task
from environments.sources import DatasetEnv, load_records, reward_by_name


def row_task(i: int, row: dict[str, Any], where: str) -> Task:
    """The task of verl record ``row`` (number ``i`` of file ``where``)."""
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not all(isinstance(m, dict) and "content" in m for m in prompt):
        raise EnvError(f"{where}, row {i}: 'prompt' must be a list of chat messages, got {type(prompt).__name__}")
    rm = row.get("reward_model") or {}
    if "ground_truth" not in rm:
        raise EnvError(f"{where}, row {i}: no reward_model.ground_truth")
    meta = {"data_source": row.get("data_source", ""), "extra_info": row.get("extra_info") or {},
            "ability": row.get("ability", "")}
    index = (row.get("extra_info") or {}).get("index", i)
    return Task(id=f"verl-{index}", prompt=[{"role": str(m.get("role", "user")), "content": str(m["content"])}
                                            for m in prompt], answer=rm["ground_truth"], metadata=meta)


class VerlDatasetEnv(DatasetEnv):
    """A verl parquet/JSONL dataset; scored by ``reward`` (default: the math verifier) or ``reward.fn``."""

    def __init__(self, path: str, split: str = "train", reward: str = "math", limit: int | None = None,
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        rows = load_records(path, split)
        self.set_tasks([row_task(i, r, path) for i, r in enumerate(rows)], limit)
        self.reward_name = reward
        self.reward_fn = reward_by_name(reward, "verl")

    def score(self, action: str, task: Task) -> RewardResult:
        return self.reward_fn(action, task)


def make_env(rest: str, **kwargs: Any) -> VerlDatasetEnv:
    """``verl:PATH`` (parquet or JSONL of verl records)."""
    return construct(VerlDatasetEnv, f"verl:{rest}", rest, **kwargs)
