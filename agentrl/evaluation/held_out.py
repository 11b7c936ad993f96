"""Evaluation that would run on training data is said out loud: a dataset env whose held-out split
reads the training rows (an adapter's dataset path without ``{split}``) measures memory, not
generalisation. Training and ``agentrl eval`` both check."""

from __future__ import annotations

from typing import Any

from agentrl.types import Task


def training_overlap(train_env: Any, eval_tasks: list[Task]) -> int:
    """How many of ``eval_tasks`` are also training tasks (same prompt and answer) of a dataset env (its
    ``tasks``); 0 for a procedural env, whose held-out tasks are other draws."""
    dataset = getattr(train_env, "tasks", None)
    if not dataset or not eval_tasks:
        return 0

    def key(t: Task) -> str:
        return repr((t.prompt, t.answer))  # prompts are text or messages built in one order: repr is exact

    seen = {key(t) for t in dataset}
    return sum(key(t) in seen for t in eval_tasks)


def held_out_warning(env_id: str, train_env: Any, eval_tasks: list[Task], eval_kwargs: dict[str, Any]) -> str | None:
    """A loud warning when evaluation would run on training data (None when it does not)."""
    n = training_overlap(train_env, eval_tasks)
    if not n:
        return None
    head = (f"WARNING: {n} of {len(eval_tasks)} held-out tasks of {env_id} (env.eval_kwargs={eval_kwargs}) are "
            f"training tasks: held-out accuracy measures memory, not generalisation. ")
    if env_id.startswith("harbor:"):  # a folder of task directories: one folder per split
        return head + ("Give held-out tasks: a folder per split, env.id: harbor:TASKS/{split} (TASKS/train and "
                       "TASKS/test hold different task directories)")
    return head + ("Give held-out rows, e.g. env.eval_kwargs: {dataset: test.jsonl}, or a dataset path with {split} "
                   "(train.jsonl / test.jsonl)")
