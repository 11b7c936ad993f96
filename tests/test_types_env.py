"""Data contracts, the env base and registry, and Arithmetic-v0."""

import subprocess
import sys

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentrl
from agentrl.types import RewardResult, Segment, Task, Trajectory, read_jsonl, write_jsonl
from environments.arithmetic import ArithmeticEnv, _evaluate, split_of


def test_trajectory_jsonl_roundtrip(tmp_path):
    t = Trajectory(prompt_ids=[1, 2], segments=[Segment([3, 4], True, [-0.5, -0.25]), Segment([5], False)],
                   reward=1.0, task_id="t1", group_id=3, turn_rewards=[0.0, 1.0], info={"x": 1})
    write_jsonl(str(tmp_path / "t.jsonl"), [t, t])
    back = read_jsonl(str(tmp_path / "t.jsonl"))
    assert back == [t, t] and back[0].version == 1
    assert t.response_ids == [3, 4, 5] and t.num_action_tokens == 2
    with pytest.raises(ValueError, match="version"):
        Trajectory.from_dict({**t.to_dict(), "version": 99})
    with pytest.raises(ValueError, match="logprobs"):
        Segment([1, 2], True, [0.0])
    assert Task.from_dict(Task("a", "p", "1", {"k": 2}).to_dict()) == Task("a", "p", "1", {"k": 2})
    assert RewardResult.from_dict(RewardResult(1.0, {"c": 1.0}).to_dict()).components == {"c": 1.0}


def test_gymnasium_make_and_check_env():
    env = gymnasium.make("agentrl/Arithmetic-v0")
    check_env(env.unwrapped)
    obs, info = env.reset(seed=3)
    assert isinstance(obs, str) and info["task"].answer
    _, r, term, trunc, step_info = env.step(info["task"].answer)
    assert (r, term, trunc) == (1.0, True, False) and step_info["verified"] is True
    assert step_info["reward_components"] == {"correct": 1.0}


def test_agentrl_make_kwargs_and_module_path():
    env = agentrl.make("agentrl/Arithmetic-v0", digits=3, operators="+-*/", terms=4)
    assert isinstance(env, ArithmeticEnv)
    direct = agentrl.make("environments.arithmetic:ArithmeticEnv", digits=1)
    assert direct.digits == 1
    with pytest.raises(KeyError, match="agentrl/Arithmetic-v0"):
        agentrl.make("agentrl/Nope-v0")
    assert "agentrl/Arithmetic-v0" in agentrl.list_envs()


def test_same_seed_same_task_and_answers_are_exact():
    env = agentrl.make("agentrl/Arithmetic-v0", digits=2, operators="+-*/", terms=3)
    a = [env.reset(seed=s)[1]["task"] for s in range(20)]
    b = [env.reset(seed=s)[1]["task"] for s in range(20)]
    assert a == b and len({t.id for t in a}) > 15
    for t in a:
        env.reset(options={"task": t})
        assert env.step(t.answer)[1] == 1.0
        assert env.step("")[1] == 0.0
    assert _evaluate("2+3*4-10/4") == 2 + 12 - 2.5


def test_splits_are_disjoint_and_stable():
    rng = np.random.default_rng(0)
    test = agentrl.make("agentrl/Arithmetic-v0", split="test")
    train = agentrl.make("agentrl/Arithmetic-v0", split="train")
    test_ids = {test.sample_task(rng).id for _ in range(300)}
    train_ids = {train.sample_task(rng).id for _ in range(300)}
    assert not test_ids & train_ids
    assert all(split_of(i.removeprefix("arith-")) == "test" for i in test_ids)
    with pytest.raises(ValueError, match="valid"):
        agentrl.make("agentrl/Arithmetic-v0", split="nope")


@pytest.mark.parametrize("action", ["", "abc", "4 or 5", "\x00\xff", "9" * 5000, "🙂"])
def test_garbage_actions_score_zero(action):
    env = agentrl.make("agentrl/Arithmetic-v0")
    env.reset(seed=0)
    assert env.step(action)[1] == 0.0
    env.reset(seed=0)
    env.action_space.seed(0)  # a fixed random answer (an unseeded one could end in the gold number)
    assert env.step(env.action_space.sample()[:2000])[1] == 0.0


def test_import_agentrl_stays_light():
    code = ("import sys, agentrl; heavy = [m for m in ('ray', 'vllm', 'deepspeed', 'docker', 'fastapi') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
