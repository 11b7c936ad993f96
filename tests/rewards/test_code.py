"""rewards.code: MBPP asserts, HumanEval check, stdin/stdout, through the sandbox test runner."""

from __future__ import annotations

import json

import pytest

import sandbox
from agentrl.types import Task
from rewards import code as rcode
from tests.rewards.conftest import DATA

pytestmark = pytest.mark.skipif(not hasattr(sandbox, "run_tests"), reason="sandbox.run_tests not available yet")

HE_PROMPT = 'def add(a: int, b: int) -> int:\n    """Return a + b."""\n'
HE_CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"


def mbpp_task(row: dict) -> Task:
    tests = {"asserts": row["test_list"], "setup": "\n".join(row.get("test_imports") or [])}
    return Task(str(row["task_id"]), row["prompt"], None, {"tests": tests})


def test_extract_code_variants():
    assert rcode.extract_code("x\n```python\na = 1\n```\ntext\n```python\nb = 2\n```") == "b = 2\n"
    assert rcode.extract_code("```\nc = 3\n```") == "c = 3\n"
    assert rcode.extract_code("```py\nd = 4\n```\n```bash\nls\n```") == "d = 4\n"
    assert rcode.extract_code("e = 5") == "e = 5"


def test_mbpp_reference_passes_and_wrong_fails():
    with open(DATA / "mbpp_sanitized.json") as f:
        rows = json.load(f)[:3]
    for row in rows:
        task = mbpp_task(row)
        good = rcode.score(f"Here:\n```python\n{row['code']}\n```", task)
        assert good.score == 1.0 and good.components["pass_fraction"] == 1.0, good.info
    bad = rcode.score("```python\ndef similar_elements(a, b):\n    return (4, 5)\n```", mbpp_task(rows[0]))
    assert bad.score == 0.0 and 0.0 <= bad.components["pass_fraction"] < 1.0 and bad.components["correct"] == 0.0


def test_humaneval_completion_gets_prompt_prepended():
    task = Task("HumanEval/x", HE_PROMPT, None,
                {"tests": {"check": HE_CHECK, "entry_point": "add"}, "prompt_code": HE_PROMPT})
    assert rcode.score("    return a + b\n", task).score == 1.0
    assert rcode.score("```python\ndef add(a, b):\n    return a + b\n```", task).score == 1.0
    wrong = rcode.score("    return a - b\n", task)
    assert wrong.score == 0.0 and wrong.info["total"] == 1


def test_stdin_stdout_cases():
    task = Task("io", "sum two ints", None, {"tests": {"io": [{"stdin": "1 2\n", "stdout": "3\n"},
                                                             {"stdin": "5 5\n", "stdout": "10\n"}]}})
    assert rcode.score("```python\na, b = map(int, input().split())\nprint(a + b)\n```", task).score == 1.0
    half = rcode.score("print(3)", task)
    assert half.score == 0.0 and half.components["pass_fraction"] == 0.5


def test_cannot_fake_a_pass():
    task = mbpp_task({"task_id": 1, "prompt": "", "test_list": ["assert f() == 1"], "test_imports": []})
    assert rcode.score("import os\nos._exit(0)", task).score == 0.0
    assert rcode.score("raise SystemExit(0)", task).score == 0.0


def test_missing_tests_is_an_error():
    with pytest.raises(ValueError):
        rcode.score("x = 1", Task("t", "", None))
    with pytest.raises(ValueError, match="unknown test layout"):
        rcode.build_suite({"bogus": 1})
