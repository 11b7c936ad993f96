"""OpenRLHF files used unchanged: an agent file as the env, a reward_func as the run's reward and as a
reward-server plugin."""

from __future__ import annotations

import sys

import pytest

import agentrl
from agentrl.config import load_config
from agentrl.rollout.build import make_env
from agentrl.types import Task
from tests.adapters.conftest import FILES, sums, train


@pytest.mark.slow
def test_agent_file_trains_two_steps(tmp_path, jsonl, tiny):
    data = jsonl([{"question": p, "answer": a} for p, a in sums()])
    env = {"id": f"openrlhf:{FILES / 'agent_func.py'}",
           "kwargs": {"dataset": data, "prompt_key": "question", "label_key": "answer", "max_turns": 2}}
    steps = train(tmp_path, tiny, env)
    assert all(r["samples_used"] == 16 for r in steps)


def test_agent_file_episode_is_raw_text_and_rewards_sum(tmp_path, jsonl):
    data = jsonl([{"prompt": "1+1=", "label": "2"}])
    env = agentrl.make(f"openrlhf:{FILES / 'agent_func.py'}", dataset=data)
    obs, info = env.reset(options={"task": env.tasks[0]})
    assert obs == "1+1=" and env.raw_feedback
    fb, r1, done, _, step_info = env.step("3")
    assert (fb, r1, done) == (" wrong, again: ", 0.0, False)
    assert step_info["reward_components"] == {"scores": 0.0, "turn": 1.0}
    assert env.transcript == "1+1=3 wrong, again: "
    _, r2, done, _, _ = env.step(" 2")
    assert (r2, done) == (1.0, True)
    assert "openrlhf.utils.agent" in sys.modules  # the shim stands in for the package


def test_custom_execute_is_refused(tmp_path, jsonl):
    agent = tmp_path / "custom.py"
    agent.write_text((FILES / "agent_func.py").read_text() + (
        "\n    async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine):\n"
        "        return {}\n"))
    with pytest.raises(ValueError, match="custom execute is not supported"):
        agentrl.make(f"openrlhf:{agent}", dataset=jsonl([{"prompt": "a", "label": "b"}]))


@pytest.mark.slow
def test_reward_func_replaces_the_env_score(tmp_path, tiny):
    env = {"id": "agentrl/Arithmetic-v0", "kwargs": {"digits": 1, "terms": 2, "operators": "+",
                                                     "template": "{expr}=", "bare_answer": True}}
    steps = train(tmp_path, tiny, env, reward={"fn": f"{FILES / 'reward_func.py'}:reward_func"})
    assert all(r["reward/mean"] >= 0.1 for r in steps)  # the env alone gives 0.0 for a wrong answer
    env = make_env(load_config(None, ["env.id=agentrl/Arithmetic-v0", f"reward.fn={FILES}/reward_func.py:reward_func"]))
    env.reset(options={"task": Task("t", "1+2=", "3")})
    assert env.step("3")[1:3] == (1.0, True) and env.step("4")[1] == pytest.approx(0.1)
    assert env.step("3")[4]["reward_components"] == {"exact": 1.0, "scores": 1.0}


def test_cli_says_why_in_one_line(tmp_path, jsonl, capsys):
    from agentrl.cli import main

    agent = tmp_path / "custom.py"
    agent.write_text((FILES / "agent_func.py").read_text() + (
        "\n    async def execute(self, *args, **kwargs):\n        return await super().execute(*args, **kwargs)\n"))
    data = jsonl([{"prompt": "a", "label": "b"}])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"env:\n  id: openrlhf:{agent}\n  kwargs: {{dataset: {data}}}\n")
    assert main(["train", str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "custom execute is not supported" in err[0], err


def test_feedback_tokens_are_the_raw_text(tmp_path, jsonl, tiny):
    from agentrl.models import load_causal_lm, load_tokenizer
    from agentrl.rollout.build import make_executor
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.rollout.executors.agent import RawFeedbackExecutor

    data = jsonl([{"prompt": "1+1=", "label": "no such answer"}])
    cfg = load_config(None, [f"env.id=openrlhf:{FILES / 'agent_func.py'}", f"env.kwargs.dataset={data}",
                             "rollout.max_new_tokens=3", "rollout.n_samples=2"])
    env, tok = make_env(cfg), load_tokenizer(tiny)
    executor = make_executor(cfg, env, HFEngine(load_causal_lm(tiny, device="cpu"), tok), tok)
    assert isinstance(executor, RawFeedbackExecutor)
    for traj in executor.run(env.tasks):
        assert [s.is_action for s in traj.segments] == [True, False, True] and traj.reward == 0.0
        assert traj.segments[1].token_ids == tok(" wrong, again: ", add_special_tokens=False)["input_ids"]
        assert traj.prompt_ids == tok("1+1=", add_special_tokens=False)["input_ids"]
