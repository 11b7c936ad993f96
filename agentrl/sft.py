"""Supervised fine-tuning on (prompt, response) token pairs — the warm start of RL runs.

Loss only on response tokens (``agentrl.algorithms.sft_loss``), through the same
``sequence_logprobs`` as RL. Early stopping is chosen on a dev split (never the held-out test set):
the best dev accuracy's weights are kept.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentrl.algorithms import sft_loss
from agentrl.experience import Experience
from agentrl.learner import make_optimizer, sequence_logprobs
from agentrl.types import Segment, Trajectory


@dataclass
class SFTResult:
    """What a supervised run did."""

    steps: int
    best_dev_accuracy: float
    final_loss: float
    seconds: float
    history: list[tuple[int, float, float]]  # (step, train loss, dev accuracy)


def pairs_to_experience(pairs: list[tuple[list[int], list[int]]], pad_id: int) -> Experience:
    """(prompt ids, response ids) pairs laid out like RL samples: loss mask on the response."""
    trajs = [Trajectory(prompt_ids=p, segments=[Segment(r, True)], reward=0.0, task_id="", group_id=i)
             for i, (p, r) in enumerate(pairs)]
    return Experience.from_trajectories(trajs, pad_id)


def train_sft(model: Any, pairs: list[tuple[list[int], list[int]]], pad_id: int, *, lr: float,
              batch_size: int, max_steps: int, eval_every: int, patience: int,
              target_accuracy: float = 1.0, dev_accuracy: Callable[[], float] | None = None,
              seed: int = 0, log: Callable[[str], None] = print) -> SFTResult:
    """Train until ``max_steps``, ``target_accuracy`` on dev, or ``patience`` evals without progress.

    Keeps (and restores) the weights of the best dev accuracy.
    """
    rng = np.random.default_rng(seed)
    opt, _ = make_optimizer(model.parameters(), lr, 0.0, 0)
    best_acc, best_state, stale, history = -1.0, None, 0, []
    start, loss_val, step = time.perf_counter(), float("nan"), 0
    model.train()
    for step in range(1, max_steps + 1):
        idx = rng.choice(len(pairs), size=min(batch_size, len(pairs)), replace=False)
        batch = pairs_to_experience([pairs[i] for i in idx], pad_id)
        lp, _ = sequence_logprobs(model, batch.sequences, batch.attention_mask)
        loss = sft_loss(lp, batch.action_mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_val = loss.item()
        if dev_accuracy is None or step % eval_every:
            continue
        acc = dev_accuracy()
        model.train()
        history.append((step, loss_val, acc))
        log(f"warm start step {step}: loss {loss_val:.3f}, dev accuracy {acc:.3f}")
        if acc > best_acc:
            best_acc, best_state, stale = acc, copy.deepcopy(model.state_dict()), 0
        else:
            stale += 1
        if acc >= target_accuracy or stale >= patience:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    return SFTResult(step, best_acc, loss_val, time.perf_counter() - start, history)
