"""Code rewards: run the task's tests on the response's code in the :mod:`sandbox`.

Task layout (environments build code tasks this way):

- ``task.metadata["tests"]`` is one of
  - MBPP: ``{"asserts": ["assert f(1) == 2", ...], "setup": "import math"}`` (``setup`` optional);
  - HumanEval: ``{"check": "def check(candidate): ...", "entry_point": "f"}``;
  - stdin/stdout: ``{"io": [{"stdin": "1 2\\n", "stdout": "3\\n"}, ...]}``.
  When ``metadata`` has no ``tests``, ``task.answer`` is read the same way.
- ``task.metadata["prompt_code"]`` (optional, HumanEval's prompt): prepended when the response is
  only a completion (it does not define the entry point itself).

The code is the last fenced ```` ```python ```` block of the response (any fenced block if there is
no python one), or the whole response when there is no fence. Reward: 1.0 when every test passes,
else 0.0; ``components`` = ``{"correct", "pass_fraction"}``; ``info`` has the sandbox status/error.
"""

from __future__ import annotations

import re
from typing import Any

from agentrl.types import RewardResult, Task

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(response: str) -> str:
    """The last fenced python block (else the last fenced block, else the whole response)."""
    blocks = _FENCE_RE.findall(response)
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    if python:
        return python[-1]
    if blocks:
        return blocks[-1][1]
    return response


def build_suite(tests: dict[str, Any]) -> Any:
    """A ``sandbox.TestSuite`` from the task layout above."""
    import sandbox

    if "asserts" in tests:
        return sandbox.TestSuite(asserts=list(tests["asserts"]), setup=tests.get("setup") or "")
    if "check" in tests:
        return sandbox.TestSuite(check=tests["check"], entry_point=tests["entry_point"])
    if "io" in tests:
        cases = [sandbox.IOCase(stdin=c.get("stdin", ""), expected_stdout=c.get("stdout", c.get("expected_stdout", "")))
                 for c in tests["io"]]
        return sandbox.TestSuite(io=cases)
    raise ValueError(f"unknown test layout with keys {sorted(tests)}; expected asserts, check or io")


def program(response: str, task: Task) -> str:
    """The code to test: extracted code, with HumanEval's prompt prepended for bare completions."""
    code = extract_code(response)
    prefix = task.metadata.get("prompt_code")
    tests = task.metadata.get("tests") or {}
    entry = tests.get("entry_point") if isinstance(tests, dict) else None
    if prefix and not (entry and re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE)):
        code = prefix + code
    return code


def score(response: str, task: Task, *, sandbox_obj: Any = None, limits: Any = None) -> RewardResult:
    """1.0 when all of the task's tests pass, with the pass fraction in ``components``."""
    import sandbox

    tests = task.metadata.get("tests", task.answer)
    if not isinstance(tests, dict):
        raise ValueError(f"task {task.id}: no tests in metadata['tests'] or answer")
    report = sandbox.run_tests(program(response, task), build_suite(tests), sandbox=sandbox_obj, limits=limits)
    correct = 1.0 if report.all_passed else 0.0
    return RewardResult(correct, {"correct": correct, "pass_fraction": float(report.fraction)},
                        {"passed": report.passed, "total": report.total, "status": str(report.status),
                         "error": report.error})
