"""reasoning-gym datasets and SkyRL-gym environments as agentrl envs: the registry's conformance checks,
`agentrl envs list`, and 2 training steps each."""

from __future__ import annotations

import os
import warnings

import pytest
from gymnasium.utils.env_checker import check_env

import agentrl
from agentrl.env import list_envs
from tests.adapters.conftest import FILES, sums, train

rg = pytest.importorskip("reasoning_gym")
RG_IDS = [i for i in list_envs(families=True) if i.startswith("reasoning_gym:")]
# no oracle answer (entry["answer"] is None: the dataset verifies a solution by search or simulation), or
# a meta-dataset that needs a config naming its parts
NO_REFERENCE = {"reasoning_gym:boxnet", "reasoning_gym:graph_color", "reasoning_gym:propositional_logic",
                "reasoning_gym:rubiks_cube", "reasoning_gym:rush_hour", "reasoning_gym:composite"}
# the datasets' own score_answer credits any answer (game_of_life_halting gives 1.0 to "banana")
LENIENT = {"reasoning_gym:game_of_life_halting"}
# CI checks four (arithmetic, emoji outside the base charset, a 0.01-credit scorer); the whole registry with
# AGENTRL_ALL_REASONING_GYM=1 (about 4 minutes)
SAMPLE = ["reasoning_gym:leg_counting", "reasoning_gym:basic_arithmetic", "reasoning_gym:emoji_mystery",
          "reasoning_gym:countdown"]
CHECKED = sorted(set(RG_IDS) - NO_REFERENCE - LENIENT) if os.environ.get("AGENTRL_ALL_REASONING_GYM") else SAMPLE
GARBAGE = ["", " ", "asdf qwerty", "The answer is banana.", "<answer></answer>", "<answer>banana</answer>"]


def test_every_dataset_is_listed() -> None:
    names = set(rg.factory.DATASETS)
    assert len(names) > 50 and {i.split(":", 1)[1] for i in RG_IDS} == names


@pytest.mark.parametrize("env_id", CHECKED)
def test_reasoning_gym_conformance(env_id: str) -> None:
    env = agentrl.make(env_id, size=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert not [str(w.message) for w in caught if "gymnasium" in str(w.filename)]
    for seed in range(3):
        _, info = env.reset(seed=seed)
        assert env.step(env.reference_answer(info["task"]))[1:3] == (1.0, True)
    for k, action in enumerate(GARBAGE):
        env.reset(seed=k)
        assert env.step(action)[1] == 0.0, action
    a, b = agentrl.make(env_id, size=5), agentrl.make(env_id, size=5)
    assert [a.reset(seed=s)[0] for s in range(3)] == [b.reset(seed=s)[0] for s in range(3)]
    assert agentrl.make(env_id, size=5, split="test").tasks[0].prompt != a.tasks[0].prompt or env_id.endswith("ing")


def test_reasoning_gym_config_errors() -> None:
    with pytest.raises(ValueError, match="unknown config field 'legs'"):
        agentrl.make("reasoning_gym:leg_counting", legs=3)
    with pytest.raises(ValueError, match="no dataset 'nope'"):
        agentrl.make("reasoning_gym:nope")


@pytest.mark.slow
def test_reasoning_gym_trains_two_steps(tmp_path, tiny) -> None:
    env = {"id": "reasoning_gym:leg_counting", "kwargs": {"size": 16, "min_animals": 1, "max_animals": 2,
                                                          "system_prompt": "direct"}}
    steps = train(tmp_path, tiny, env)
    assert all(r["samples_used"] == 16 for r in steps)


@pytest.mark.slow
def test_skyrl_env_multi_turn_and_trains_two_steps(tmp_path, tiny, jsonl) -> None:
    pytest.importorskip("skyrl_gym")
    data = jsonl([{"prompt": [{"role": "user", "content": p}], "env_class": "retry_addition",
                   "reward_spec": {"method": "rule", "ground_truth": a}} for p, a in sums()])
    env_id = f"skyrl:{FILES / 'skyrl_env.py'}:RetryAdditionEnv"
    env = agentrl.make(env_id, dataset=data, max_turns=2)
    obs, _ = env.reset(options={"task": env.tasks[5]})  # 1+1=
    assert obs == "1+1="
    assert env.step("3")[:4] == ("Not quite. Try again:", 0.0, False, False)
    assert env.step("2")[1:3] == (1.0, True)
    steps = train(tmp_path, tiny, {"id": env_id, "kwargs": {"dataset": data, "max_turns": 2}})
    assert all(r["samples_used"] == 16 for r in steps)


def test_envs_list_shows_reasoning_gym(capsys) -> None:
    from agentrl.cli import main

    assert main(["envs", "list"]) == 0
    listed = capsys.readouterr().out.split()
    assert "reasoning_gym:leg_counting" in listed and "agentrl/GSM8K-v0" in listed
    assert len([x for x in listed if x.startswith("reasoning_gym:")]) == len(rg.factory.DATASETS)
