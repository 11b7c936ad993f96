"""What the SFT, reward-model and DPO stages share besides the optimizer loop
(:func:`agentrl.training.supervised.train_loop`): seeding, the run directory, the envs and model
path of a stage config, the tracker, and saving a Hugging Face directory atomically."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.config import DataConfig, RunConfig
from agentrl.rollout.build import make_env, resolve_model_path
from agentrl.runs import checkpoint as ckpt
from agentrl.runs.run_dir import prepare_run_dir, run_dir_path, save_run_config
from agentrl.runs.tracking import Tracker
from agentrl.training.supervised import LoopResult, MicroLoss, train_loop


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_dir_of(cfg: Any, run_dir: str | Path | None) -> Path:
    """Check the run directory (a new run never mixes with one already there: ``agentrl.runs.run_dir``),
    create it and save the resolved config beside it."""
    out = prepare_run_dir(run_dir_path(cfg, run_dir), command="agentrl sft|rm|dpo CONFIG")
    save_run_config(cfg, out)
    return out


def stage_envs(cfg: Any) -> tuple[Any, Any]:
    """The training env and the dev env of a stage config (for env-made records and the tiny model)."""
    run = RunConfig(env=cfg.env)
    return make_env(run), make_env(run, cfg.env.dev_kwargs)


def model_path_of(cfg: Any, env: Any) -> str:
    """``model.path``, or the locally built tiny model for ``tiny`` (as the RL trainer builds it)."""
    return resolve_model_path(RunConfig(model=cfg.model, env=cfg.env, data=DataConfig(seed=cfg.data.seed)), env)


def make_tracker(run_dir: Path, cfg: Any) -> Tracker:
    return Tracker(run_dir, cfg.log, cfg.optim.max_steps)


def save_hf(model: Any, tokenizer: Any, out: Path) -> Path:
    """Save a Hugging Face directory (model + tokenizer) atomically: written aside, then renamed."""
    import shutil

    tmp = out.with_name(f".tmp_{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def run_stage(name: str, cfg: Any, out: Path, model: Any, tokenizer: Any, items: Sequence[Any],
              micro_loss: MicroLoss, held_out: Callable[[], dict[str, float]]
              ) -> tuple[dict[str, float], LoopResult, dict[str, float]]:
    """The body every stage shares: evaluate (``held_out()``) at step 0, every ``optim.eval_every`` steps
    and at the end (an evaluation of the last step is reused), checkpoint every ``checkpoint.every``
    steps, log training metrics. Returns (metrics before, the loop's result, metrics after)."""
    tracker = make_tracker(out, cfg)
    evals: dict[int, dict[str, float]] = {}

    def evaluate_now(step: int) -> dict[str, float]:
        if step not in evals:
            m = held_out()
            tracker.log(step, m)
            tracker.print(f"{name} step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in m.items()))
            evals[step] = m
        return evals[step]

    def save(step: int, state: dict[str, Any]) -> None:
        ckpt.save_checkpoint(out, step, model, tokenizer, state, keep=cfg.checkpoint.keep)

    try:
        before = evaluate_now(0)
        result = train_loop(model, items, cfg.optim, micro_loss, on_eval=evaluate_now,
                            on_log=lambda s, m: tracker.log(s, {f"train/{k}": v for k, v in m.items()}),
                            on_save=save, save_every=cfg.checkpoint.every, seed=cfg.data.seed)
        after = evaluate_now(result.steps)
    finally:
        tracker.close()
    return before, result, after
