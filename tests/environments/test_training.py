"""GRPO end to end on multi-turn envs with the tiny model on CPU (a few steps each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.config import load_config
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.training.trainer import Trainer

COMMON = ["model.path=tiny", "model.device=cpu", "data.prompts_per_step=2", "data.eval_tasks=2",
          "rollout.n_samples=3", "rollout.temperature=1.0", "learner.total_steps=3", "learner.lr=1e-4",
          "log.tensorboard=false", "log.progress=false", "checkpoint.save_final=false",
          "algo.estimator=group_norm", "model.tiny.hidden_size=64", "model.tiny.num_heads=2",
          "model.tiny.num_layers=2", "model.tiny.intermediate_size=128"]


def metrics(run_dir: Path) -> list[dict]:
    path = next(run_dir.rglob("metrics.jsonl"), None)
    return [json.loads(line) for line in path.read_text().splitlines()] if path else []


def test_grpo_on_a_tool_env_runs_three_steps(tmp_path: Path) -> None:
    cfg = load_config(None, COMMON + [
        "env.id=agentrl/CalculatorMath-v0", "env.eval_kwargs={split: test}", "rollout.max_new_tokens=16",
        "env.kwargs={base: agentrl/Arithmetic-v0, max_tool_calls: 2, tools_prompt: 'Tools: {schemas}'}",
        "rollout.chat_template=true", "rollout.max_total_tokens=96"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    assert isinstance(trainer.executor, MultiTurnExecutor)
    summary = trainer.fit()
    assert summary["steps"] == 3
    trajs = trainer.rollout(trainer.tasks.next(2))
    assert all(t.num_action_tokens > 0 and len(t.response_ids) <= 96 for t in trajs)
    for t in trajs:
        for s in t.segments:
            assert not s.is_action or len(s.logprobs) == len(s.token_ids)


@pytest.mark.slow
def test_grpo_on_mbpp_retry_runs_three_steps(tmp_path: Path) -> None:
    cfg = load_config(None, COMMON + [
        "env.id=agentrl/MBPPRetry-v0", "env.kwargs={split: train, limit: 8, retries: 1}",
        "env.eval_kwargs={split: test, limit: 2}", "rollout.max_new_tokens=24"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    assert isinstance(trainer.executor, MultiTurnExecutor)
    assert trainer.fit()["steps"] == 3
