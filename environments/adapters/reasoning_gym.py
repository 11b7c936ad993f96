"""reasoning-gym's procedural datasets as environments: ``env.id: reasoning_gym:NAME``.

``env.kwargs`` is the dataset's config (``size``, ``seed`` and the dataset's own fields, e.g.
``min_animals``); each entry (``question``, ``answer``, ``metadata``) is a task. The prompt is
a reasoning-gym system prompt (``system_prompt``: a name of ``reasoning_gym.utils.SYSTEM_PROMPTS``,
default ``default``, which asks for the answer inside ``<answer></answer>``; or the text itself;
``""`` for none) and the question.
The response's last ``<answer>`` is scored by the dataset's own ``score_answer`` (none, or an empty
one: 0.0), as reasoning-gym's own evaluation does. Scores under ``min_credit`` (default 0.1) count as
0.0: several datasets give 0.01-0.05 to any wrong answer, and a wrong answer scores 0 here (graded
scores above it are kept); a scorer that raises on an unparsable answer scores it 0.0. Characters of the questions beyond agentrl's text charset (emoji) are
added to the env's observation space. ``split`` shifts the seed (train: ``seed``, test:
``seed + 1``, dev: ``seed + 2``), so held-out tasks are other draws of the same generator.
Needs the optional extra ``reasoning-gym`` (``pip install agentrl[adapters]``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gymnasium import spaces

from agentrl.env import MAX_TEXT, TEXT_CHARSET, EnvError
from agentrl.types import RewardResult, Task
from environments.sources import DatasetEnv

SPLIT_OFFSET = {"train": 0, "test": 1, "dev": 2}


def _package() -> Any:
    try:
        import reasoning_gym
    except ImportError as e:
        raise ImportError("reasoning_gym envs need the reasoning-gym package: pip install reasoning-gym "
                          "(or agentrl[adapters])") from e
    return reasoning_gym


def list_ids() -> list[str]:
    """``reasoning_gym:NAME`` of every registered dataset ([] when reasoning-gym is not installed)."""
    try:
        rg = _package()
    except ImportError:
        return []
    return [f"reasoning_gym:{name}" for name in sorted(rg.factory.DATASETS)]


class ReasoningGymEnv(DatasetEnv):
    """One reasoning-gym dataset; tasks are its entries, scored by its ``score_answer``."""

    def __init__(self, name: str, split: str = "train", seed: int = 0, size: int | None = None,
                 min_credit: float = 0.1, system_prompt: str = "default", render_mode: str | None = None,
                 **config: Any) -> None:
        super().__init__(render_mode=render_mode)
        rg = _package()
        if name not in rg.factory.DATASETS:
            raise EnvError(f"reasoning_gym has no dataset {name!r}; see `agentrl envs list`")
        if split not in SPLIT_OFFSET:
            raise EnvError(f"reasoning_gym:{name} has no split {split!r}; valid: {', '.join(SPLIT_OFFSET)}")
        config_cls = rg.factory.DATASETS[name][1]
        fields = {f.name for f in dataclasses.fields(config_cls)}
        unknown = sorted(set(config) - fields)
        if unknown:
            raise EnvError(f"reasoning_gym:{name}: unknown config field {unknown[0]!r}; "
                             f"{config_cls.__name__} takes: {', '.join(sorted(fields))}")
        if size is not None:
            config["size"] = size
        self.name = name
        self.dataset = rg.create_dataset(name, seed=seed + SPLIT_OFFSET[split], **config)
        self.system_prompt = rg.utils.SYSTEM_PROMPTS.get(system_prompt, system_prompt)
        self.set_tasks([self._task(i, entry) for i, entry in enumerate(self.dataset)])
        self.min_credit = min_credit
        extra = {c for t in self.tasks for m in t.prompt for c in m["content"]} - set(TEXT_CHARSET)
        if extra:
            self.observation_space = spaces.Text(max_length=MAX_TEXT, min_length=0,
                                                 charset=TEXT_CHARSET + "".join(sorted(extra)))

    def _task(self, i: int, entry: dict[str, Any]) -> Task:
        prompt = [{"role": "user", "content": entry["question"]}]
        if self.system_prompt:
            prompt.insert(0, {"role": "system", "content": self.system_prompt})
        return Task(id=f"{self.name}-{i}", prompt=prompt, answer=entry["answer"], metadata={"entry": entry})

    def score(self, action: str, task: Task) -> RewardResult:
        from reasoning_gym.utils import extract_answer

        answer = extract_answer(action)
        if not answer:
            return RewardResult(0.0, {"correct": 0.0}, {"parsed": answer})
        try:
            value = float(self.dataset.score_answer(answer=answer, entry=task.metadata["entry"]))
        except Exception as e:  # noqa: BLE001 - some scorers raise on an unparsable answer: it is wrong
            return RewardResult(0.0, {"correct": 0.0}, {"parsed": answer, "error": f"{type(e).__name__}: {e}"})
        value = value if value >= self.min_credit else 0.0
        return RewardResult(value, {"correct": value}, {"parsed": answer})

    def reference_answer(self, task: Task) -> str:
        return f"<answer>{task.answer}</answer>"


def make_env(rest: str, **kwargs: Any) -> ReasoningGymEnv:
    """``reasoning_gym:NAME`` with the dataset's config as kwargs."""
    return ReasoningGymEnv(rest, **kwargs)
