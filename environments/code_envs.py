"""Code environments: ``agentrl/HumanEval-v0``, ``agentrl/MBPP-v0`` and ``agentrl/MBPPRetry-v0``.

The policy answers with code; the code is the last fenced ```` ```python ```` block (any fenced
block if there is none, else the whole response) and the task's tests run on it in the
:mod:`sandbox` (:func:`rewards.code.score`: 1.0 when every test passes; ``pass_fraction`` in the
components). Tasks follow the layout documented in :mod:`rewards.code`.

- HumanEval (164 problems, ``test`` only): the prompt shows the function signature and docstring;
  a bare completion of the body is accepted too (the prompt is prepended when the response does
  not define the entry point).
- MBPP (974 problems; ``sanitized=True`` for the 427 hand-verified ones), split by task id as the
  MBPP authors define: 11-510 ``test``, 511-600 ``validation`` (alias ``dev``), 601-974 ``train``,
  1-10 ``prompt`` (few-shot). The prompt shows the task and its test asserts, as in the paper.
- MBPPRetry: MBPP over several turns. A failing attempt gets the failing asserts and their errors
  as the next observation; the policy may retry ``retries`` times; the reward is the last
  attempt's (the episode ends at the first pass).
"""

from __future__ import annotations

import gzip
import json
from typing import Any

from agentrl.types import RewardResult, Task
from environments.math_envs import chat_prompt
from environments.sources import DatasetEnv, check_split, read_records, shipped
from rewards import code as code_reward

MBPP_SPLITS = {"test": (11, 510), "validation": (511, 600), "dev": (511, 600), "train": (601, 974),
               "prompt": (1, 10)}
HUMANEVAL_TEMPLATE = ("Complete the following Python function. Reply with the complete function in a ```python "
                      "code block.\n\n```python\n{prompt}```")
MBPP_TEMPLATE = ("You are an expert Python programmer, and here is your task: {text} Your code should pass these "
                 "tests:\n\n{tests}\n\nReply with your code in a ```python code block.")


def fenced(code: str) -> str:
    """``code`` in a python fence."""
    return f"```python\n{code.rstrip()}\n```"


class HumanEvalEnv(DatasetEnv):
    """HumanEval: complete a function from its signature and docstring."""

    def __init__(self, split: str = "test", template: str = HUMANEVAL_TEMPLATE, system_prompt: str | None = None,
                 limit: int | None = None, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        check_split("agentrl/HumanEval-v0", split, ("test",))
        self.split = split
        with gzip.open(shipped("HumanEval.jsonl.gz"), "rt", encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        self.set_tasks([self.make_task(r, template, system_prompt) for r in records], limit)

    def make_task(self, r: dict[str, Any], template: str, system_prompt: str | None) -> Task:
        return Task(id=r["task_id"], prompt=chat_prompt(template.replace("{prompt}", r["prompt"]), system_prompt),
                    answer=r["prompt"] + r["canonical_solution"],
                    metadata={"tests": {"check": r["test"], "entry_point": r["entry_point"]},
                              "prompt_code": r["prompt"], "split": self.split})

    def score(self, action: str, task: Task) -> RewardResult:
        return code_reward.score(action, task)

    def reference_answer(self, task: Task) -> str:
        return fenced(task.answer)


def mbpp_records(sanitized: bool) -> list[dict[str, Any]]:
    """MBPP rows with the same fields whichever file: task_id, text, code, test_list, setup."""
    if sanitized:
        rows = read_records(shipped("mbpp_sanitized.json"))
        return [{"task_id": r["task_id"], "text": r["prompt"], "code": r["code"], "test_list": r["test_list"],
                 "setup": "\n".join(r.get("test_imports") or [])} for r in rows]
    rows = read_records(shipped("mbpp.jsonl"))
    return [{"task_id": r["task_id"], "text": r["text"], "code": r["code"], "test_list": r["test_list"],
             "setup": r.get("test_setup_code") or ""} for r in rows]


class MBPPEnv(DatasetEnv):
    """MBPP: write a function from a one-line description and its test asserts."""

    def __init__(self, split: str = "train", sanitized: bool = False, template: str = MBPP_TEMPLATE,
                 system_prompt: str | None = None, limit: int | None = None, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        check_split("agentrl/MBPP-v0", split, tuple(MBPP_SPLITS))
        self.split, self.sanitized = split, sanitized
        lo, hi = MBPP_SPLITS[split]
        rows = [r for r in mbpp_records(sanitized) if lo <= int(r["task_id"]) <= hi]
        self.set_tasks([self.make_task(r, template, system_prompt) for r in rows], limit)

    def make_task(self, r: dict[str, Any], template: str, system_prompt: str | None) -> Task:
        text = template.replace("{text}", r["text"]).replace("{tests}", "\n".join(r["test_list"]))
        return Task(id=f"mbpp-{r['task_id']}", prompt=chat_prompt(text, system_prompt), answer=r["code"],
                    metadata={"tests": {"asserts": list(r["test_list"]), "setup": r["setup"]},
                              "split": self.split, "task_id": r["task_id"]})

    def score(self, action: str, task: Task) -> RewardResult:
        return code_reward.score(action, task)

    def reference_answer(self, task: Task) -> str:
        return fenced(task.answer.replace("\r\n", "\n"))


class MBPPRetryEnv(MBPPEnv):
    """MBPP with ``retries`` more attempts after a failure; failing tests are the feedback."""

    feedback_role = "user"

    def __init__(self, split: str = "train", retries: int = 2, max_feedback_tests: int = 3, **kwargs: Any) -> None:
        super().__init__(split=split, **kwargs)
        if retries < 1:
            raise ValueError("MBPPRetry-v0 needs retries >= 1 (use agentrl/MBPP-v0 for one attempt)")
        self.retries, self.max_feedback_tests = retries, max_feedback_tests
        self.max_turns = retries + 1
        self.attempt = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        self.attempt = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        import sandbox

        action = action if isinstance(action, str) else str(action)
        self.attempt += 1
        tests = self.task.metadata["tests"]
        report = sandbox.run_tests(code_reward.program(action, self.task), code_reward.build_suite(tests))
        correct = 1.0 if report.all_passed else 0.0
        info = {"reward_components": {"correct": correct, "pass_fraction": float(report.fraction)},
                "verified": True, "attempt": self.attempt, "passed": report.passed, "total": report.total}
        if correct or self.attempt >= self.max_turns:
            self._last_obs = ""
            return "", correct, True, False, info
        self._last_obs = self.feedback(report, tests["asserts"])
        return self._last_obs, 0.0, False, False, info

    def feedback(self, report: Any, asserts: list[str]) -> str:
        """The next observation after a failed attempt: the failing asserts and their errors."""
        lines = [f"Your code failed {report.total - report.passed} of {report.total} tests."]
        failed = [(asserts[i] if i < len(asserts) else o.name, o.error)
                  for i, o in enumerate(report.outcomes) if not o.passed]
        for test, error in failed[: self.max_feedback_tests]:
            lines.append(f"{test}\n  -> {error.strip() or 'failed'}")
        if not report.outcomes and report.error:
            lines.append(report.error.strip()[-1000:])
        left = self.max_turns - self.attempt
        lines.append(f"Fix the code and reply with the complete corrected code in a ```python code block "
                     f"({left} attempt{'s' if left > 1 else ''} left).")
        return "\n".join(lines)
