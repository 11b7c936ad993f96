"""Bad input: malformed or truncated dataset rows, non-UTF-8 and giant model output, invalid
tool-call JSON, configs with wrong types. Each is skipped with a count, scored 0, fed back to the
policy, or rejected with a one-line error — never a crash of the run.
"""

from __future__ import annotations

import gzip
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from faultkit import DEMO, ROOT

import agentrl
from agentrl.config import ConfigError, load_config
from agentrl.models import load_tokenizer
from agentrl.rollout.engines.base import Completion, SamplingParams
from agentrl.rollout.executors import SingleTurnExecutor
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.types import Task
from environments.sources import read_records
from rewards import math as rmath
from rewards import numeric

GOOD = [{"question": f"What is {i}+1?", "answer": f"#### {i + 1}"} for i in range(3)]


class TokenEngine:
    """An engine that answers every prompt with fixed token ids (a model emitting exactly this)."""

    def __init__(self, ids: list[int], finish: str = "length") -> None:
        self.ids, self.finish = ids, finish

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        ids = self.ids[:params.max_new_tokens]
        return [Completion(list(ids), [-1.0] * len(ids), self.finish) for _ in prompts]


@pytest.fixture(scope="module")
def tok(tiny_arith: tuple[str, Any]) -> Any:
    return load_tokenizer(tiny_arith[0])


def _write_rows(path: Path) -> Path:
    lines = [json.dumps(GOOD[0]).encode(), b"", b'{"question": "cut off', b"[1, 2, 3]",
             json.dumps(GOOD[1]).encode(), b'\xff\xfe{"question": "latin-1?", "answer": "1"}',
             json.dumps(GOOD[2]).encode(), b'{"question": "truncated last row", "ans']
    path.write_bytes(b"\n".join(lines))
    return path


# ---------------------------------------------------------------------------------------- datasets
def test_malformed_jsonl_rows_are_skipped_with_a_count(tmp_path, caplog):
    path = _write_rows(tmp_path / "train.jsonl")
    with caplog.at_level(logging.WARNING, logger="environments.sources"):
        rows = read_records(path)
    assert rows == GOOD
    assert "skipped 4 malformed row(s) of 7 (lines 3, 4, 6, 8)" in caplog.text


def test_malformed_jsonl_rows_are_an_error_when_strict(tmp_path):
    path = _write_rows(tmp_path / "train.jsonl")
    with pytest.raises(ValueError, match=r"train.jsonl, line 3: malformed row: "):
        read_records(path, strict=True)


def test_truncated_gzip_keeps_the_rows_before_the_cut(tmp_path, caplog):
    data = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in GOOD * 200))
    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])  # a download or copy that stopped half way
    with caplog.at_level(logging.WARNING, logger="environments.sources"):
        rows = read_records(path)
    assert 0 < len(rows) < 600 and all(r in GOOD for r in rows)
    assert "skipped 1 malformed row(s)" in caplog.text
    with pytest.raises(ValueError, match="the compressed file is truncated"):
        read_records(path, strict=True)


def test_a_dataset_env_trains_on_the_good_rows_only(tmp_path):
    env = agentrl.make("agentrl/GSM8K-v0", dataset=str(_write_rows(tmp_path / "train.jsonl")), split="train")
    assert [t.answer for t in env.tasks] == ["1", "2", "3"]


def test_rows_without_the_fields_or_no_good_rows_are_clear_errors(tmp_path):
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"q": "no question key", "answer": "1"}) + "\n")
    with pytest.raises(KeyError, match="record 0 has no field 'question'"):
        agentrl.make("agentrl/GSM8K-v0", dataset=str(missing), split="train")
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"not json\n\x00\x01\x02\n")
    with pytest.raises(ValueError, match="the dataset is empty"):
        agentrl.make("agentrl/GSM8K-v0", dataset=str(garbage), split="train")


# ---------------------------------------------------------------------------------------- model output
def _invalid_utf8_ids(tok: Any) -> list[int]:
    """Token ids that decode to U+FFFD on their own (lone bytes of multi-byte UTF-8 sequences)."""
    ids = [i for i in range(len(tok)) if tok.decode([i]) == "\ufffd"]
    assert ids, "the byte-level tokenizer has raw byte tokens"
    return ids[:8]


def test_non_utf8_model_output_scores_zero_without_failing(tok, tiny_arith):
    env = tiny_arith[1]
    task = env.sample_task(__import__("numpy").random.default_rng(0))
    ids = _invalid_utf8_ids(tok) + tok(task.answer, add_special_tokens=False)["input_ids"]
    ex = SingleTurnExecutor(env, TokenEngine(ids), tok, SamplingParams(max_new_tokens=64), n_samples=2)
    trajs = ex.run([task])
    assert [t.reward for t in trajs] == [0.0, 0.0]  # bare answer required: bytes before it are garbage
    assert not any(t.info.get("failed") for t in trajs) and "\ufffd" in trajs[0].info["response"]
    assert trajs[0].segments[0].token_ids == ids  # token-exact: the ids are kept, not the decoded text


@pytest.mark.parametrize("text", ["\udcff\udc80", "\x00\x01\x1b[31m", "\ufffd" * 1000, "\U0010ffff" * 10])
def test_undecodable_and_control_text_never_raises(text):
    task = Task("t", "q", "42")
    assert rmath.score(text, task).score == 0.0
    assert numeric.score(text, task).score == 0.0
    env = agentrl.make("agentrl/Arithmetic-v0")
    env.reset(seed=0)
    assert env.step(text)[1] == 0.0


@pytest.mark.parametrize("name,text", [
    ("1 MB of prose", "word " * 200_000 + "so 42"),
    ("100k nested unclosed boxes", "\\boxed{" * 100_000),
    ("1M open braces", "{" * 1_000_000),
    ("a million-digit number", "1" * 1_000_000),
    ("50k numbers", " ".join(map(str, range(50_000)))),
    ("100k dollar signs", "$" * 100_000),
])
def test_giant_model_output_is_scored_in_bounded_time(name, text):
    task = Task("t", "q", "42")
    rmath.score("x", task)  # the sympy helper starts outside the timed part
    env = agentrl.make("agentrl/Arithmetic-v0")
    env.reset(seed=0)
    t0, cpu0 = time.monotonic(), time.process_time()
    for fn in (rmath.score, numeric.score):
        assert fn(text, task).score in (0.0, 1.0)
    assert env.step(text)[1] == 0.0
    # Bounded work, measured as this process's CPU time (a busy machine stretches wall time, not work);
    # the wall bound only catches a hang in the sympy helper, whose own deadline is under 1 s.
    assert time.process_time() - cpu0 < 5, name
    assert time.monotonic() - t0 < 60, name


def test_giant_response_is_cut_at_the_token_budget(tok, tiny_arith):
    ids = tok("9" * 5000, add_special_tokens=False)["input_ids"]
    env = tiny_arith[1]
    task = env.sample_task(__import__("numpy").random.default_rng(1))
    ex = SingleTurnExecutor(env, TokenEngine(ids), tok, SamplingParams(max_new_tokens=16))
    (traj,) = ex.run([task])
    assert traj.num_action_tokens == 16 and traj.truncated and traj.reward == 0.0


# ---------------------------------------------------------------------------------------- tool calls
@pytest.mark.parametrize("call", [
    "<tool_call>{oops</tool_call>",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}',  # never closed
    "<tool_call>" + "[" * 50_000 + "]" * 50_000 + "</tool_call>",  # deeper than json's recursion limit
    '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": "}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": [1, 2]}</tool_call>',
])
def test_invalid_tool_call_json_is_fed_back_and_the_episode_goes_on(tok, call):
    env = agentrl.make("agentrl/CalculatorMath-v0", split="test", limit=2, max_turns=3)
    ids = tok(call, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ex = MultiTurnExecutor(env, TokenEngine(ids, finish="stop"), tok, SamplingParams(max_new_tokens=len(ids)),
                           max_total_tokens=10 * len(ids) + 10_000)
    (traj,) = ex.run(env.tasks[:1])
    assert not traj.info.get("failed"), traj.info.get("error")
    assert traj.reward == 0.0 and traj.truncated  # the turn cap ended it, not an exception
    feedback = tok.decode([t for s in traj.segments if not s.is_action for t in s.token_ids])
    assert any(m in feedback for m in ("not valid JSON", "not closed", "nested too deeply", "must be")), feedback


# ---------------------------------------------------------------------------------------- configs
@pytest.mark.parametrize("override,message", [
    ("data.prompts_per_step=four", "data.prompts_per_step: expected an integer, got 'four'"),
    ("rollout.n_samples=2.5", "rollout.n_samples: expected an integer, got 2.5"),
    ("reward.retries=true", "reward.retries: expected an integer, got True"),
    ("log.progress=maybe", "log.progress: expected true or false, got 'maybe'"),
    ("algo.kl_target=[1]", "algo.kl_target: expected float or NoneType, got [1]"),
    ("env.kwargs=5", "env.kwargs: expected a mapping, got 5"),
    ("eval.k=[1, x]", "eval.k[1]: expected an integer, got 'x'"),
    ("cluster.policy=3", "cluster.policy: expected a mapping, got 3"),
    ("model=tiny", "model: expected a mapping, got 'tiny'"),
    ("reward.remote_url=8000", "reward.remote_url: expected str or NoneType, got 8000"),
    ("learner.total_steps=null", "learner.total_steps: expected an integer, got None"),
    ("rollout.engine=3", "rollout.engine: expected a string, got 3"),
])
def test_wrong_typed_config_is_a_one_line_error(override, message):
    with pytest.raises(ConfigError) as e:
        load_config(DEMO, [override])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_wrong_typed_yaml_section_from_the_cli_exits_2(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("learner: 5\nrollout:\n  n_samples: many\n")
    out = subprocess.run([sys.executable, "-m", "agentrl.cli", "train", str(cfg)], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 2 and out.stderr.startswith("agentrl: config error: ")
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
