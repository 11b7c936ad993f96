"""verl and TRL files used unchanged: a verl parquet dataset as an env, a verl compute_score and a TRL
reward function as the run's reward (reward.fn)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import agentrl
from agentrl.config import load_config
from agentrl.rollout.build import make_env
from agentrl.types import Task
from tests.adapters.conftest import FILES, sums, train


def verl_parquet(path) -> str:
    """A dataset in verl's RL format (examples/data_preprocess/gsm8k.py writes these fields)."""
    rows = [{"data_source": "toy/sums", "prompt": [{"role": "user", "content": p}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": a}, "extra_info": {"split": "train", "index": i}}
            for i, (p, a) in enumerate(sums())]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.mark.slow
def test_verl_dataset_and_compute_score_train_two_steps(tmp_path, tiny):
    data = verl_parquet(tmp_path / "train.parquet")
    env = agentrl.make(f"verl:{data}")
    assert len(env.tasks) == 16 and env.tasks[3].metadata["data_source"] == "toy/sums"
    assert env.tasks[1].prompt == [{"role": "user", "content": "0+1="}] and env.tasks[1].answer == "1"
    steps = train(tmp_path, tiny, {"id": f"verl:{data}"}, reward={"fn": f"{FILES / 'compute_score.py'}:compute_score"})
    assert all(r["reward/mean"] >= 0.2 for r in steps)  # the file's 0.2 for a wrong answer: it scored


def test_verl_compute_score_gets_verl_arguments(tmp_path):
    data = verl_parquet(tmp_path / "train.parquet")
    cfg = load_config(None, [f"env.id=verl:{data}", f"reward.fn={FILES}/compute_score.py:compute_score"])
    env = make_env(cfg)
    env.reset(options={"task": env.tasks[2]})  # 0+2=
    _, reward, done, _, info = env.step("2")
    assert (reward, done) == (1.0, True) and info["reward_components"] == {"length": 1.0}
    assert env.step("21")[1] == 0.2


@pytest.mark.slow
def test_trl_reward_function_trains_two_steps(tmp_path, tiny, jsonl):
    env = {"id": "agentrl/Arithmetic-v0", "kwargs": {"digits": 1, "terms": 2, "operators": "+",
                                                     "template": "{expr}=", "bare_answer": True}}
    steps = train(tmp_path, tiny, env, reward={"fn": f"{FILES / 'trl_reward.py'}:exact_match_reward"})
    assert all(r["reward/mean"] >= 0.3 for r in steps)
    from rewards.registry import get_reward

    fn = get_reward(f"{FILES / 'trl_reward.py'}:exact_match_reward")
    assert fn("7", Task("t", "3+4=", "7")).score == 1.0 and fn("8", Task("t", "3+4=", "7")).score == 0.3


def test_reward_fn_errors_are_clear(tmp_path):
    cfg = load_config(None, ["env.id=agentrl/Arithmetic-v0", f"reward.fn={tmp_path}/missing.py:f"])
    with pytest.raises(ValueError, match="does not exist"):
        make_env(cfg)
    cfg = load_config(None, ["env.id=agentrl/Arithmetic-v0", f"reward.fn={FILES}/trl_reward.py:nope"])
    with pytest.raises(ValueError, match="defines no 'nope'"):
        make_env(cfg)
