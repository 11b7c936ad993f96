"""Supervised fine-tuning: ``agentrl sft CONFIG`` and the warm start of RL runs (one trainer).

Examples are token-exact :class:`~agentrl.types.Trajectory` records whose action segments carry the
loss (the response, or every assistant turn of a chat); the loss is ``agentrl.algorithms.sft_loss``
normalised by the response tokens of the whole batch, so micro-batching does not change the step.

Packing (``sft.packing``) puts several examples in one row with a block-diagonal causal attention
mask (a 4D mask) and position ids restarting at 0 per example: exactly the log-probs of the unpacked
examples (tested), for models that accept 4D masks (Llama, Qwen2, Mistral, GPT-2 ...).

The warm start (``train_sft``) keeps the weights of the best dev accuracy (never the test split).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.algorithms import sft_loss
from agentrl.experience import Experience
from agentrl.learner import sequence_logprobs
from agentrl.stage_config import OptimConfig, SFTConfig
from agentrl.stage_runner import (
    make_tracker,
    model_path_of,
    run_dir_of,
    save_hf,
    seed_all,
    stage_envs,
    train_loop,
)
from agentrl.types import Segment, Trajectory


@dataclass
class SFTResult:
    """What a supervised run did."""

    steps: int
    best_dev_accuracy: float
    final_loss: float
    seconds: float
    history: list[tuple[int, float, float]]  # (step, train loss, dev accuracy)


@dataclass
class SFTBatch:
    """Model inputs of a micro-batch. R rows of T tokens, A = T-1."""

    sequences: torch.Tensor               # (R,T) long
    attention_mask: torch.Tensor          # (R,T) long, or (R,1,T,T) float additive when packed
    action_mask: torch.Tensor             # (R,A) float: 1 where token t+1 carries the loss
    position_ids: torch.Tensor | None = None  # (R,T) long, restarting per packed example


def pairs_to_experience(pairs: list[tuple[list[int], list[int]]], pad_id: int) -> Experience:
    """(prompt ids, response ids) pairs laid out like RL samples: loss mask on the response."""
    return Experience.from_trajectories(_as_trajectories(pairs), pad_id)


def _as_trajectories(examples: Sequence[Any]) -> list[Trajectory]:
    return [e if isinstance(e, Trajectory) else
            Trajectory(prompt_ids=list(e[0]), segments=[Segment(list(e[1]), True)], reward=0.0, task_id="",
                       group_id=i) for i, e in enumerate(examples)]


def pack(examples: Sequence[Any], pad_id: int, pack_length: int, dtype: torch.dtype = torch.float32) -> SFTBatch:
    """First-fit packing into rows of ``pack_length`` (an example longer than that gets its own row).

    The 4D mask lets a token see only earlier tokens of its own example; padding sees only itself.
    """
    trajs = _as_trajectories(examples)
    rows: list[list[Experience]] = []
    lengths: list[int] = []
    for t in sorted(trajs, key=lambda t: -(len(t.prompt_ids) + len(t.response_ids))):
        n = len(t.prompt_ids) + len(t.response_ids)
        k = next((i for i, used in enumerate(lengths) if used + n <= pack_length), None)
        if k is None:
            rows.append([])
            lengths.append(0)
            k = len(rows) - 1
        rows[k].append(Experience.from_trajectories([t], pad_id))
        lengths[k] += n
    T = max(lengths)
    R = len(rows)
    seq = torch.full((R, T), pad_id, dtype=torch.long)
    pos = torch.zeros((R, T), dtype=torch.long)
    seg = torch.zeros((R, T), dtype=torch.long)   # example number within the row, 0 = padding
    amask = torch.zeros((R, T - 1))
    for r, parts in enumerate(rows):
        at = 0
        for j, e in enumerate(parts, start=1):
            n = e.sequences.shape[1]
            seq[r, at:at + n] = e.sequences[0]
            pos[r, at:at + n] = torch.arange(n)
            seg[r, at:at + n] = j
            amask[r, at:at + n - 1] = e.action_mask[0]  # never across an example boundary
            at += n
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] > 0)
    allowed = (same & causal) | torch.eye(T, dtype=torch.bool)
    mask = torch.zeros((R, 1, T, T), dtype=dtype).masked_fill(~allowed[:, None], torch.finfo(dtype).min)
    return SFTBatch(seq, mask, amask, pos)


def make_batch(examples: Sequence[Any], pad_id: int, packing: bool = False, pack_length: int = 1024,
               dtype: torch.dtype = torch.float32) -> SFTBatch:
    """A padded batch (one example per row), or a packed one."""
    if packing:
        return pack(examples, pad_id, pack_length, dtype)
    e = Experience.from_trajectories(_as_trajectories(examples), pad_id)
    return SFTBatch(e.sequences, e.attention_mask, e.action_mask)


def batch_logprobs(model: Any, batch: SFTBatch) -> torch.Tensor:
    """Log-prob of each next token (R,A), through ``sequence_logprobs`` unless packed."""
    device = next(model.parameters()).device
    if batch.position_ids is None:
        lp, _ = sequence_logprobs(model, batch.sequences.to(device), batch.attention_mask.to(device))
        return lp
    seq = batch.sequences.to(device)
    logits = model(input_ids=seq, attention_mask=batch.attention_mask.to(device),
                   position_ids=batch.position_ids.to(device), use_cache=False).logits[:, :-1].float()
    return logits.gather(-1, seq[:, 1:].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def num_loss_tokens(examples: Sequence[Any]) -> int:
    return sum(t.num_action_tokens for t in _as_trajectories(examples))


def sft_micro_loss(model: Any, pad_id: int, packing: bool = False, pack_length: int = 1024):
    """The ``micro_loss`` of ``train_loop``: token-mean NLL over the whole batch's response tokens."""
    dtype = next(model.parameters()).dtype

    def micro_loss(micro: Sequence[Any], batch: Sequence[Any]) -> tuple[torch.Tensor, dict[str, float]]:
        b = make_batch(micro, pad_id, packing, pack_length, dtype)
        mask = b.action_mask.to(next(model.parameters()).device)
        loss = sft_loss(batch_logprobs(model, b), mask, num_tokens=num_loss_tokens(batch))
        return loss, {"loss": loss.item(), "rows": float(b.sequences.shape[0])}

    return micro_loss


@torch.no_grad()
def eval_loss(model: Any, examples: Sequence[Any], pad_id: int, micro_batch_size: int = 32) -> float:
    """Token-mean NLL of the loss tokens of ``examples`` (no gradients)."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for k in range(0, len(examples), max(1, micro_batch_size)):
        b = make_batch(examples[k:k + micro_batch_size], pad_id)
        mask = b.action_mask.to(next(model.parameters()).device)
        total -= float((batch_logprobs(model, b) * mask).sum())
        tokens += int(mask.sum())
    model.train(was_training)
    return total / max(tokens, 1)


def train_sft(model: Any, pairs: Sequence[Any], pad_id: int, *, lr: float, batch_size: int, max_steps: int,
              eval_every: int, patience: int, target_accuracy: float = 1.0,
              dev_accuracy: Callable[[], float] | None = None, seed: int = 0,
              log: Callable[[str], None] = print, micro_batch_size: int = 0) -> SFTResult:
    """The warm start: train until ``max_steps``, ``target_accuracy`` on dev, or ``patience``
    evaluations without progress. Keeps (and restores) the weights of the best dev accuracy.

    ``pairs``: (prompt ids, response ids) pairs or Trajectories (loss on their action segments).
    """
    optim = OptimConfig(lr=lr, batch_size=batch_size, micro_batch_size=micro_batch_size or batch_size,
                        max_steps=max_steps, eval_every=eval_every if dev_accuracy else 0, grad_clip=1.0,
                        log_every=1)
    best = {"acc": -1.0, "state": None, "stale": 0}
    history: list[tuple[int, float, float]] = []
    last_loss = [float("nan")]

    def on_log(step: int, metrics: dict[str, float]) -> None:
        last_loss[0] = metrics["loss"]

    def on_eval(step: int) -> bool:
        acc = dev_accuracy()
        history.append((step, last_loss[0], acc))
        log(f"warm start step {step}: loss {last_loss[0]:.3f}, dev accuracy {acc:.3f}")
        if acc > best["acc"]:
            best.update(acc=acc, state=copy.deepcopy(model.state_dict()), stale=0)
        else:
            best["stale"] += 1
        return bool(acc >= target_accuracy or best["stale"] >= patience)

    result = train_loop(model, list(pairs), optim, sft_micro_loss(model, pad_id), on_eval=on_eval,
                        on_log=on_log, seed=seed)
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    return SFTResult(result.steps, best["acc"], last_loss[0], result.seconds, history)


# ------------------------------------------------------------------ agentrl sft CONFIG
def greedy_accuracy(cfg: SFTConfig, model: Any, tokenizer: Any, env: Any, n: int) -> float:
    """Greedy success on ``n`` fixed held-out tasks of ``env``."""
    from agentrl.engines.base import SamplingParams
    from agentrl.engines.hf import HFEngine
    from agentrl.evaluation import evaluate, fixed_tasks
    from agentrl.executors import SingleTurnExecutor

    params = SamplingParams(max_new_tokens=cfg.sft.max_new_tokens, temperature=0.0)
    ex = SingleTurnExecutor(env, HFEngine(model, tokenizer), tokenizer, params,
                            chat_template=cfg.data.chat_template)
    return evaluate(ex, fixed_tasks(env, n, cfg.data.seed + 1000), params)["accuracy"]


def run_sft(cfg: SFTConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Fine-tune ``model.path`` on the configured records; the model goes to ``RUN/final``.

    Returns a summary: eval loss (and greedy accuracy) before and after, steps, seconds, paths.
    """
    from agentrl import checkpoint as ckpt
    from agentrl.components import load_policy, make_env
    from agentrl.config import RunConfig
    from agentrl.preference_data import encode_sft, stage_records

    seed_all(cfg.data.seed)
    out = run_dir_of(cfg, run_dir)
    env, dev_env = stage_envs(cfg)
    path = model_path_of(cfg, env)
    model, tok = load_policy(RunConfig(model=cfg.model), path)
    train_recs, eval_recs = stage_records(cfg, "sft", env, dev_env)
    train = [t for t in (encode_sft(r, tok, cfg.data) for r in train_recs) if t is not None]
    held = [t for t in (encode_sft(r, tok, cfg.data) for r in eval_recs) if t is not None]
    test_env = make_env(RunConfig(env=cfg.env), cfg.env.eval_kwargs) if cfg.sft.greedy_eval_tasks else None
    tracker = make_tracker(out, cfg)

    evals: dict[int, dict[str, float]] = {}

    def evaluate_now(step: int) -> dict[str, float]:
        if step in evals:
            return evals[step]
        m = {"eval/loss": eval_loss(model, held, tok.pad_token_id, cfg.optim.micro_batch_size)} if held else {}
        if test_env is not None:
            m["eval/greedy_accuracy"] = greedy_accuracy(cfg, model, tok, test_env, cfg.sft.greedy_eval_tasks)
        tracker.log(step, m)
        tracker.print(f"sft step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in m.items()))
        evals[step] = m
        return m

    def save(step: int, state: dict[str, Any]) -> None:
        ckpt.save_checkpoint(out, step, model, tok, state, keep=cfg.checkpoint.keep)

    try:
        before = evaluate_now(0)
        result = train_loop(model, train, cfg.optim,
                            sft_micro_loss(model, tok.pad_token_id, cfg.sft.packing, cfg.sft.pack_length),
                            on_eval=evaluate_now,
                            on_log=lambda s, m: tracker.log(s, {f"train/{k}": v for k, v in m.items()}),
                            on_save=save, save_every=cfg.checkpoint.every, seed=cfg.data.seed)
        after = evaluate_now(result.steps)
    finally:
        tracker.close()
    final = save_hf(model, tok, out / "final") if cfg.checkpoint.save_final else None
    return {"steps": result.steps, "seconds": result.seconds, "train_examples": len(train),
            "eval_examples": len(held), "before": before, "after": after,
            "final_loss": result.last.get("loss"), "model_dir": str(final) if final else None,
            "run_dir": str(out)}
