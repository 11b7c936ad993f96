"""Math benchmark environments: ``agentrl/GSM8K-v0``, ``MATH500-v0``, ``AIME24-v0``, ``AMC23-v0``.

Single turn: the prompt is chat messages (an optional system message, then the question formatted
by ``template``), so ``rollout.chat_template: true`` renders it with the tokenizer's chat template;
without it the contents are joined as plain text. The reward is :func:`rewards.math.score` (the
final answer, ``\\boxed{}`` first, against the gold answer; hedged answers score 0).

Data: by default the files shipped in ``environments/data/`` (they work offline). Splits:

- GSM8K: ``train`` (7,473) and ``test`` (1,319), the official ones;
- MATH500, AIME24, AMC23: ``test`` only. They are evaluation benchmarks; asking for ``train``
  raises an error that says so (train on GSM8K, or on your own data with ``dataset=``).

``dataset=`` reads other data instead: a local ``.jsonl``/``.json``/``.parquet`` path (``{split}``
in the path is replaced by the split) or a Hugging Face hub name (needs ``datasets``; ``subset``
is its config name). ``question_key``/``answer_key`` name the fields; an answer written GSM8K-style
(a solution ending ``#### N``) is reduced to ``N``. ``limit`` keeps the first N problems.
"""

from __future__ import annotations

from typing import Any

from agentrl.types import Message, RewardResult, Task
from environments.sources import DatasetEnv, check_split, load_records, read_records, shipped
from rewards import math as math_reward

DEFAULT_TEMPLATE = "{question}\n\nLet's think step by step and put your final answer within \\boxed{}."


def clean_answer(value: Any) -> str:
    """A gold answer as text: ``27.0`` -> ``27``; a GSM8K solution ``... #### 1,234`` -> ``1234``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value).strip()
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip().replace(",", "")
    return text


def chat_prompt(text: str, system_prompt: str | None) -> list[Message]:
    """``[system?, user]`` messages for one question."""
    head = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return head + [{"role": "user", "content": text}]


class MathDatasetEnv(DatasetEnv):
    """Math word problems from a dataset, scored by the math verifier.

    Subclasses set ``name`` (task id prefix), ``files`` (split -> shipped file) and the default
    record keys.
    """

    name = "math"
    files: dict[str, str] = {}
    question_key = "problem"
    answer_key = "answer"
    id_key: str | None = None

    def __init__(self, split: str = "test", dataset: str | None = None, subset: str | None = None,
                 template: str = DEFAULT_TEMPLATE, system_prompt: str | None = None,
                 question_key: str | None = None, answer_key: str | None = None, limit: int | None = None,
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if "{question}" not in template:
            raise ValueError("template must contain '{question}'")
        self.split, self.dataset, self.template, self.system_prompt = split, dataset, template, system_prompt
        qk, ak = question_key or self.question_key, answer_key or self.answer_key
        if dataset is None:
            check_split(self.env_name(), split, tuple(self.files))
            records = read_records(shipped(self.files[split]))
        else:
            records = load_records(dataset, split, subset)
        self.set_tasks([self.make_task(i, r, qk, ak) for i, r in enumerate(records)], limit)

    @classmethod
    def env_name(cls) -> str:
        return f"agentrl/{cls.__name__.removesuffix('Env')}-v0"

    def make_task(self, index: int, record: dict[str, Any], question_key: str, answer_key: str) -> Task:
        """One Task from one record (the whole record, minus question and answer, is metadata)."""
        for key in (question_key, answer_key):
            if key not in record:
                raise KeyError(f"{self.env_name()}: record {index} has no field {key!r} (fields: "
                               f"{', '.join(sorted(record))}); set question_key/answer_key")
        question = str(record[question_key])
        rid = record.get(self.id_key, index) if self.id_key else index
        meta = {k: v for k, v in record.items() if k not in (question_key, answer_key)}
        meta.update(split=self.split, question=question)
        if isinstance(record[answer_key], str) and "####" in record[answer_key]:  # a GSM8K worked solution
            meta["solution"] = record[answer_key]
        return Task(id=f"{self.name}-{self.split}-{rid}", answer=clean_answer(record[answer_key]),
                    prompt=chat_prompt(self.template.replace("{question}", question), self.system_prompt),
                    metadata=meta)

    def score(self, action: str, task: Task) -> RewardResult:
        return math_reward.score(action, task)

    def reference_answer(self, task: Task) -> str:
        return f"The final answer is $\\boxed{{{task.answer}}}$."


class GSM8KEnv(MathDatasetEnv):
    """GSM8K grade-school math (answers are integers)."""

    name = "gsm8k"
    files = {"train": "gsm8k_train.jsonl", "test": "gsm8k_test.jsonl"}
    question_key = "question"

    def __init__(self, split: str = "train", **kwargs: Any) -> None:
        super().__init__(split=split, **kwargs)


class MATH500Env(MathDatasetEnv):
    """MATH-500 (the PRM800K test subset of MATH); metadata has subject and level."""

    name = "math500"
    files = {"test": "math500_test.jsonl"}
    id_key = "unique_id"


class AIME24Env(MathDatasetEnv):
    """AIME 2024 (30 problems, integer answers 0-999)."""

    name = "aime24"
    files = {"test": "aime24_test.jsonl"}
    id_key = "id"


class AMC23Env(MathDatasetEnv):
    """AMC 2023 (40 problems)."""

    name = "amc23"
    files = {"test": "amc23_test.jsonl"}
    id_key = "id"
