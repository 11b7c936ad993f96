"""Helpers of the adapter tests: small datasets and a 2-step ``agentrl train`` on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.cli import main

FILES = Path(__file__).resolve().parent / "user_files"
ROOT = Path(__file__).resolve().parents[2]
SMALL = ["model.warm_start.enabled=false", "data.prompts_per_step=4", "rollout.n_samples=4",
         "data.eval_tasks=2", "log.progress=false", "log.tensorboard=false", "learner.max_seconds=0",
         "algo.drop_zero_std_groups=false", "learner.total_steps=2", "checkpoint.save_final=false",
         "rollout.max_new_tokens=4", "eval.n_samples=1", "eval.k=[1]"]


def sums(n: int = 16) -> list[tuple[str, str]]:
    """``n`` (prompt, answer) pairs of one-digit additions."""
    return [(f"{a}+{b}=", str(a + b)) for a in range(4) for b in range(4)][:n]


@pytest.fixture
def jsonl(tmp_path: Path):
    """Write rows to a JSONL file under tmp_path and return its path."""
    def write(rows: list[dict[str, Any]], name: str = "data.jsonl") -> str:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(path)
    return write


@pytest.fixture(scope="session")
def tiny() -> str:
    """The CPU demo's tiny model (byte-level tokenizer: any text), shared with the other CLI tests' cache."""
    from agentrl.config import load_config
    from agentrl.rollout.build import make_env, resolve_model_path

    cfg = load_config(ROOT / "examples" / "configs" / "cpu_demo.yaml")
    return resolve_model_path(cfg, make_env(cfg))


def train(tmp_path: Path, model: str, env: dict[str, Any], *overrides: str, reward: dict[str, Any] | None = None,
          expect_steps: list[int] | None = None) -> list[dict[str, Any]]:
    """``agentrl train`` (in process, through the CLI's main) for 2 steps (or ``expect_steps``); the metrics
    rows of the steps."""
    cfg = {"model": {"path": model}, "env": env, "algo": {"estimator": "group_norm"}, "log": {"name": "adapter"}}
    if reward:
        cfg["reward"] = reward
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    assert main(["train", str(path), *SMALL, *overrides, "--run-dir", str(run)]) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss/policy_loss" in r]
    assert [r["step"] for r in steps] == (expect_steps or [1, 2])
    return steps
