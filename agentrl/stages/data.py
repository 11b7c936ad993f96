"""Records for the stages before RL: loading, making them from an env, and tokenizing them.

Record forms (JSON objects; the keys are configurable in ``data.*_key``):

- SFT, prompt/response: ``{"prompt": str | messages, "response": str}`` — the loss is on the
  response (plus the EOS the policy must learn to emit).
- SFT, chat: ``{"messages": [{"role", "content"}, ...]}`` — rendered with the chat template; the
  loss is on every assistant message (template tokens of that turn included); a chat longer than
  ``data.max_length`` is dropped (prompt/response records are cut on the right instead).
- Preference: ``{"prompt": str | messages, "chosen": str | messages, "rejected": str | messages,
  "margin": float (optional)}``. A messages-valued ``chosen`` ends with the assistant's message;
  without ``prompt`` the messages before it are the prompt.

Sources: ``env`` (made from the env's tasks: reference answers, and wrong answers that the env
scores below 1), ``.jsonl`` / ``.json`` files, ``.parquet`` (needs ``pyarrow``), or a hub dataset
name (needs ``datasets``; imported only then).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.env import TextEnv, fixed_tasks
from agentrl.rollout.executors import encode_prompt
from agentrl.types import Segment, Task, Trajectory


@dataclass
class PairExample:
    """One tokenized preference pair: shared prompt, chosen and rejected responses (EOS included)."""

    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    margin: float | None = None


# ------------------------------------------------------------------ loading
def load_records(source: str, split: str = "train") -> list[dict[str, Any]]:
    """Records from a .jsonl/.json/.parquet file or a hub dataset name."""
    path = Path(source)
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError(f"{source}: expected a JSON list of records")
        return data
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ImportError(f"reading {source} needs pyarrow (pip install pyarrow)") from e
        return pq.read_table(path).to_pylist()
    if path.exists():
        raise ValueError(f"{source}: unknown data format (use .jsonl, .json or .parquet)")
    try:
        import datasets
    except ImportError as e:
        raise ImportError(f"{source!r} is not a file; loading it as a hub dataset needs `datasets`") from e
    return [dict(r) for r in datasets.load_dataset(source, split=split)]


def split_records(records: list[dict[str, Any]], eval_fraction: float, seed: int
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Shuffle with ``seed`` and hold out ``eval_fraction`` (at least one record when > 0)."""
    order = np.random.default_rng(seed).permutation(len(records))
    n_eval = int(round(len(records) * eval_fraction)) if eval_fraction > 0 else 0
    n_eval = max(n_eval, 1) if eval_fraction > 0 and len(records) > 1 else n_eval
    held = [records[i] for i in order[:n_eval]]
    return [records[i] for i in order[n_eval:]], held


# ------------------------------------------------------------------ records made from an env
def env_sft_records(env: TextEnv, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` distinct tasks with the env's reference answers as responses."""
    return [{"prompt": t.prompt, "response": env.reference_answer(t)} for t in fixed_tasks(env, n, seed)]


def wrong_answer(env: TextEnv, task: Task, rng: np.random.Generator, pool: list[str], mode: str = "near") -> str:
    """A response the env scores below 1: a nearby number (``near``) or another task's answer."""
    gold = env.reference_answer(task)
    for _ in range(100):
        if mode == "near" and gold.lstrip("-").isdigit():
            delta = int(rng.integers(1, 11)) * (1 if rng.random() < 0.5 else -1)
            cand = str(int(gold) + delta)
        else:
            cand = pool[int(rng.integers(len(pool)))]
        if cand != gold and env.score(cand, task).score < 1.0:
            return cand
    raise RuntimeError(f"no wrong answer found for task {task.id!r}")


def env_preference_records(env: TextEnv, n: int, seed: int, mode: str = "near") -> list[dict[str, Any]]:
    """``n`` pairs: the reference answer (chosen) against a wrong answer (rejected)."""
    tasks = fixed_tasks(env, n, seed)
    pool = [env.reference_answer(t) for t in tasks]
    rng = np.random.default_rng(seed)
    return [{"prompt": t.prompt, "chosen": env.reference_answer(t), "rejected": wrong_answer(env, t, rng, pool, mode)}
            for t in tasks]


# ------------------------------------------------------------------ tokenizing
def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _render(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def encode_chat(tokenizer: Any, messages: list[dict[str, str]]) -> Trajectory:
    """A whole chat, token-exact: assistant messages are loss segments, everything else is not.

    Renders growing prefixes with the chat template and checks each is a prefix of the next.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat records need a tokenizer with a chat template")
    segments, done = [], []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        head = _render(tokenizer, messages[:i], True)
        full = _render(tokenizer, messages[:i + 1], False)
        if head[:len(done)] != done or full[:len(head)] != head:
            raise ValueError("the chat template does not render prefixes stably; cannot mask assistant turns")
        segments += [Segment(head[len(done):], False), Segment(full[len(head):], True)]
        done = full
    if not any(s.is_action for s in segments):
        raise ValueError("a chat record has no assistant message")
    return Trajectory(prompt_ids=segments[0].token_ids, segments=segments[1:], reward=0.0, task_id="", group_id=0)


def _prompt_and_response(prompt: Any, response: Any) -> tuple[Any, str]:
    if isinstance(response, list):
        if not response or response[-1].get("role") != "assistant":
            raise ValueError("a messages-valued response must end with an assistant message")
        return (response[:-1] if prompt is None else prompt), response[-1]["content"]
    if prompt is None:
        raise ValueError("a record has no prompt")
    return prompt, str(response)


def _truncate(prompt: list[int], response: list[int], max_length: int) -> list[int]:
    return response[:max(0, max_length - len(prompt))]


def encode_sft(record: dict[str, Any], tokenizer: Any, data: Any) -> Trajectory | None:
    """An SFT record as a Trajectory (loss segments = response); None when truncated to nothing."""
    if data.messages_key in record:
        traj = encode_chat(tokenizer, record[data.messages_key])  # a chat is kept whole or dropped
        return traj if len(traj.prompt_ids) + len(traj.response_ids) <= data.max_length else None
    prompt, response = _prompt_and_response(record.get(data.prompt_key), record[data.response_key])
    p = encode_prompt(tokenizer, prompt, data.chat_template)
    r = _truncate(p, _ids(tokenizer, response) + [tokenizer.eos_token_id], data.max_length)
    return Trajectory(prompt_ids=p, segments=[Segment(r, True)], reward=0.0, task_id="", group_id=0) if r else None


def encode_pair(record: dict[str, Any], tokenizer: Any, data: Any) -> PairExample | None:
    """A preference record tokenized; None when a response is truncated to nothing."""
    prompt, chosen = _prompt_and_response(record.get(data.prompt_key), record[data.chosen_key])
    _, rejected = _prompt_and_response(prompt, record[data.rejected_key])
    p = encode_prompt(tokenizer, prompt, data.chat_template)
    eos = [tokenizer.eos_token_id]
    c = _truncate(p, _ids(tokenizer, chosen) + eos, data.max_length)
    r = _truncate(p, _ids(tokenizer, rejected) + eos, data.max_length)
    margin = record.get(data.margin_key)
    return PairExample(p, c, r, None if margin is None else float(margin)) if c and r else None


def pair_trajectories(pairs: list[PairExample]) -> list[Trajectory]:
    """2n trajectories: the n chosen first, then the n rejected (loss segments = responses)."""
    return [Trajectory(prompt_ids=p.prompt_ids, segments=[Segment(ids, True)], reward=0.0, task_id="", group_id=i)
            for ids_of in (lambda p: p.chosen_ids, lambda p: p.rejected_ids)
            for i, p in enumerate(pairs) for ids in [ids_of(p)]]


# ------------------------------------------------------------------ a stage's train/eval records
def stage_records(cfg: Any, kind: str, env: TextEnv | None, dev_env: TextEnv | None,
                  wrong_answers: str = "near") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Training and held-out records of a stage config (``kind``: sft | pairs).

    ``data.train: env`` makes them: training records from the training env, held-out ones from the
    dev env (``env.dev_kwargs``; a different split), so selection never sees the test split.
    """
    d = cfg.data
    if d.train == "env":
        if env is None or dev_env is None:
            raise ValueError("data.train: env needs the env section")
        if kind == "sft":
            return env_sft_records(env, d.examples, d.seed + 1), env_sft_records(dev_env, d.eval_examples, d.seed + 2)
        return (env_preference_records(env, d.examples, d.seed + 1, wrong_answers),
                env_preference_records(dev_env, d.eval_examples, d.seed + 2, wrong_answers))
    train = load_records(d.train, d.hub_split)
    if d.eval:
        return train, load_records(d.eval, d.hub_split)
    return split_records(train, d.eval_fraction, d.seed)
