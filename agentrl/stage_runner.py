"""What the SFT, reward-model and DPO trainers share: the run directory, model resolution and the
optimizer loop (epochs of shuffled examples, micro-batches accumulated into one step per batch).

Each stage supplies ``micro_loss(micro, batch)``: the loss of the examples ``micro`` already scaled
by its share of ``batch`` (so the step does not depend on the micro-batch size) and metric sums.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.config import DataConfig, RunConfig, save_config
from agentrl.learner import make_optimizer
from agentrl.stage_config import OptimConfig
from agentrl.tracking import Tracker

MicroLoss = Callable[[Sequence[Any], Sequence[Any]], tuple[torch.Tensor, dict[str, float]]]


@dataclass
class LoopResult:
    """What an optimizer loop did."""

    steps: int
    seconds: float
    last: dict[str, float] = field(default_factory=dict)  # the last logged training metrics


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_dir_of(cfg: Any, run_dir: str | Path | None) -> Path:
    """Create the run directory and save the resolved config beside it."""
    out = Path(run_dir or cfg.log.run_dir.format(name=cfg.log.name))
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")
    return out


def stage_envs(cfg: Any) -> tuple[Any, Any]:
    """The training env and the dev env of a stage config (for env-made records and the tiny model)."""
    from agentrl.components import make_env

    run = RunConfig(env=cfg.env)
    return make_env(run), make_env(run, cfg.env.dev_kwargs)


def model_path_of(cfg: Any, env: Any) -> str:
    """``model.path``, or the locally built tiny model for ``tiny`` (as the RL trainer builds it)."""
    from agentrl.components import resolve_model_path

    return resolve_model_path(RunConfig(model=cfg.model, env=cfg.env, data=DataConfig(seed=cfg.data.seed)), env)


def batches(n: int, batch_size: int, rng: np.random.Generator):
    """Endless batches of indices: shuffled epochs over ``range(n)``; the last short batch of an epoch
    is joined with the start of the next, so every batch has ``min(batch_size, n)`` examples."""
    order: list[int] = []
    size = min(batch_size, n)
    while True:
        while len(order) < size:
            order += rng.permutation(n).tolist()
        yield order[:size]
        order = order[size:]


def train_loop(model: Any, items: Sequence[Any], optim: OptimConfig, micro_loss: MicroLoss, *,
               on_eval: Callable[[int], Any] | None = None,
               on_log: Callable[[int, dict[str, float]], None] | None = None,
               on_save: Callable[[int, dict[str, Any]], None] | None = None, save_every: int = 0,
               seed: int = 0) -> LoopResult:
    """``optim.max_steps`` optimizer steps over ``items``; ``on_eval(step)`` every ``optim.eval_every``
    steps (the last included) stops the loop by returning ``True``; ``on_save(step, state)`` every ``save_every`` steps gets the optimizer
    and scheduler states. Metrics of each step: the micro-batches' sums, grad norm, lr."""
    if not items:
        raise ValueError("no training examples (all empty or truncated away?)")
    params = [p for p in model.parameters() if p.requires_grad]
    opt, sched = make_optimizer(params, optim.lr, optim.weight_decay, optim.warmup_steps)
    clip = optim.grad_clip if optim.grad_clip > 0 else math.inf
    rng, start, step, metrics = np.random.default_rng(seed), time.perf_counter(), 0, {}
    model.train()
    for step, idx in enumerate(batches(len(items), optim.batch_size, rng), start=1):
        batch = [items[i] for i in idx]
        opt.zero_grad(set_to_none=True)
        metrics = {}
        for k in range(0, len(batch), max(1, optim.micro_batch_size)):
            loss, m = micro_loss(batch[k:k + optim.micro_batch_size], batch)
            loss.backward()
            for key, v in m.items():
                metrics[key] = metrics.get(key, 0.0) + v
        metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, clip))
        metrics["lr"] = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        if on_log is not None and (step % max(1, optim.log_every) == 0 or step == optim.max_steps):
            on_log(step, metrics)
        if on_save is not None and save_every and step % save_every == 0:
            on_save(step, {"optimizer": opt.state_dict(), "scheduler": sched.state_dict()})
        if on_eval is not None and optim.eval_every and step % optim.eval_every == 0:
            if on_eval(step) is True:
                break
            model.train()
        out_of_time = bool(optim.max_seconds) and time.perf_counter() - start > optim.max_seconds
        if step >= optim.max_steps or out_of_time:
            break
    return LoopResult(step, time.perf_counter() - start, metrics)


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
