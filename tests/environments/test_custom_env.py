"""The user-env example (examples/custom_env): the env itself, and one CLI command that trains it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

import agentrl

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_env"


@pytest.fixture()
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))


def test_user_env_by_module_path(on_path: None) -> None:
    env = agentrl.make("reverse_env:ReverseEnv", max_len=4)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=3)
    word = info["task"].id.removeprefix("reverse-")
    assert obs == f"Reverse the word: {word}\nAnswer:"
    assert env.step(word[::-1])[1] == 1.0
    env.reset(seed=3)
    _, reward, terminated, _, info = env.step("zzzzzz")
    assert 0.0 <= reward < 0.5 and terminated and info["reward_components"]["correct"] == 0.0


def test_user_env_splits_are_disjoint(on_path: None) -> None:
    import numpy as np

    train, test = agentrl.make("reverse_env:ReverseEnv"), agentrl.make("reverse_env:ReverseEnv", split="test")
    rng = np.random.default_rng(0)
    train_words = {train.sample_task(rng).id for _ in range(300)}
    test_words = {test.sample_task(rng).id for _ in range(100)}
    assert train_words and test_words and not train_words & test_words


def test_custom_env_trains_from_the_cli(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLE), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "agentrl.cli", "train", "--run-dir", str(tmp_path), str(EXAMPLE / "config.yaml"),
           "learner.total_steps=3", "data.prompts_per_step=4", "rollout.n_samples=4", "data.eval_tasks=8",
           "model.warm_start.enabled=false",
           "log.tensorboard=false", "log.progress=false", "checkpoint.save_final=false"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=EXAMPLE.parents[1])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "held-out accuracy" in out.stdout
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in steps if "reward/mean" in m]
    assert [m["step"] for m in trained] == [1, 2, 3]
    assert all(m["reward/mean"] >= 0.0 for m in trained)
