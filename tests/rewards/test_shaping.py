"""Format checks, DAPO overlong penalty, weighted combinations, and the TRL adapter."""

from __future__ import annotations

import pytest

from agentrl.types import Task
from rewards import shaping
from rewards.trl import completion_text, trl_reward


@pytest.mark.parametrize("text, ok", [
    ("<think>a</think><answer>5</answer>", 1.0),
    ("  <think>a\nb</think>\n<answer>5</answer>\n", 1.0),
    ("<answer>5</answer><think>a</think>", 0.0),
    ("<think>a</think>", 0.0),
    ("<think>a</think><answer>5</answer> trailing", 0.0),
    ("<think>a</think><answer>5</answer><answer>6</answer>", 0.0),
])
def test_tag_format(text, ok):
    assert shaping.tag_format(text) == ok
    assert shaping.think_answer_format(text, Task("t", "")).components == {"format": ok}


def test_overlong_penalty_dapo():
    assert shaping.overlong_penalty(100, 1000, 200) == 0.0
    assert shaping.overlong_penalty(800, 1000, 200) == 0.0
    assert shaping.overlong_penalty(900, 1000, 200) == pytest.approx(-0.5)
    assert shaping.overlong_penalty(1000, 1000, 200) == pytest.approx(-1.0)
    assert shaping.overlong_penalty(5000, 1000, 200) == -1.0
    fn = shaping.overlong(10, 4, length_fn=lambda s: len(s.split()))
    assert fn("a b c d e f g h", Task("t", "")).components == {"overlong": -0.5}


def test_combine_weighted_with_named_components():
    reward = shaping.combine({"correct": ("math", 1.0), "format": (shaping.think_answer_format, 0.5),
                              "overlong": (shaping.overlong(50, 10), 1.0)})  # 45 chars
    task = Task("t", "", "12")
    out = reward("<think>6+6</think><answer>\\boxed{12}</answer>", task)
    assert out.components == {"correct": 1.0, "format": 1.0, "overlong": pytest.approx(-0.5)}
    assert out.score == pytest.approx(1.0 + 0.5 - 0.5)
    assert out.info["correct"]["parsed"] == "12"


def test_math_with_format():
    task = Task("t", "", "3")
    assert shaping.math_with_format("<think>x</think><answer>3</answer>", task).score == pytest.approx(1.1)
    assert shaping.math_with_format("the answer is 3", task).score == 1.0


def test_trl_adapter_plain_and_chat():
    fn = trl_reward("math")
    assert fn.__name__ == "math"
    prompts = ["1+1?", "2+2?"]
    assert fn(prompts, ["\\boxed{2}", "5"], answer=["2", "4"]) == [1.0, 0.0]
    chats = [[{"role": "assistant", "content": "it is \\boxed{2}"}], [{"role": "assistant", "content": "4"}]]
    assert fn([[{"role": "user", "content": p}] for p in prompts], chats, answer=["2", "4"],
              trainer_state=None) == [1.0, 1.0]
    assert completion_text({"role": "assistant", "content": "x"}) == "x"


def test_trl_adapter_passes_columns_as_metadata():
    seen = []

    def probe(response, task):
        seen.append(task)
        return 1.0

    trl_reward(probe, answer_key="solution")(["p"], ["c"], solution=["s"], tests=[{"asserts": []}])
    assert seen[0].answer == "s" and seen[0].metadata == {"tests": {"asserts": []}}
