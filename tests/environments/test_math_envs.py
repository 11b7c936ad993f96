"""Math dataset envs (splits, local files, prompts) and Countdown's verifier."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import agentrl
from agentrl.rollout.executors import encode_prompt
from environments.countdown import evaluate
from environments.math_envs import clean_answer


def test_gsm8k_splits_and_answers() -> None:
    train, test = agentrl.make("agentrl/GSM8K-v0"), agentrl.make("agentrl/GSM8K-v0", split="test")
    assert (len(train.tasks), len(test.tasks)) == (7473, 1319)
    assert not {t.metadata["question"] for t in train.tasks} & {t.metadata["question"] for t in test.tasks}
    task = test.tasks[0]
    assert task.answer == "18" and task.id == "gsm8k-test-0"
    assert task.prompt[-1]["role"] == "user" and "\\boxed{}" in task.prompt[-1]["content"]
    assert test.score("so she makes \\boxed{18} dollars", task).score == 1.0
    assert test.score("\\boxed{18} or \\boxed{19}", task).score == 0.0


@pytest.mark.parametrize("env_id", ["agentrl/MATH500-v0", "agentrl/AIME24-v0", "agentrl/AMC23-v0"])
def test_test_only_benchmarks_refuse_train(env_id: str) -> None:
    with pytest.raises(ValueError, match="test-only benchmark"):
        agentrl.make(env_id, split="train")
    assert len(agentrl.make(env_id).tasks) in (500, 30, 40)


def test_unknown_split_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid: train, test"):
        agentrl.make("agentrl/GSM8K-v0", split="validation")


def test_clean_answer() -> None:
    assert clean_answer(27.0) == "27"
    assert clean_answer("so 5 + 5 = 10\n#### 1,234") == "1234"
    assert clean_answer("\\frac{1}{2}") == "\\frac{1}{2}"


def test_local_jsonl_dataset_with_split_placeholder(tmp_path: Path) -> None:
    rows = [{"q": f"What is {i} + {i}?", "a": 2 * i} for i in range(5)]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    env = agentrl.make("agentrl/MATH500-v0", dataset=str(tmp_path / "{split}.jsonl"), split="train",
                       question_key="q", answer_key="a", system_prompt="You are good at sums.",
                       template="Q: {question}")
    assert [t.answer for t in env.tasks] == ["0", "2", "4", "6", "8"]
    assert env.tasks[1].prompt == [{"role": "system", "content": "You are good at sums."},
                                   {"role": "user", "content": "Q: What is 1 + 1?"}]
    _, info = env.reset(seed=0)
    assert env.step(f"\\boxed{{{info['task'].answer}}}")[1] == 1.0
    with pytest.raises(KeyError, match="question_key"):
        agentrl.make("agentrl/GSM8K-v0", dataset=str(tmp_path / "train.jsonl"))


def test_hub_dataset_without_datasets_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # as if it were not installed
    with pytest.raises(ImportError, match="pip install datasets"):
        agentrl.make("agentrl/GSM8K-v0", dataset="openai/gsm8k", subset="main")


def test_chat_template_renders_messages() -> None:
    from transformers import PreTrainedTokenizerFast

    from agentrl.models import train_tokenizer

    tok: PreTrainedTokenizerFast = train_tokenizer(["hello world", "What is 2+2?"], 300)
    task = agentrl.make("agentrl/AIME24-v0", system_prompt="Be brief.").tasks[0]
    text = tok.decode(encode_prompt(tok, task.prompt, chat_template=True))
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_countdown_verifier_rejects_foreign_and_reused_numbers() -> None:
    env = agentrl.make("agentrl/Countdown-v0")
    task = env.sample_task(np.random.default_rng(0))
    nums, target = task.metadata["numbers"], task.metadata["target"]
    assert env.score(env.reference_answer(task), task).score == 1.0
    assert env.score(f"<answer>{task.metadata['solution']} = {target}</answer>", task).score == 1.0
    # a number that is not given
    foreign = max(nums) + 1
    res = env.score(f"\\boxed{{{target} - {foreign} + {foreign}}}", task)
    assert res.score == 0.0 and "not given" in res.info["error"]
    # a given number used twice
    a = nums[0]
    res = env.score(f"\\boxed{{{task.metadata['solution']} + {a} - {a}}}", task)
    assert res.score == 0.0 and "too often" in res.info["error"]
    # no eval: names, calls, powers and attributes are refused without running anything
    for bad in ["__import__('os').system('true')", "2**10", "-3 + 5", "a + 1", "(1).real"]:
        assert env.score(f"\\boxed{{{bad}}}", task).score == 0.0


def test_countdown_use_all_false_allows_subsets() -> None:
    env = agentrl.make("agentrl/Countdown-v0", use_all=False)
    task = env.sample_task(np.random.default_rng(0))
    n = task.metadata["numbers"]
    sub = agentrl.types.Task(id="x", prompt="", answer=str(n[0] + n[1]),
                             metadata={"numbers": n, "target": n[0] + n[1]})
    assert env.score(f"\\boxed{{{n[0]} + {n[1]}}}", sub).score == 1.0


def test_countdown_evaluate_is_exact() -> None:
    value, used = evaluate("(7 - 3) / 8 * 6")
    assert value == 3 and used == [7, 3, 8, 6]


def test_hub_dataset_goes_through_datasets_load_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    calls = []

    def load_dataset(name: str, subset: str | None, split: str) -> list[dict]:
        calls.append((name, subset, split))
        return [{"question": "1+1?", "answer": "so 2\n#### 2"}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    env = agentrl.make("agentrl/GSM8K-v0", dataset="openai/gsm8k", subset="main", split="test")
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [t.answer for t in env.tasks] == ["2"] and env.tasks[0].id == "gsm8k-test-0"


def test_parquet_needs_pyarrow_or_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        path.write_bytes(b"PAR1")
        with pytest.raises(ImportError, match="needs pyarrow"):
            agentrl.make("agentrl/GSM8K-v0", dataset=str(path))
        return
    pq.write_table(pa.Table.from_pylist([{"question": "1+1?", "answer": "#### 2"}]), path)
    assert agentrl.make("agentrl/GSM8K-v0", dataset=str(path)).tasks[0].answer == "2"
